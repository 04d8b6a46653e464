package procstat_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/procstat"
)

func TestFieldsOfALiveProcessAndOneEnded(t *testing.T) {
	fields, err := procstat.Fields(os.Getpid())
	if err != nil || len(fields) < 7 || fields[0] != "R" && fields[0] != "S" {
		t.Fatalf("this process's fields: %q, %v; want its state, running or sleeping, and more", fields, err)
	}
	if procstat.Ended(os.Getpid()) {
		t.Error("this process is said to have ended")
	}
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	// Unreaped, it is a zombie once it exits; reaped, it has no entry.
	deadline := time.Now().Add(10 * time.Second)
	for !procstat.Ended(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("true, pid %d, has not ended after 10s", pid)
		}
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := procstat.Fields(pid); err == nil {
		t.Error("a reaped process still has fields")
	}
	if !procstat.Ended(pid) {
		t.Error("a reaped process is not said to have ended")
	}
}
