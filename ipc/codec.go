package ipc

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/wire"
)

// messageFields is the number of elements in an encoded message array:
// kind, batch id, items, item errors, error, ready, TTLs, expired, spec.
// Messages of versions 1 and 2 had only the first six and eight; they are
// read, so that a worker of those versions is told apart by its Version.
const (
	messageFields   = 9
	messageFieldsV2 = 8
	messageFieldsV1 = 6
)

// readyFields is the number of entries in an encoded Ready map.
const readyFields = 5

// maxSkipDepth bounds how deeply an unknown Ready field may nest, so that a
// few megabytes of nested arrays cannot overflow the stack.
const maxSkipDepth = 32

// encoder appends messages to a reusable buffer.
type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// encode writes the frame for m (length prefix included) into e.buf.
func (e *encoder) encode(m *Message) error {
	e.buf.Reset()
	e.buf.Write([]byte{0, 0, 0, 0})
	enc := e.enc
	if err := enc.EncodeArrayLen(messageFields); err != nil {
		return err
	}
	if err := enc.EncodeUint8(uint8(m.Kind)); err != nil {
		return err
	}
	if err := enc.EncodeUint64(m.BatchID); err != nil {
		return err
	}
	if err := encodeItems(enc, m.Items); err != nil {
		return err
	}
	if err := encodeStrings(enc, m.ItemErrors); err != nil {
		return err
	}
	if err := enc.EncodeString(m.Error); err != nil {
		return err
	}
	if err := encodeReady(enc, m.Ready); err != nil {
		return err
	}
	if err := encodeInts(enc, m.TTLs); err != nil {
		return err
	}
	if err := encodeInts(enc, m.Expired); err != nil {
		return err
	}
	if err := enc.EncodeBytes(m.Spec); err != nil {
		return err
	}
	b := e.buf.Bytes()
	n := len(b) - frameHeader
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return nil
}

func encodeItems(enc *msgpack.Encoder, items [][]byte) error {
	if items == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(items)); err != nil {
		return err
	}
	for _, it := range items {
		if err := enc.EncodeBytes(it); err != nil {
			return err
		}
	}
	return nil
}

func encodeStrings(enc *msgpack.Encoder, ss []string) error {
	if ss == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(ss)); err != nil {
		return err
	}
	for _, s := range ss {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}

func encodeInts[T int | int64](enc *msgpack.Encoder, ns []T) error {
	if ns == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(ns)); err != nil {
		return err
	}
	for _, n := range ns {
		if err := enc.EncodeInt(int64(n)); err != nil {
			return err
		}
	}
	return nil
}

// encodeReady writes r as a map keyed by the msgpack tags of Ready, or nil.
func encodeReady(enc *msgpack.Encoder, r *Ready) error {
	if r == nil {
		return enc.EncodeNil()
	}
	return errors.Join(
		enc.EncodeMapLen(readyFields),
		enc.EncodeString("version"), enc.EncodeInt(int64(r.Version)),
		enc.EncodeString("pid"), enc.EncodeInt(int64(r.PID)),
		enc.EncodeString("device"), enc.EncodeString(r.Device),
		enc.EncodeString("model"), enc.EncodeString(r.Model),
		enc.EncodeString("magic"), enc.EncodeString(r.Magic),
	)
}

// Decode parses one frame payload (without its length prefix). Items in the
// result are sub-slices of payload: the caller must not reuse payload while
// they are in use. Any malformed input yields an error wrapping ErrCorruptFrame.
func Decode(payload []byte) (Message, error) {
	return newDecoder().decode(payload)
}

// decoder parses payloads. One is kept per Reader so that its msgpack
// decoder and scratch buffer are allocated once, not once per frame.
type decoder struct {
	payload []byte
	r       bytes.Reader
	dec     *msgpack.Decoder
}

func newDecoder() *decoder {
	d := &decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

func (d *decoder) decode(payload []byte) (Message, error) {
	d.payload = payload
	d.r.Reset(payload)
	m, err := d.message()
	// Let go of the payload: it belongs to the caller now.
	d.payload = nil
	d.r.Reset(nil)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrCorruptFrame, err)
	}
	return m, nil
}

