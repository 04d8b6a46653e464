package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// orphanEnv, in a worker's environment, names a file: the worker's model
// dies on the item "orphan", leaving behind a process of its own that
// holds its stderr, whose pid it appends to that file.
const orphanEnv = "SUPERVISOR_TEST_ORPHANS"

// orphaner is the model orphanEnv asks for: an echo, but for that.
type orphaner struct{ pids string }

func (m orphaner) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	for _, it := range items {
		if string(it) != "orphan" {
			continue
		}
		child := exec.Command("sleep", "60")
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(m.pids, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, err
		}
		fmt.Fprintln(f, child.Process.Pid)
		f.Close()
		fmt.Fprintln(os.Stderr, "panic: dying on purpose, a child left behind")
		os.Exit(2)
	}
	return items, nil
}

func (orphaner) Close() error { return nil }
