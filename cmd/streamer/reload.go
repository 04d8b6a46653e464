package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

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
// it has; a SIGHUP during a reload is refused as busy. A front end (st
// nil) has no workers to reload: it logs so and serves on, rather than
// let SIGHUP's default end it, so that the README's `kill -HUP $(pidof
// streamer)` on a machine that also runs a front end does not stop it.
func reloadOnHangup(ctx context.Context, st *supervisor.Streamer, log *slog.Logger) {
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
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
				log.Info("SIGHUP: reloading the workers")
				go func() {
					if err := st.Reload(ctx); err != nil {
						log.Error("SIGHUP: reload failed; serving on", "err", err)
					}
				}()
			}
		}
	}()
}