func (d *decoder) message() (Message, error) {
	var m Message
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return m, err
	}
	if n != messageFields && n != messageFieldsV2 && n != messageFieldsV1 {
		return m, fmt.Errorf("message has %d fields, want %d", n, messageFields)
	}
	// Read the kind wide: DecodeUint8 would truncate 258 to a valid 2.
	kind, err := d.dec.DecodeUint64()
	if err != nil {
		return m, fmt.Errorf("kind: %w", err)
	}
	if kind < uint64(KindReady) || kind > uint64(KindRecalled) {
		return m, fmt.Errorf("unknown message kind %d", kind)
	}
	m.Kind = Kind(kind)
	if m.BatchID, err = d.dec.DecodeUint64(); err != nil {
		return m, fmt.Errorf("batch id: %w", err)
	}
	if m.Items, err = d.items(); err != nil {
		return m, fmt.Errorf("items: %w", err)
	}
	if m.ItemErrors, err = d.strings(); err != nil {
		return m, fmt.Errorf("item errors: %w", err)
	}
	if m.Error, err = d.dec.DecodeString(); err != nil {
		return m, fmt.Errorf("error: %w", err)
	}
	if m.Ready, err = d.ready(); err != nil {
		return m, fmt.Errorf("ready: %w", err)
	}
	if n >= messageFieldsV2 {
		if m.TTLs, err = d.ints(); err != nil {
			return m, fmt.Errorf("ttls: %w", err)
		}
		if len(m.TTLs) != 0 && len(m.TTLs) != len(m.Items) {
			// One per item or none: a worker reads item i's by its index.
			return m, fmt.Errorf("ttls: %d for %d items", len(m.TTLs), len(m.Items))
		}
		if m.Expired, err = d.indices(len(m.Items)); err != nil {
			return m, fmt.Errorf("expired: %w", err)
		}
	}
	if n == messageFields {
		if m.Spec, err = d.bytes(); err != nil {
			return m, fmt.Errorf("spec: %w", err)
		}
	}
	if d.r.Len() != 0 {
		return m, fmt.Errorf("%d trailing bytes", d.r.Len())
	}
	return m, nil
}

// checkLen refuses an array or map header that claims more elements than
// there are bytes left (each takes at least one), so that a corrupt header
// cannot make us allocate.
func (d *decoder) checkLen(n int, what string) error {
	if n > d.r.Len() {
		return fmt.Errorf("%s of %d elements in %d bytes", what, n, d.r.Len())
	}
	return nil
}

// arrayLen reads an array header; nil gives -1.
func (d *decoder) arrayLen() (int, error) {
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	return n, d.checkLen(n, "array")
}

func (d *decoder) items() ([][]byte, error) {
	n, err := d.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	items := make([][]byte, n)
	for i := range items {
		size, err := d.dec.DecodeBytesLen()
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		if size < 0 {
			continue
		}
		if size > d.r.Len() {
			return nil, fmt.Errorf("item %d: %d bytes claimed, %d left", i, size, d.r.Len())
		}
		start := len(d.payload) - d.r.Len()
		items[i] = d.payload[start : start+size : start+size]
		if _, err := d.r.Seek(int64(size), io.SeekCurrent); err != nil {
			return nil, err
		}
	}
	return items, nil
}

// bytes reads a bin value into a copy of its own: nil stays nil.
func (d *decoder) bytes() ([]byte, error) {
	size, err := d.dec.DecodeBytesLen()
	if err != nil || size < 0 {
		return nil, err
	}
	if size > d.r.Len() {
		return nil, fmt.Errorf("%d bytes claimed, %d left", size, d.r.Len())
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(&d.r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (d *decoder) strings() ([]string, error) {
	n, err := d.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	ss := make([]string, n)
	for i := range ss {
		if ss[i], err = d.dec.DecodeString(); err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
	}
	return ss, nil
}

func (d *decoder) ints() ([]int64, error) {
	n, err := d.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	ns := make([]int64, n)
	for i := range ns {
		if ns[i], err = d.dec.DecodeInt64(); err != nil {
			return nil, fmt.Errorf("%d: %w", i, err)
		}
	}
	return ns, nil
}

// indices reads increasing indices below n.
func (d *decoder) indices(n int) ([]int, error) {
	ns, err := d.ints()
	if err != nil || ns == nil {
		return nil, err
	}
	out := make([]int, len(ns))
	for i, v := range ns {
		if v < 0 || v >= int64(n) || (i > 0 && v <= int64(out[i-1])) {
			return nil, fmt.Errorf("%d: index %d out of order or not below %d", i, v, n)
		}
		out[i] = int(v)
	}
	return out, nil
}

// ready reads the map encodeReady writes. Unknown keys are skipped, so a
// newer worker may add fields without breaking an older supervisor.
func (d *decoder) ready() (*Ready, error) {
	n, err := d.dec.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, err
	}
	if err := d.checkLen(n, "map"); err != nil {
		return nil, err
	}
	r := new(Ready)
	for range n {
		key, err := d.dec.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		switch key {
		case "version":
			r.Version, err = d.dec.DecodeInt()
		case "pid":
			r.PID, err = d.dec.DecodeInt()
		case "device":
			r.Device, err = d.dec.DecodeString()
		case "model":
			r.Model, err = d.dec.DecodeString()
		case "magic":
			r.Magic, err = d.dec.DecodeString()
		default:
			err = d.skip()
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
	}
	return r, nil
}

// skip passes over one value of any type, refusing to nest deeper than
// maxSkipDepth, without copying what it skips.
func (d *decoder) skip() error {
	start := len(d.payload) - d.r.Len()
	n, err := wire.SkipMsgpack(d.payload[start:], maxSkipDepth)
	if err != nil {
		return err
	}
	_, err = d.r.Seek(int64(n), io.SeekCurrent)
	return err
}
