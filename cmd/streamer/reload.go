package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/internal/repeats"

	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// addAdminFlags adds the flags of the admin routes.
func addAdminFlags(f *pflag.FlagSet, admin *bool) {
	f.BoolVar(admin, "admin", false, "serve POST /admin/reload (replace the workers one by one, e.g. after the model changed on disk) and POST /admin/workers {\"workers\": N} (scale); off: those paths are 404. Needs --auth-token: a request without the token gets 401")
}

// adminFor is what serves the admin routes: st when they are on and there
// are local workers, else nil (no admin routes). The service manager hears
// what the server does once a reload or scaling so asked is over.
func adminFor(on bool, st *supervisor.Streamer, manager *serviceManager, serving func() string) httpapi.Admin {
	if !on || st == nil {
		return nil
	}
	return toldAdmin{st, manager, serving}
}

// toldAdmin is a Streamer whose reloads and scalings, once over, update
// the status the service manager shows. They are not announced as
// reloads (RELOADING=1): systemd takes one for a reload of its own, and
// one asked over HTTP may be refused as busy while a SIGHUP's runs.
type toldAdmin struct {
	*supervisor.Streamer
	manager *serviceManager
	serving func() string
}

func (a toldAdmin) Reload(ctx context.Context) error {
	err := a.Streamer.Reload(ctx)
	a.told(err)
	return err
}

func (a toldAdmin) SetWorkers(ctx context.Context, n int) error {
	err := a.Streamer.SetWorkers(ctx, n)
	a.told(err)
	return err
}

// told updates the status once a change asked over HTTP is over, unless
// it was refused for another under way, which tells its own.
func (a toldAdmin) told(err error) {
	if !errors.Is(err, supervisor.ErrBusy) {
		a.manager.status(a.serving())
	}
}

// hangups is what SIGHUP does to streamer serve, from the first moment of
// runServe to its return. SIGHUP's default would end the process, and with
// it every request admitted, and a SIGHUP may come at any time: an
// operator's reload racing the start, or the drain. Every SIGHUP reads the
// TLS certificate and the token's file again, once the server has them
// (see security.reload). The workers are reloaded by a SIGHUP while the
// server serves (see serve); one that comes before is held, and reloads
// them once the server serves, since the first workers may have opened
// the model before it changed on disk; one that comes once the drain has
// begun is logged and ignored, since the workers are stopping.
type hangups struct {
	signals chan os.Signal
	log     *slog.Logger
	lines   repeats.Lines // a storm of SIGHUPs logs a line now and then

	mu       sync.Mutex
	manager  *serviceManager // told of the reloads; nil: none
	files    *security       // read again on every SIGHUP; nil: not yet
	reload   func()          // what a SIGHUP does to the workers; nil before serving
	held     bool            // a SIGHUP came before serving
	draining bool            // the drain has begun
	// reloadTakes is the longest a reload may take (the manager is told
	// as it begins); nil or 0 for no bound worth telling.
	reloadTakes func() time.Duration
}

// catchHangups takes SIGHUP from now until the process ends. Its own
// channel: whoever else listens to SIGHUP gets the signal too.
func catchHangups(log *slog.Logger) *hangups {
	h := &hangups{signals: make(chan os.Signal, 1), log: log}
	signal.Notify(h.signals, syscall.SIGHUP)
	go func() {
		for range h.signals {
			h.handle()
		}
	}()
	return h
}

// stop is called as runServe returns: the SIGHUPs that come from then on
// are logged and ignored, as in the drain. They are still caught: with its
// default back, a SIGHUP in the last moments would end a process that
// finishes cleanly with the status of one killed.
func (h *hangups) stop() { h.drain() }

// tell makes the reloads of SIGHUPs from now on known to the service
// manager.
func (h *hangups) tell(m *serviceManager) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.manager = m
}

// handle does what one SIGHUP does now. The service manager hears that a
// reload begins as the SIGHUP comes (systemd's Type=notify-reload sends
// it, and waits for that word), and that the server is ready again once
// the reload that SIGHUP asked for has ended (see serve). A SIGHUP held
// before the server serves, or in the drain, reloads nothing it could
// wait for.
func (h *hangups) handle() {
	h.mu.Lock()
	files, reload, draining, manager, takes := h.files, h.reload, h.draining, h.manager, h.reloadTakes
	if reload == nil && !draining {
		h.held = true
	}
	h.mu.Unlock()
	if reload != nil && !draining {
		var upTo time.Duration
		if takes != nil {
			upTo = takes()
		}
		manager.reloading("reloading: the certificate, the token and the workers", upTo)
	}
	if files != nil {
		files.reload()
	}
	switch {
	case draining:
		h.lines.Log(h.log, slog.LevelInfo, "draining", "SIGHUP while draining: the workers are stopping, not reloaded")
	case reload == nil:
		h.lines.Log(h.log, slog.LevelInfo, "held", "SIGHUP before the server serves: the workers are reloaded once it does")
	default:
		reload()
	}
}

// reloadFiles makes every SIGHUP from now on read the certificate's and
// the token's files of s again.
func (h *hangups) reloadFiles(s *security) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files = s
}

