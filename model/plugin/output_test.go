package plugin

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
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
// comes out as prefixed lines that keep every byte but line ends, and that
// the lines kept for its crash stay within their bound.
func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("hello\nworld"), 3)
	f.Add([]byte("\n\n\r\n"), 1)
	f.Add([]byte("no newline at all"), 100)
	f.Fuzz(func(t *testing.T, data []byte, piece int) {
		if piece <= 0 {
			piece = 1
		}
		var out bytes.Buffer
		var tail outputTail
		w := &lineWriter{mu: &sync.Mutex{}, out: &out, prefix: "> ", tail: &tail}
		for rest := data; len(rest) > 0; {
			n := min(piece, len(rest))
			_, _ = w.Write(rest[:n])
			rest = rest[n:]
		}
		w.Flush()
		if recent := tail.recent(); len(recent) > tailBytes+len("…") {
			t.Fatalf("the last lines kept for a crash are %d bytes, past their bound of %d", len(recent), tailBytes)
		}
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
	var tail outputTail
	w := &lineWriter{mu: &sync.Mutex{}, tail: &tail}
	if _, err := w.Write(append(bytes.Repeat([]byte{'x'}, 10000), '\n')); err != nil {
		t.Fatal(err)
	}
	got, ok := tail.last()
	if want := fmt.Sprintf("… (%d more bytes cut)", 10000-maxErrorText); !ok || !strings.HasSuffix(got, want) || len(got) > maxErrorText+len(want) {
		t.Fatalf("last line kept: %.40q… (%d bytes); want %d bytes of it, then %q", got, len(got), maxErrorText, want)
	}
}

// The lines a crash without last words is reported with: the last few
// that are not blank, trimmed, within tailBytes, the oldest dropped first.
func TestOutputTailRecent(t *testing.T) {
	long := strings.Repeat("y", 300)
	tests := []struct {
		name   string
		output string
		want   string
	}{
		{"nothing", "", ""},
		{"blank lines only", "\n  \n\t\n", ""},
		{"one line without an end", "the end", "the end"},
		{
			"a Python traceback",
			"Traceback (most recent call last):\n  File \"plugin.py\", line 40, in Predict\n    raise ValueError(\"bad input\")\nValueError: bad input\n\n",
			`File "plugin.py", line 40, in Predict | raise ValueError("bad input") | ValueError: bad input`,
		},
		{"older lines past the bound are dropped", "a\n" + long + "\n" + long + "\n", long},
		{"a last line past the bound is cut", "before\n" + strings.Repeat("z", 2000) + "\n", strings.Repeat("z", tailBytes) + "…"},
		{"a last line past an error's length is cut too", strings.Repeat("é", 5000) + "\n", strings.Repeat("é", tailBytes/2) + "…"},
		{"within the bound", "one\ntwo\n" + long + "\n", "one | two | " + long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tail outputTail
			w := &lineWriter{mu: &sync.Mutex{}, tail: &tail}
			_, _ = w.Write([]byte(tt.output))
			w.Flush()
			got := tail.recent()
			if got != tt.want {
				t.Errorf("recent() = %q, want %q", got, tt.want)
			}
			if len(got) > tailBytes+len("…") {
				t.Errorf("recent() is %d bytes, past its bound of %d", len(got), tailBytes)
			}
		})
	}
}

// Feeding the tail a line does not allocate once its buffers have grown:
// it sees every line of a plugin's life.
func TestOutputTailReusesItsBuffers(t *testing.T) {
	var tail outputTail
	line := []byte("a log line of a plugin that logs a lot")
	for range tailLines {
		tail.add(line)
	}
	if n := testing.AllocsPerRun(100, func() { tail.add(line) }); n != 0 {
		t.Errorf("add allocates %v times a line", n)
	}
}
