package httpapi

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestGRPCGzipReadsWhatItWrites: a message compressed by the compressor
// reads back as it was, through writers and readers taken again from
// their pools; data that is not gzip reads as the trailer that says why,
// and only a whole trailer counts as one.
func TestGRPCGzipReadsWhatItWrites(t *testing.T) {
	c := GRPCGzip()
	read := func(data []byte) []byte {
		t.Helper()
		r, err := c.Decompress(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Decompress: %v", err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if err := r.(io.Closer).Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for i, msg := range []string{"a message", strings.Repeat("xyz", 10000), ""} {
		var buf bytes.Buffer
		w, err := c.Compress(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, msg); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := read(buf.Bytes()); string(got) != msg {
			t.Errorf("message %d read back as %d bytes, want %d", i, len(got), len(msg))
		}
		if _, broken := notGzip(read(buf.Bytes())); broken {
			t.Errorf("message %d: good data read as broken", i)
		}
	}
	for data, want := range map[string]string{"plain bytes, not gzip": "gzip: invalid header", "": "unexpected EOF", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff\x4a": "unexpected EOF"} {
		why, broken := notGzip(read([]byte(data)))
		if !broken || !strings.Contains(why, want) {
			t.Errorf("data %q: read as broken %v, %q; want broken, %q", data, broken, why, want)
		}
	}
	trailer := appendGzipTrailer([]byte("prefix"), "why")
	if why, broken := notGzip(trailer); !broken || why != "why" {
		t.Errorf("a whole trailer: %v %q", broken, why)
	}
	if _, broken := notGzip(trailer[len("prefix")+1:]); broken {
		t.Error("a trailer without the first byte of its reason read as one")
	}
	if _, broken := notGzip(trailer[:len(trailer)-1]); broken {
		t.Error("a trailer without its last byte read as one")
	}
	if _, broken := notGzip(append([]byte("\xff\xff\xff\xff"), gzipTrailerMark...)); broken {
		t.Error("a trailer whose length is past its start read as one")
	}
}
