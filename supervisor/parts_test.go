package supervisor_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/ipc"
)

// hostilePartsEnv, in a worker's environment, makes the worker one that
// answers each batch with parts that break the protocol, then waits
// without ending the answer: "other" sends parts of a batch it does not
// run, "more" more outputs than the batch has items; "recalled" gives the
// batch back, unasked.
const hostilePartsEnv = "SUPERVISOR_TEST_HOSTILE_PARTS"

// hostileParts runs this process as the worker hostilePartsEnv asks for,
// speaking the pipe protocol itself, and exits when its pipe ends.
func hostileParts(how string) {
	in := ipc.NewReader(os.NewFile(ipc.WorkerInFD, "in"), 0)
	out := ipc.NewWriter(os.NewFile(ipc.WorkerOutFD, "out"), 0)
	ready := &ipc.Ready{Version: ipc.Version, PID: os.Getpid(), Magic: ipc.Magic}
	if out.Write(&ipc.Message{Kind: ipc.KindHello, Ready: ready}) != nil {
		os.Exit(1)
	}
	if _, err := in.Read(); err != nil { // the init message
		os.Exit(1)
	}
	if out.Write(&ipc.Message{Kind: ipc.KindReady, Ready: &ipc.Ready{Version: ipc.Version, PID: os.Getpid(), Device: "cpu", Model: "hostile"}}) != nil {
		os.Exit(1)
	}
	for {
		m, err := in.Read()
		if err != nil || m.Kind != ipc.KindBatch {
			os.Exit(0)
		}
		id := m.BatchID
		if how == "recalled" {
			if out.Write(&ipc.Message{Kind: ipc.KindRecalled, BatchID: id}) != nil {
				os.Exit(0)
			}
			continue
		}
		if how == "other" {
			id += 1000
		}
		for range len(m.Items) + 1 {
			if out.Write(&ipc.Message{Kind: ipc.KindResultPart, BatchID: id, Items: [][]byte{[]byte("part")}}) != nil {
				os.Exit(0)
			}
		}
		// No KindResult: the supervisor must not wait for one to find
		// the breach.
	}
}

// TestResultPartsBreachKillsWorker: a worker that sends parts of the
// answer to a batch it does not run, or more outputs than the batch has
// items (though fewer than BatchSize), or that gives back a batch it was
// not asked for, is killed at the part that breaks the protocol, and the
// batch's callers are told why, rather than the
// supervisor holding the parts until the answer ends or the worker times
// out.
func TestResultPartsBreachKillsWorker(t *testing.T) {
	for _, tc := range []struct{ how, want string }{
		{"other", "which is not the one it runs"},
		{"more", "more outputs than the batch has items (1)"},
		{"recalled", "which it was not asked to give back"},
	} {
		t.Run(tc.how, func(t *testing.T) {
			cfg := processConfig("echo", 1, 64)
			cfg.Process.Env = []string{hostilePartsEnv + "=" + tc.how}
			cfg.WorkerTimeout = time.Minute // far past the test's deadline
			s := start(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := s.Predict(ctx, [][]byte{[]byte("one item")})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Predict: %v, want an error saying %q", err, tc.want)
			}
			if ctx.Err() != nil {
				t.Fatalf("the breach was found only when the caller gave up: %v", err)
			}
		})
	}
}