// drain makes the SIGHUPs from now on leave the workers alone: they are
// stopping.
func (h *hangups) drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.draining = true
}

// serve makes SIGHUP reload st's workers from now until ctx ends or the
// drain begins, and reloads them now if a SIGHUP was held. A reload that
// fails is logged and the server keeps serving on the workers it has. A
// SIGHUP during a reload or scaling (which refuses another change as busy)
// reloads once that change is done: an operator who swaps the model and
// signals while the workers scale must not keep the old one without a
// word. SIGHUPs that come while a reload waits or runs make one reload
// more, not one each. A front end (st nil) has no workers to reload: it
// reads its model's file again (front, see liveSpec), as the SIGHUPs
// come, one read for those that come during one, and serves on.
//
// serving says what the server does, for the service manager, which is
// told it once a reload is done, or failed, and no other was asked
// meanwhile; takes is the longest a reload of st may take.
func (h *hangups) serve(ctx context.Context, st *supervisor.Streamer, front *liveSpec, serving func() string, takes func() time.Duration) {
	h.mu.Lock()
	manager := h.manager
	h.mu.Unlock()
	wanted := make(chan struct{}, 1) // a reload asked and not begun yet
	reload := func() {
		select {
		case wanted <- struct{}{}:
		default: // one is asked already
		}
	}
	if st == nil {
		// Read in a goroutine of its own: a large file takes a while to
		// read through.
		say := func(level slog.Level, msg string, args ...any) {
			h.lines.Log(h.log, level, "front end", msg, args...)
		}
		go eachAsked(ctx, wanted, func() {
			front.refresh(ctx, say)
			manager.ready(serving())
		})
	} else {
		// A reload that begins later than its SIGHUP, behind another
		// reload or a scaling, is given its time anew as it may begin:
		// the manager's bound, told at the SIGHUP, may have run out, and
		// a scaling changes the number of workers to replace. The time
		// is told again when that number changes, and at most once every
		// extendEvery otherwise: a reload begins with its whole time, less
		// at most extendEvery, which takes' slack covers.
		var extendedAt time.Time
		var extendedTo time.Duration
		extend := func() {
			if takes == nil {
				return
			}
			if upTo := takes(); upTo != extendedTo || time.Since(extendedAt) >= extendEvery {
				manager.extend(upTo)
				extendedAt, extendedTo = time.Now(), upTo
			}
		}
		queued := false // behind the reload just done
		go eachAsked(ctx, wanted, func() {
			err := reloadWhenFree(ctx, st, wanted, queued, extend, h.log)
			queued = len(wanted) > 0
			switch {
			case ctx.Err() != nil || errors.Is(err, supervisor.ErrShuttingDown) || queued:
				// Stopping (the manager hears no READY=1 once it heard
				// STOPPING=1, whichever is sent first), or another
				// reload follows.
			case err != nil:
				manager.ready(serving() + " (the last reload failed: " + err.Error() + ")")
			default:
				manager.ready(serving())
			}
		})
	}
	h.mu.Lock()
	h.reload, h.reloadTakes = reload, takes
	held := h.held && !h.draining
	h.mu.Unlock()
	if held {
		reload()
	}
}

// eachAsked runs do once for each reload asked on wanted, one after
// another, until ctx ends; not for one asked as the signal to stop came.
func eachAsked(ctx context.Context, wanted <-chan struct{}, do func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-wanted:
		}
		if ctx.Err() != nil {
			return
		}
		do()
	}
}

// busyRecheck is how often a reload asked by SIGHUP during another change
// looks whether that change is done.
const busyRecheck = 100 * time.Millisecond

// extendEvery is how often, at most, a reload that waits for another
// change has its time told again to the service manager when it has not
// changed (see serve).
const extendEvery = time.Second

// reloadWhenFree reloads st's workers, waiting first for a reload or
// scaling under way to end, and returns why the reload failed. A SIGHUP
// that comes meanwhile (on wanted) is the same reload's: it has not begun
// yet. extend, called before each try that follows a wait (for a change
// that refused the reload as busy, or, queued, for the reload before
// it), gives the reload its time anew with the service manager.
func reloadWhenFree(ctx context.Context, st *supervisor.Streamer, wanted <-chan struct{}, queued bool, extend func(), log *slog.Logger) error {
	log.Info("SIGHUP: reloading the workers")
	told := false
	for {
		select {
		case <-wanted:
		default:
		}
		if queued || told {
			extend()
		}
		// Not ctx itself, which SIGTERM cancels before the shutdown
		// begins: the shutdown stops a reload under way, as it does one
		// asked over HTTP, and a cancellation would read as the model's
		// failure.
		err := st.Reload(context.WithoutCancel(ctx))
		if !errors.Is(err, supervisor.ErrBusy) {
			switch {
			case errors.Is(err, supervisor.ErrShuttingDown):
				log.Info("SIGHUP: reload stopped by the shutdown")
			case err != nil:
				log.Error("SIGHUP: reload failed; serving on", "err", err)
			}
			return err
		}
		if !told {
			log.Info("SIGHUP: a reload or scaling of the workers is running; reloading once it is done")
			told = true
		}
		t := time.NewTimer(busyRecheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
