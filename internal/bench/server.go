package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// readyTimeout bounds the wait for every worker of a started server.
const readyTimeout = 2 * time.Minute

// stopTimeout bounds the wait for a started server to exit after SIGTERM,
// after which it is killed.
const stopTimeout = 30 * time.Second

// startServer runs srv's `serve` on a free loopback port and waits until
// every worker is ready, asking with token when the server wants one. It
// returns the server's URL and the func that stops it.
func startServer(ctx context.Context, srv Server, token string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("find a free port for the server: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	logs := &tailBuffer{max: 64 << 10}
	cmd := exec.Command(srv.Binary, append([]string{"serve", "--listen", addr}, srv.Args...)...)
	if len(srv.Env) > 0 {
		cmd.Env = append(os.Environ(), srv.Env...)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = serverProcAttr()
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start server: %w", err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	url := "http://" + addr
	err = waitServerReady(ctx, url, srv.Workers, token, exited)
	select {
	case <-exited:
		return "", nil, fmt.Errorf("server exited before it was ready (%v); its output:\n%s", waitErr, logs.String())
	default:
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("server on %s: %w; its output:\n%s", addr, err, logs.String())
	}
	return url, stop, nil
}

// waitServerReady waits for workers ready workers at url/v1/workers, and
// gives up when exited closes.
func waitServerReady(ctx context.Context, url string, workers int, token string, exited <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: withToken(http.DefaultTransport, token)}
	return waitReady(ctx, workers, func(ctx context.Context) ([]supervisor.SlotStatus, error) {
		var slots []supervisor.SlotStatus
		err := getJSON(ctx, client, url+"/v1/workers", &slots)
		return slots, err
	})
}

// waitReady polls slots until all workers are ready: a measurement that
// starts while some still initialise would understate the limit.
func waitReady(ctx context.Context, workers int, slots func(context.Context) ([]supervisor.SlotStatus, error)) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := 0
		list, err := slots(ctx)
		for _, sl := range list {
			if sl.State == supervisor.SlotReady {
				ready++
			}
		}
		if err == nil && ready >= workers {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("workers not ready: %w", err)
			}
			return fmt.Errorf("only %d of %d workers became ready: %w", ready, workers, ctx.Err())
		case <-tick.C:
		}
	}
}

// tailBuffer keeps the last max bytes written to it: the server's output,
// shown when it fails to start, must not grow without bound during a run.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if extra := len(t.buf) - t.max; extra > 0 {
		t.buf = append(t.buf[:0], t.buf[extra:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
