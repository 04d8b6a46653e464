package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// addAdminFlags adds the flags of the admin routes.
func addAdminFlags(f *pflag.FlagSet, admin *bool) {
	f.BoolVar(admin, "admin", false, "serve POST /admin/reload (replace the workers one by one, e.g. after the model changed on disk) and POST /admin/workers {\"workers\": N} (scale); off: those paths are 404. Anyone who reaches the API can then use them: protect it")
}

// adminFor is what serves the admin routes: st when they are on and there
// are local workers, else nil (no admin routes).
func adminFor(on bool, st *supervisor.Streamer) httpapi.Admin {
	if !on || st == nil {
		return nil
	}
	return st
}

// reloadOnHangup reloads st's workers on every SIGHUP until ctx ends. Its
// own channel: whoever else listens to SIGHUP gets the signal too. A
// reload that fails is logged and the server keeps serving on the workers
// it has. A SIGHUP during a reload or scaling (which refuses another
// change as busy) reloads once that change is done: an operator who swaps
// the model and signals while the workers scale must not keep the old one
// without a word. SIGHUPs that come while a reload waits or runs make one
// reload more, not one each. A front end (st nil) has no workers to
// reload: it logs so and serves on, rather than let SIGHUP's default end
// it, so that the README's `kill -HUP $(pidof streamer)` on a machine that
// also runs a front end does not stop it.
func reloadOnHangup(ctx context.Context, st *supervisor.Streamer, log *slog.Logger) {
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	wanted := make(chan struct{}, 1) // a reload asked and not begun yet
	go func() {
		defer signal.Stop(hangups)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hangups:
				if st == nil {
					log.Info("SIGHUP: a front end has no workers to reload; serving on (its nodes reload their own)")
					continue
				}
				select {
				case wanted <- struct{}{}:
				default: // one is asked already
				}
			}
		}
	}()
	if st == nil {
		return
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-wanted:
			}
			reloadWhenFree(ctx, st, wanted, log)
		}
	}()
}

// busyRecheck is how often a reload asked by SIGHUP during another change
// looks whether that change is done.
const busyRecheck = 100 * time.Millisecond

// reloadWhenFree reloads st's workers, waiting first for a reload or
// scaling under way to end. A SIGHUP that comes meanwhile (on wanted) is
// the same reload's: it has not begun yet.
func reloadWhenFree(ctx context.Context, st *supervisor.Streamer, wanted <-chan struct{}, log *slog.Logger) {
	log.Info("SIGHUP: reloading the workers")
	told := false
	for {
		select {
		case <-wanted:
		default:
		}
		err := st.Reload(ctx)
		if !errors.Is(err, supervisor.ErrBusy) {
			if err != nil {
				log.Error("SIGHUP: reload failed; serving on", "err", err)
			}
			return
		}
		if !told {
			log.Info("SIGHUP: a reload or scaling of the workers is running; reloading once it is done")
			told = true
		}
		t := time.NewTimer(busyRecheck)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
