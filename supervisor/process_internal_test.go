package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/ipc"
)

// TestResultPartsJoin: the parts of an answer sent in several frames are
// joined into one result, item errors filled in where a part had none and
// expired items counted from the answer's first item; a part of another
// batch than the one running or the one begun, or more outputs than the
// running batch has items, break the protocol at that part.
func TestResultPartsJoin(t *testing.T) {
	// running is the slot's answer when batch 1 or 3 runs, with 6 items.
	running := func(id uint64) (int, bool) { return 6, id == 1 || id == 3 }
	var rp resultParts
	parts := []ipc.Message{
		{Kind: ipc.KindResultPart, BatchID: 3, Items: [][]byte{[]byte("a"), nil}, Expired: []int{1}},
		{Kind: ipc.KindResultPart, BatchID: 3, Items: [][]byte{nil, []byte("d")}, ItemErrors: []string{"too large", ""}},
	}
	for i := range parts {
		if err := rp.add(&parts[i], running); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	last := ipc.Message{Kind: ipc.KindResult, BatchID: 3, Items: [][]byte{nil, []byte("f")}, Expired: []int{0}}
	if err := rp.end(&last); err != nil {
		t.Fatal(err)
	}
	want := ipc.Message{Kind: ipc.KindResult, BatchID: 3,
		Items:      [][]byte{[]byte("a"), nil, nil, []byte("d"), nil, []byte("f")},
		ItemErrors: []string{"", "", "too large", "", "", ""},
		Expired:    []int{1, 4},
	}
	if !reflect.DeepEqual(last, want) {
		t.Errorf("joined %+v\nwant %+v", last, want)
	}
	next := ipc.Message{Kind: ipc.KindResult, BatchID: 4, Items: [][]byte{[]byte("g")}}
	if err := rp.end(&next); err != nil || len(next.Items) != 1 {
		t.Errorf("the next answer, in one frame: %v, %d outputs; want it as it came", err, len(next.Items))
	}

	oneItem := func(id uint64) (int, bool) { return 1, id == 1 }
	for _, tc := range []struct {
		name    string
		running func(id uint64) (int, bool)
		msgs    []ipc.Message
		want    string
	}{
		{"another batch's part", running, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 1, Items: [][]byte{nil}}, {Kind: ipc.KindResultPart, BatchID: 3, Items: [][]byte{nil}}}, "while answering batch 1"},
		{"another batch's end", running, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 1, Items: [][]byte{nil}}, {Kind: ipc.KindResult, BatchID: 2, Items: [][]byte{nil}}}, "with a result of batch 2"},
		{"a batch not running", running, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 2, Items: [][]byte{nil}}}, "batch 2, which is not the one it runs"},
		{"too many outputs", running, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 1, Items: make([][]byte, 4)}, {Kind: ipc.KindResultPart, BatchID: 1, Items: make([][]byte, 3)}}, "more outputs than the batch has items (6)"},
		{"more outputs than a small batch's items", oneItem, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 1, Items: [][]byte{nil}}, {Kind: ipc.KindResultPart, BatchID: 1, Items: [][]byte{nil}}}, "more outputs than the batch has items (1)"},
		{"item errors unmatched", running, []ipc.Message{{Kind: ipc.KindResultPart, BatchID: 1, Items: make([][]byte, 2), ItemErrors: []string{""}}}, "1 item errors for 2 outputs"},
	} {
		var rp resultParts
		var err error
		for i := range tc.msgs {
			if tc.msgs[i].Kind == ipc.KindResultPart {
				err = rp.add(&tc.msgs[i], tc.running)
			} else {
				err = rp.end(&tc.msgs[i])
			}
			if err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

// TestCutText: a worker's last words are cut to the limit at a character's
// start, saying how much was cut; shorter ones pass whole.
func TestCutText(t *testing.T) {
	if got := cutText("short", 10); got != "short" {
		t.Errorf("cutText(short) = %q", got)
	}
	long := strings.Repeat("é", 10) // two bytes each
	if got, want := cutText(long, 5), "éé… (16 more bytes cut)"; got != want {
		t.Errorf("cutText = %q, want %q", got, want)
	}
}

// A worker that dies while a batch is written to it breaks the pipe under
// the write, and the broken pipe was all its death said: its own last
// words (Go's "fatal error: out of memory"), which say why, come with it.
func TestAWriteToADyingWorkerKeepsItsLastWords(t *testing.T) {
	for _, tc := range []struct {
		reason error
		want   string
	}{
		{fmt.Errorf("send batch to worker: ipc: write batch: %w", &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE}),
			"broken pipe; its last words: fatal error: out of memory"},
		{errors.New("worker sent no heartbeat for 5s"), "worker sent no heartbeat for 5s"},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p := &process{in: r, toChild: w, exited: make(chan struct{}), killReason: tc.reason}
		words := "fatal error: out of memory"
		p.firstDeathLine.Store(&words)
		close(p.exited)
		if got := p.wait().Error(); !strings.HasSuffix(got, tc.want) {
			t.Errorf("death killed for %q: %q; want it to end %q", tc.reason, got, tc.want)
		}
	}
}

// The lines that say why a Go process died are told from the rest of its
// output, which ends with registers that say nothing: the runtime's, a C
// library's abort, an uncaught C++ exception.
func TestDeathLinesAreTheCauses(t *testing.T) {
	for line, want := range map[string]bool{
		"panic: runtime error: index out of range":                             true,
		"fatal error: out of memory":                                           true,
		"runtime/cgo: pthread_create failed: Resource temporarily unavailable": true,
		"runtime: failed to create new OS thread (have 9 already; errno=11)":   true,
		"terminate called after throwing an instance of 'Ort::Exception'":      true,
		"SIGABRT: abort":                  true,
		"SIGSEGV: segmentation violation": true,
		"gs     0x0":                      false,
		"SIGNAL: not one":                 false,
		"SIGx: lower case":                false,
		"goroutine 1 [running]:":          false,
		"Sig: no":                         false,
	} {
		if got := deathLine([]byte(line)); got != want {
			t.Errorf("deathLine(%q) = %v, want %v", line, got, want)
		}
		if level := lineLevel(line); (level == slog.LevelError) != want {
			t.Errorf("lineLevel(%q) = %v; want an error level %v", line, level, want)
		}
	}
}

// A worker's Fatal marked as a want of resources is no crash of the
// model's: its start is retried, backing off, without counting.
func TestAFatalForWantOfResourcesIsNotCounted(t *testing.T) {
	err := fatalError(ipc.FatalNoResources + "open model plugin: fork/exec ./p: resource temporarily unavailable")
	if startFailure(err) != crashNoResources || !strings.Contains(err.Error(), "for want of the machine's resources: open model plugin") {
		t.Errorf("fatalError: %v, cause %v; want a want of resources", err, startFailure(err))
	}
	if startFailure(fatalError("open model plugin: bad")) == crashNoResources {
		t.Error("an unmarked Fatal was taken for a want of resources")
	}
}
