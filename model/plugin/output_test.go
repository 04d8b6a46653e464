package plugin

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	w := &lineWriter{mu: &sync.Mutex{}, out: &out, prefix: "[p] "}
	for _, chunk := range []string{"hel", "lo\nwor", "ld\r\n", "\n", "tail"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if got, want := out.String(), "[p] hello\n[p] world\n[p] \n"; got != want {
		t.Errorf("before Flush: %q, want %q", got, want)
	}
	w.Flush()
	if got, want := out.String(), "[p] hello\n[p] world\n[p] \n[p] tail\n"; got != want {
		t.Errorf("after Flush: %q, want %q", got, want)
	}
	long := strings.Repeat("x", maxLine+10)
	out.Reset()
	_, _ = w.Write([]byte(long))
	if got := out.String(); got != "[p] "+long+"\n" {
		t.Errorf("a line past maxLine is not written at once: %d bytes out", len(got))
	}
}

// FuzzLineWriter checks that whatever a plugin prints, in whatever pieces,
// comes out as prefixed lines that keep every byte but line ends.
func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("hello\nworld"), 3)
	f.Add([]byte("\n\n\r\n"), 1)
	f.Add([]byte("no newline at all"), 100)
	f.Fuzz(func(t *testing.T, data []byte, piece int) {
		if piece <= 0 {
			piece = 1
		}
		var out bytes.Buffer
		w := &lineWriter{mu: &sync.Mutex{}, out: &out, prefix: "> "}
		for rest := data; len(rest) > 0; {
			n := min(piece, len(rest))
			_, _ = w.Write(rest[:n])
			rest = rest[n:]
		}
		w.Flush()
		var kept []byte
		if out.Len() > 0 {
			for line := range strings.SplitSeq(strings.TrimSuffix(out.String(), "\n"), "\n") {
				if !strings.HasPrefix(line, "> ") {
					t.Fatalf("line %q has no prefix", line)
				}
				kept = append(kept, strings.TrimPrefix(line, "> ")...)
			}
		}
		if bytes.Contains(data, []byte("\r")) {
			return // a line's ending \r is dropped: the count is not exact
		}
		if want := bytes.ReplaceAll(data, []byte("\n"), nil); !bytes.Equal(kept, want) {
			t.Fatalf("output lost bytes: kept %q of %q", kept, data)
		}
	})
}

// The last line kept for a start's error is cut as an error's text is,
// saying how much was cut of the whole line.
func TestTheLastLineIsCutToAnErrorsLength(t *testing.T) {
	var last atomic.Pointer[string]
	w := &lineWriter{mu: &sync.Mutex{}, last: &last}
	if _, err := w.Write(append(bytes.Repeat([]byte{'x'}, 10000), '\n')); err != nil {
		t.Fatal(err)
	}
	got := last.Load()
	if want := fmt.Sprintf("… (%d more bytes cut)", 10000-maxErrorText); got == nil || !strings.HasSuffix(*got, want) || len(*got) > maxErrorText+len(want) {
		t.Fatalf("last line kept: %.40q… (%d bytes); want %d bytes of it, then %q", deref(got), len(deref(got)), maxErrorText, want)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
