package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestSkipMsgpackDepth(t *testing.T) {
	nested := []byte{0x91, 0x91, 0x01} // [[1]]
	for _, tt := range []struct {
		maxDepth int
		ok       bool
	}{{0, false}, {1, false}, {2, true}, {MaxDepth, true}} {
		n, err := SkipMsgpack(append(nested, 0xc0), tt.maxDepth)
		if tt.ok && (err != nil || n != len(nested)) {
			t.Errorf("SkipMsgpack([[1]], %d) = %d, %v; want %d", tt.maxDepth, n, err, len(nested))
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "nesting deeper than")) {
			t.Errorf("SkipMsgpack([[1]], %d) = %d, %v; want a nesting error", tt.maxDepth, n, err)
		}
	}
}

func TestMsgpackReader(t *testing.T) {
	data := decodeHex(t, "94"+"c0"+"a26869"+"cf8000000000000000"+"d0fe")
	r := NewMsgpackReader(data)
	defer r.Release()
	if n, err := r.ArrayLen(); n != 4 || err != nil {
		t.Fatalf("ArrayLen = %d, %v", n, err)
	}
	if n, err := r.ArrayLen(); n != -1 || err != nil {
		t.Fatalf("ArrayLen of nil = %d, %v; want -1", n, err)
	}
	s, err := r.StringBytes()
	if string(s) != "hi" || err != nil || &s[0] != &data[r.Offset()-2] {
		t.Fatalf("StringBytes = %q, %v; want a sub-slice holding hi", s, err)
	}
	_, err = r.Int64()
	var e *Error
	if !errors.As(err, &e) || e.Offset != 5 || !strings.Contains(e.Problem, "out of range") || r.Offset() != 5 {
		t.Fatalf("Int64 of 1<<63: %v", err)
	}
	r = NewMsgpackReader(data[14:])
	defer r.Release()
	if v, err := r.Int64(); v != -2 || err != nil || r.Len() != 0 {
		t.Fatalf("Int64 = %d, %v, %d bytes left", v, err, r.Len())
	}
}

func TestMsgpackReaderRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, hex string
		read      func(*MsgpackReader) error
		want      string
	}{
		{"lying array", "dd7fffffff", func(r *MsgpackReader) error { _, err := r.ArrayLen(); return err }, "offset 5: truncated: 2147483647 elements announced, 0 bytes left"},
		{"lying map", "8301", func(r *MsgpackReader) error { _, err := r.MapLen(); return err }, "offset 1: truncated: 3 elements announced, 1 bytes left"},
		{"not an array", "a0", func(r *MsgpackReader) error { _, err := r.ArrayLen(); return err }, "offset 0: want an array, found code 0xa0"},
		{"lying bin", "c40501", func(r *MsgpackReader) error { _, err := r.Bin(); return err }, "offset 2: truncated: want 5 more bytes, have 1"},
		{"string for bin", "a0", func(r *MsgpackReader) error { _, err := r.Bin(); return err }, "offset 0: want bytes (msgpack bin), found a string"},
		{"empty", "", func(r *MsgpackReader) error { _, err := r.PeekCode(); return err }, "offset 0: truncated: want a value"},
		{"float for int", "cb3ff0000000000000", func(r *MsgpackReader) error { _, err := r.Int64(); return err }, "offset 0: want an integer, found code 0xcb"},
		{"skip too deep", strings.Repeat("91", MaxDepth+1) + "01", func(r *MsgpackReader) error { _, err := r.Skip(0); return err }, "nesting deeper than 10000"},
		{"skip truncated", "0192", func(r *MsgpackReader) error { _, _ = r.Skip(0); _, err := r.Skip(0); return err }, "offset 2: truncated: 2 elements announced, 0 bytes left"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewMsgpackReader(decodeHex(t, tt.hex))
			defer r.Release()
			err := tt.read(r)
			if _, ok := offsetOf(err); !ok || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want an *Error or *LengthError containing %q", err, tt.want)
			}
			if r.Offset() != 0 && !strings.Contains(tt.name, "skip truncated") {
				t.Errorf("after the error the reader is at %d, want it not moved", r.Offset())
			}
		})
	}
}
