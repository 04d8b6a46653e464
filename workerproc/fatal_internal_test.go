package workerproc

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
)

// A model that did not open for want of the machine's resources (a plugin
// that could not be forked under a limit of processes, a full disk) is
// marked so, for the supervisor to back off without counting a crash; any
// other failure is not.
func TestFatalTextMarksAWantOfResources(t *testing.T) {
	spec := model.Spec{Runner: "plugin"}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("start plugin: fork/exec ./p: %w", syscall.EAGAIN), true},
		{fmt.Errorf("make sockets: %w", syscall.ENOSPC), true},
		{fmt.Errorf("open: %w", syscall.EMFILE), true},
		{errors.New("init: cannot load weights"), false},
		{fmt.Errorf("open: %w", syscall.ENOENT), false},
	} {
		text := fatalText(spec, c.err)
		if got := strings.HasPrefix(text, ipc.FatalNoResources); got != c.want || !strings.Contains(text, c.err.Error()) {
			t.Errorf("fatalText(%v) = %q; want marked %v, with the error", c.err, text, c.want)
		}
	}
}
