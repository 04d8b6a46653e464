package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A node writes the answers of one flush for one front end as a single
// reply entry: its fields say which node answered (fieldNode,
// fieldWorkers, fieldBusy) and fieldAnswers packs the answers, one record
// after another:
//
//	uvarint len, the request's number (decimal)
//	uvarint len, the item's place in it (decimal)
//	one byte: 0 for an output, 1 for a failure
//	0: uvarint len, the output
//	1: uvarint len, the error's code; uvarint len, its message
//
// One entry per flush rather than one per answer spares Redis, the node
// and the front end a command, an entry and a map of fields per answer.
// A front end also reads an entry of one answer in the fields of its
// own (fieldSeq, fieldIndex, fieldOutput or fieldCode and fieldMessage).

// answerChunk bounds the packed answers of one reply entry; a larger
// answer goes alone.
const answerChunk = 256 << 10

// replies are the answers of one flush for one front end, packed into
// entries of about answerChunk bytes, in order.
type replies struct {
	ttl    time.Duration // how long the front end's reply stream may wait unread
	chunks [][]byte
}

// add packs a's answer, into a new chunk when the last is full.
func (r *replies) add(a *answerEntry) {
	// The record's size, its lengths' varints counted at their largest.
	size := len(a.seq) + len(a.index) + len(a.output) + 1 + 4*binary.MaxVarintLen64
	if a.err != nil {
		size += len(codeOf(a.err)) + len(a.err.Error())
	}
	if len(r.chunks) == 0 || len(r.chunks[len(r.chunks)-1])+size > answerChunk {
		r.chunks = append(r.chunks, nil)
	}
	last := &r.chunks[len(r.chunks)-1]
	*last = appendAnswer(*last, a)
}

// Record kinds in packed answers.
const (
	recordOutput  = 0
	recordFailure = 1
)

// appendAnswer packs a's answer onto buf.
func appendAnswer(buf []byte, a *answerEntry) []byte {
	buf = appendString(buf, a.seq)
	buf = appendString(buf, a.index)
	if a.err != nil {
		buf = append(buf, recordFailure)
		buf = appendString(buf, codeOf(a.err))
		return appendString(buf, a.err.Error())
	}
	buf = append(buf, recordOutput)
	buf = binary.AppendUvarint(buf, uint64(len(a.output)))
	return append(buf, a.output...)
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// packedAnswer is one answer read from a reply entry. Its strings share
// the entry's memory.
type packedAnswer struct {
	seq, index string
	failed     bool
	output     string // when not failed
	code, msg  string // when failed
}

// errPackedAnswers says packed answers end early or hold a record of an
// unknown kind.
var errPackedAnswers = errors.New("packed answers cut short or of an unknown kind")

// eachAnswer calls fn with every answer packed in s, in order, and stops
// at the first malformed record: the answers after it in the entry are
// lost, and their callers get no answer before their deadline (only a
// node's bug or a stranger writing to the stream makes one).
func eachAnswer(s string, fn func(packedAnswer)) error {
	for len(s) > 0 {
		var a packedAnswer
		var ok bool
		if a.seq, s, ok = cutString(s); !ok {
			return errPackedAnswers
		}
		if a.index, s, ok = cutString(s); !ok || len(s) == 0 {
			return errPackedAnswers
		}
		kind := s[0]
		s = s[1:]
		switch kind {
		case recordOutput:
			if a.output, s, ok = cutString(s); !ok {
				return errPackedAnswers
			}
		case recordFailure:
			a.failed = true
			if a.code, s, ok = cutString(s); !ok {
				return errPackedAnswers
			}
			if a.msg, s, ok = cutString(s); !ok {
				return errPackedAnswers
			}
		default:
			return fmt.Errorf("%w: kind %d", errPackedAnswers, kind)
		}
		fn(a)
	}
	return nil
}

// cutString reads a uvarint length and that many bytes off the front of s.
func cutString(s string) (field, rest string, ok bool) {
	var n uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		if i == binary.MaxVarintLen64-1 && b > 1 {
			return "", "", false // past 64 bits
		}
		n |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			s = s[i+1:]
			if n > uint64(len(s)) {
				return "", "", false
			}
			return s[:n], s[n:], true
		}
	}
	return "", "", false
}

// answerBytes is about how many bytes of Redis's memory an entry of the
// reply stream holds: its answers, packed or in their own fields.
func answerBytes(values map[string]any) int {
	n := 0
	for _, field := range []string{fieldAnswers, fieldOutput, fieldMessage} {
		if v, ok := values[field].(string); ok {
			n += len(v)
		}
	}
	return n
}

// answersOf returns the answers of a reply entry: those packed in
// fieldAnswers, or the one in its own fields.
func answersOf(values map[string]any, fn func(packedAnswer)) error {
	if packed, ok := values[fieldAnswers].(string); ok {
		return eachAnswer(packed, fn)
	}
	a := packedAnswer{seq: str(values, fieldSeq), index: str(values, fieldIndex)}
	if code, failed := values[fieldCode]; failed {
		a.failed, a.code, a.msg = true, fmt.Sprint(code), str(values, fieldMessage)
	} else {
		a.output = str(values, fieldOutput)
	}
	fn(a)
	return nil
}
