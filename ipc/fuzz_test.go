package ipc_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/streamer-dev/streamer/ipc"
)

// fuzzMaxFrame keeps the fuzzers' frames small so that an announced length
// costs little and each run stays fast.
const fuzzMaxFrame = 1 << 20

// seedPayloads returns real encoded payloads (no length prefix) for the
// fuzzers to mutate: every sample message except the largest.
func seedPayloads(tb testing.TB) [][]byte {
	var seeds [][]byte
	for _, tc := range sampleMessages(tb) {
		frame := encodeFrame(tb, &tc.msg)
		if len(frame) > 64<<10 {
			continue
		}
		seeds = append(seeds, frame[4:])
	}
	return seeds
}

func FuzzDecode(f *testing.F) {
	for _, p := range seedPayloads(f) {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m, err := ipc.Decode(payload)
		if err != nil {
			if !errors.Is(err, ipc.ErrCorruptFrame) {
				t.Fatalf("Decode failed with %v, which does not wrap ErrCorruptFrame", err)
			}
			return
		}
		checkReencodes(t, m)
	})
}

func FuzzReader(f *testing.F) {
	for _, p := range seedPayloads(f) {
		frame := encodeFrame(f, mustDecode(f, p))
		f.Add(frame)
		f.Add(append(bytes.Clone(frame), frame...))
		f.Add(frame[:len(frame)/2])
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		r := ipc.NewReader(bytes.NewReader(stream), fuzzMaxFrame)
		// Every frame takes at least its 4-byte header, so this loop ends.
		for frames := 0; ; frames++ {
			if frames > len(stream)/4 {
				t.Fatalf("read %d frames from %d bytes", frames, len(stream))
			}
			m, err := r.Read()
			switch {
			case err == io.EOF, err == io.ErrUnexpectedEOF,
				errors.Is(err, ipc.ErrFrameTooLarge), errors.Is(err, ipc.ErrCorruptFrame):
				return
			case err != nil:
				t.Fatalf("Read failed with an unexpected error: %v", err)
			}
			checkReencodes(t, m)
		}
	})
}

func mustDecode(tb testing.TB, payload []byte) *ipc.Message {
	tb.Helper()
	m, err := ipc.Decode(payload)
	if err != nil {
		tb.Fatalf("seed does not decode: %v", err)
	}
	return &m
}

// checkReencodes asserts that a message the decoder accepted survives a trip
// through Writer and Reader unchanged, and that its encoding is stable.
func checkReencodes(t *testing.T, m ipc.Message) {
	t.Helper()
	var buf bytes.Buffer
	if err := ipc.NewWriter(&buf, fuzzMaxFrame*2).Write(&m); err != nil {
		t.Fatalf("accepted message does not encode: %v", err)
	}
	first := bytes.Clone(buf.Bytes())
	again, err := ipc.NewReader(&buf, fuzzMaxFrame*2).Read()
	if err != nil {
		t.Fatalf("re-encoded message does not read back: %v", err)
	}
	assertSame(t, again, m)
	if second := encodeFrame(t, &again); !bytes.Equal(first, second) {
		t.Fatalf("encoding is not stable:\n first %x\nsecond %x", first, second)
	}
}
