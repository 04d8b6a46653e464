package supervisor_test

import (
	"bytes"
	"context"
	"testing"
)

// growEnv, in a worker's environment, makes the worker's model answer
// each item with three copies of it: answers larger than their batch.
const growEnv = "SUPERVISOR_TEST_GROW"

// grows is the model growEnv asks for.
type grows struct{}

func (grows) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	out := make([][]byte, len(items))
	for i, it := range items {
		out[i] = bytes.Repeat(it, 3)
	}
	return out, nil
}

func (grows) Close() error { return nil }

// TestWorkersWriteFramesTheSupervisorReads: a supervisor that reads frames
// of 1 MiB at most (Process.MaxFrame) tells its workers so, and a batch
// whose answer is larger comes back in parts that fit, where a worker
// that knew only the default limit wrote it whole, and was taken for
// broken: killed, a restart spent, and its batch split up to run again.
func TestWorkersWriteFramesTheSupervisorReads(t *testing.T) {
	cfg := processConfig("echo", 1, 4)
	cfg.Process.MaxFrame = 1 << 20
	cfg.Process.Env = []string{growEnv + "=1"}
	cfg.MaxBatchBytes = 1 << 19
	s := start(t, cfg)
	batch := make([][]byte, 4)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{byte('a' + i)}, 100<<10) // 300 KiB answered: 1.2 MiB in all
	}
	out, err := s.Predict(context.Background(), batch)
	if err != nil {
		t.Fatalf("a batch answered in 1.2 MiB through frames of 1 MiB: %v", err)
	}
	for i, o := range out {
		if !bytes.Equal(o, bytes.Repeat(batch[i], 3)) {
			t.Errorf("answer %d: %d bytes; want item %d three times", i, len(o), i)
		}
	}
	if crashes := s.Slots()[0].Crashes; crashes != 0 {
		t.Errorf("%d workers died; want none", crashes)
	}
}
