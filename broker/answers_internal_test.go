package broker

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// someAnswers are answers of every kind: outputs empty, binary and long
// (a length of several varint bytes), and failures.
func someAnswers() []answerEntry {
	return []answerEntry{
		{seq: "1", index: "0", output: []byte("out")},
		{seq: "1", index: "1", output: []byte{}},
		{seq: "2", index: "0", output: []byte{0x80, 0xff, 0, 1}},
		{seq: "18446744073709551615", index: "4095", output: bytes.Repeat([]byte("x"), 70000)},
		{seq: "3", index: "2", err: fmt.Errorf("%w: item 2 is not valid", supervisor.ErrModel)},
		{seq: "4", index: "0", err: errors.New("the worker died")},
	}
}

func TestPackedAnswersReadBackAsWritten(t *testing.T) {
	var buf []byte
	want := someAnswers()
	for i := range want {
		buf = appendAnswer(buf, &want[i])
	}
	var got []packedAnswer
	if err := eachAnswer(string(buf), func(a packedAnswer) { got = append(got, a) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d answers; want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.seq != w.seq || g.index != w.index || g.failed != (w.err != nil) {
			t.Errorf("answer %d: %+v; want seq %s index %s failed %v", i, g, w.seq, w.index, w.err != nil)
			continue
		}
		if w.err == nil && g.output != string(w.output) {
			t.Errorf("answer %d: output of %d bytes; want %d", i, len(g.output), len(w.output))
		}
		if w.err != nil && (g.code != codeOf(w.err) || g.msg != w.err.Error()) {
			t.Errorf("answer %d: failure %q %q; want %q %q", i, g.code, g.msg, codeOf(w.err), w.err.Error())
		}
	}
}

func TestPackedAnswersCutShortAreRefused(t *testing.T) {
	var buf []byte
	answers := someAnswers()
	ends := map[int]bool{} // where a whole record ends: a valid cut
	for i := range answers {
		buf = appendAnswer(buf, &answers[i])
		ends[len(buf)] = true
	}
	for n := range len(buf) {
		err := eachAnswer(string(buf[:n]), func(packedAnswer) {})
		if ends[n] || n == 0 {
			if err != nil {
				t.Fatalf("cut after a whole record (%d bytes): %v", n, err)
			}
			continue
		}
		if !errors.Is(err, errPackedAnswers) {
			t.Fatalf("cut inside a record (%d of %d bytes): err %v; want errPackedAnswers", n, len(buf), err)
		}
	}
	// A length past 64 bits.
	long := append(bytes.Repeat([]byte{0x80}, 9), 2)
	if err := eachAnswer(string(long), func(packedAnswer) {}); !errors.Is(err, errPackedAnswers) {
		t.Fatalf("a length past 64 bits: %v; want it refused", err)
	}
	bad := append(appendString(appendString(nil, "1"), "0"), 7)
	if err := eachAnswer(string(bad), func(packedAnswer) {}); !errors.Is(err, errPackedAnswers) || !strings.Contains(err.Error(), "kind 7") {
		t.Fatalf("a record of kind 7: %v; want it refused, naming the kind", err)
	}
}

// TestRepliesSplitLargeAnswers: a flush's answers for one front end go in
// entries of about answerChunk bytes, a larger answer alone, in order.
func TestRepliesSplitLargeAnswers(t *testing.T) {
	var r replies
	out := bytes.Repeat([]byte("y"), 100<<10)
	for i := range 5 {
		r.add(&answerEntry{seq: "1", index: fmt.Sprint(i), output: out})
	}
	r.add(&answerEntry{seq: "2", index: "0", output: bytes.Repeat([]byte("z"), 2*answerChunk)})
	r.add(&answerEntry{seq: "3", index: "0", output: []byte("small")})
	var per []int
	var order []string
	for _, chunk := range r.chunks {
		n := 0
		if err := eachAnswer(string(chunk), func(a packedAnswer) { n++; order = append(order, a.seq+":"+a.index) }); err != nil {
			t.Fatal(err)
		}
		per = append(per, n)
	}
	if fmt.Sprint(per) != "[2 2 1 1 1]" {
		t.Errorf("answers per entry %v; want [2 2 1 1 1]: two of 100 KiB fit in %d bytes, the large one goes alone", per, answerChunk)
	}
	if want := "[1:0 1:1 1:2 1:3 1:4 2:0 3:0]"; fmt.Sprint(order) != want {
		t.Errorf("order %v; want %s", order, want)
	}

	// Failures, and many small answers, count their whole records.
	var many replies
	msg := errors.New(strings.Repeat("m", 100))
	for i := range 20000 {
		many.add(&answerEntry{seq: fmt.Sprint(i), index: "0", err: msg})
	}
	for i, chunk := range many.chunks {
		if len(chunk) > answerChunk {
			t.Fatalf("entry %d of %d: %d bytes of failures; want at most %d", i, len(many.chunks), len(chunk), answerChunk)
		}
	}
}

func FuzzEachAnswer(f *testing.F) {
	var buf []byte
	answers := someAnswers()
	for i := range answers {
		buf = appendAnswer(buf, &answers[i])
	}
	f.Add(buf[:200])
	f.Add([]byte{1, '1', 1, '0', 1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Whatever it reads, packed again, reads back the same.
		var read []packedAnswer
		if err := eachAnswer(string(data), func(a packedAnswer) { read = append(read, a) }); err != nil {
			return
		}
		var again []byte
		for _, a := range read {
			e := answerEntry{seq: a.seq, index: a.index, output: []byte(a.output)}
			if a.failed {
				e.err = errorOf(a.code, a.msg)
			}
			again = appendAnswer(again, &e)
		}
		var back []packedAnswer
		if err := eachAnswer(string(again), func(a packedAnswer) { back = append(back, a) }); err != nil {
			t.Fatalf("%q read as answers that pack to %q, which does not read: %v", data, again, err)
		}
		if len(back) != len(read) {
			t.Fatalf("%q: %d answers, packed again %d", data, len(read), len(back))
		}
		for i := range read {
			if read[i].seq != back[i].seq || read[i].index != back[i].index || read[i].output != back[i].output || read[i].msg != back[i].msg {
				t.Fatalf("%q: answer %d read %+v, packed again %+v", data, i, read[i], back[i])
			}
		}
	})
}

// TestItemHeadersRead: a header reads as a front end writes it; one
// whose front end's id, request number or place is not of the form front
// ends write names no front end, so that no reply stream is made for it;
// and a TTL is bounded by MaxReplyTTL.
func TestItemHeadersRead(t *testing.T) {
	const f = "0123456789abcdef" // a front end's id
	for _, tt := range []struct {
		header string
		want   itemHeader
	}{
		{f + " 42 7 1764000000000000 60000", itemHeader{f, "42", "7", 1764000000000000, time.Minute}},
		{f + " 1 0 0", itemHeader{f, "1", "0", 0, 0}},             // no TTL: the node's own
		{f + " 1 0 -5 -5", itemHeader{f, "1", "0", -5, 0}},        // a deadline of 0 or less is none
		{f + " 1 0 0 60000 extra", itemHeader{f, "1", "0", 0, 0}}, // a TTL that does not read
		{f + " 1 0 0 86400000", itemHeader{f, "1", "0", 0, MaxReplyTTL}},
		{f + " 1 0 0 999999999999999", itemHeader{f, "1", "0", 0, MaxReplyTTL}}, // years: bounded
		{f + " 1 0 0 9223372036854775807", itemHeader{f, "1", "0", 0, MaxReplyTTL}},
	} {
		if hd, ok := parseHeader(tt.header); !ok || hd != tt.want {
			t.Errorf("parseHeader(%q) = %+v, %v; want %+v", tt.header, hd, ok, tt.want)
		}
	}
	for _, tt := range []struct{ header, front string }{
		{"", ""}, {f, ""}, {f + " 1 0", f}, {f + " 1 0 x 60000", f}, // told: the deadline does not read
		{" 1 0 0 60000", ""}, {f + "  0 0 60000", ""},
		{"garbage", ""}, {"garbage 1 0 0 60000", ""}, {"deadbeef2 1 0 0 999999999999999", ""},
		{"0123456789ABCDEF 1 0 0 60000", ""}, {f + "0 1 0 0 60000", ""}, {"../x/0123456789a 1 0 0 60000", ""},
		{f + " -1 0 0 60000", ""}, {f + " 1 x 0 60000", ""}, {f + " 1 +0 0 60000", ""},
	} {
		hd, ok := parseHeader(tt.header)
		if ok || hd.front != tt.front {
			t.Errorf("parseHeader(%q) = %+v, %v; want it refused, with the front end %q", tt.header, hd, ok, tt.front)
		}
	}
	if id := randomHex(frontIDBytes); !frontID(id) {
		t.Errorf("a front end's id, %q, is not of the form parseHeader takes", id)
	}
}

// FuzzItemHeaders: whatever a header holds, one that reads names a front
// end of the form front ends write, a request number and place in
// decimal, and a TTL within MaxReplyTTL; and a header as a front end
// writes it reads back as written.
func FuzzItemHeaders(f *testing.F) {
	f.Add("0123456789abcdef 42 7 1764000000000000 60000")
	f.Add("garbage 1 0 0 999999999999999")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		hd, ok := parseHeader(h)
		if hd.front != "" && (!frontID(hd.front) || !decimal(hd.seq) || !decimal(hd.index)) {
			t.Fatalf("parseHeader(%q) names %+v", h, hd)
		}
		if ok && hd.front == "" {
			t.Fatalf("parseHeader(%q) reads, naming no front end", h)
		}
		if hd.ttl < 0 || hd.ttl > MaxReplyTTL {
			t.Fatalf("parseHeader(%q): TTL %s", h, hd.ttl)
		}
	})
}
