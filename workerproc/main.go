package workerproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/ipc"
)

// ErrNotStarted is returned by Serve in a process that no supervisor
// started: its environment lacks the worker cookie (ipc.WorkerEnv).
var ErrNotStarted = fmt.Errorf("workerproc: this process was not started by a streamer supervisor (%s is not set); workers are started by streamer serve or a supervisor.Streamer", ipc.WorkerEnv)

// Started reports whether a supervisor started this process as a worker:
// its environment holds ipc.WorkerEnv set to ipc.WorkerCookie. A program
// that is both the server and its own workers calls it first thing in main,
// and calls Main when it reports true.
func Started() bool { return os.Getenv(ipc.WorkerEnv) == ipc.WorkerCookie }

// Main runs this process as a streamer worker serving the model open opens,
// and exits: with status 0 when the supervisor told it to stop, 1 when it
// failed (the supervisor was told why), and 2 when no supervisor started it.
// It owns file descriptors ipc.WorkerInFD and ipc.WorkerOutFD and logs to
// stderr, which the supervisor copies into its log tagged with the slot.
func Main(open OpenFunc) {
	err := Serve(context.Background(), open)
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, ErrNotStarted):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// Serve is Main without the exit: it checks that a supervisor started this
// process (ErrNotStarted if not), takes the protocol's file descriptors, and
// returns what Run returns. Until then it logs and ignores SIGHUP, SIGTERM
// and SIGINT, which are the supervisor's (see ignoreSignals).
func Serve(ctx context.Context, open OpenFunc) error {
	if !Started() {
		return ErrNotStarted
	}
	takeName()
	maxFrame, err := supervisorFrame()
	if err != nil {
		return err
	}
	// What the model starts (a plugin) is not a worker, and must not
	// inherit our pipes, or the supervisor would not see us die.
	_ = os.Unsetenv(ipc.WorkerEnv)
	_ = os.Unsetenv(ipc.MaxFrameEnv)
	syscall.CloseOnExec(ipc.WorkerInFD)
	syscall.CloseOnExec(ipc.WorkerOutFD)
	in := os.NewFile(ipc.WorkerInFD, "supervisor-in")
	out := os.NewFile(ipc.WorkerOutFD, "supervisor-out")
	if in == nil || out == nil {
		return fmt.Errorf("workerproc: file descriptors %d and %d must be the supervisor's pipes", ipc.WorkerInFD, ipc.WorkerOutFD)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// The model's own code logs through slog's default: in this form,
	// which the supervisor reads each line's level from.
	slog.SetDefault(log)
	defer ignoreSignals(log)()
	return Run(ctx, Config{
		Open:     open,
		In:       in,
		Out:      out,
		Device:   visibleDevices(),
		Logger:   log,
		MaxFrame: maxFrame,
	})
}

// supervisorFrame is the largest frame the supervisor reads, as it says in
// ipc.MaxFrameEnv, or 0 (ipc.DefaultMaxFrame) from a supervisor that does
// not say.
func supervisorFrame() (int, error) {
	v, ok := os.LookupEnv(ipc.MaxFrameEnv)
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("workerproc: %s=%q is not a frame size in bytes", ipc.MaxFrameEnv, v)
	}
	return n, nil
}

// ignoreSignals logs and ignores SIGHUP, SIGTERM and SIGINT until the
// returned stop is called. They are the supervisor's: SIGHUP reloads the
// workers, SIGTERM and SIGINT drain them, and the supervisor stops each
// worker itself, through its pipe, once its batches are answered. A
// command that signals every process of the binary (pkill, killall), a
// service manager that signals every process of the service, or a
// terminal that hangs up reaches workers too; a worker that died of it
// would die as a crash, its batches run again by a new worker that loads
// the model anew while the server drains, or one restart of
// --max-restarts spent. The signals are caught rather than set to be
// ignored, which a model's own processes (a plugin) would inherit.
//
// Once the supervisor is gone (this process has another parent: where no
// parent-death signal killed it with the supervisor, or under a
// supervisor of another make), nothing would stop it: SIGTERM and SIGINT
// then end it as they would any process.
func ignoreSignals(log *slog.Logger) (stop func()) {
	supervisor := os.Getppid()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	var lines repeats.Lines // a storm of them logs a line now and then
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-signals:
				if sig != syscall.SIGHUP && os.Getppid() != supervisor {
					log.Warn("the supervisor is gone: ending on the signal", "signal", sig.String(), "supervisor_pid", supervisor)
					signal.Reset(sig)
					if self, err := os.FindProcess(os.Getpid()); err == nil {
						_ = self.Signal(sig)
					}
					continue
				}
				logIgnored(log, &lines, sig)
			}
		}
	}()
	return func() {
		signal.Stop(signals)
		close(done)
	}
}

func logIgnored(log *slog.Logger, lines *repeats.Lines, sig os.Signal) {
	if sig == syscall.SIGHUP {
		lines.Log(log, slog.LevelInfo, "SIGHUP", "SIGHUP ignored: a worker is reloaded by its supervisor, which is the process to signal")
		return
	}
	name := "SIGTERM"
	if sig == syscall.SIGINT {
		name = "SIGINT"
	}
	lines.Log(log, slog.LevelInfo, name, name+" ignored: a worker is stopped by its supervisor once its batches are answered; signal the supervisor, or SIGKILL the worker", "supervisor_pid", os.Getppid())
}

// visibleDevices says which GPUs the supervisor gave this worker; where
// the model runs on them is the model's to say, in its description.
func visibleDevices() string {
	if visible, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES"); ok {
		return "CUDA_VISIBLE_DEVICES=" + visible
	}
	return "CUDA_VISIBLE_DEVICES unset"
}
