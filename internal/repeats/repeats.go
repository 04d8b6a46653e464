// Package repeats holds back log lines that repeat. A fault that lasts,
// such as a key of the wrong type read with every read of items, or a
// server at its cap on connections, would otherwise write a line at each
// occurrence: hundreds a second.
package repeats

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Lines holds back the log lines that repeat: the first of a kind is
// logged at once, and the next at most once every Every, saying how many
// were held back since the last (those go to debug level). Its zero value
// is ready to use.
type Lines struct {
	mu   sync.Mutex
	seen map[string]*repeat // by kind
}

// repeat is what Lines knows of one kind of line.
type repeat struct {
	logged time.Time // when one was last logged
	held   int       // those held back since
}

// Every is the least time between two lines of one kind. Kinds bounds the
// kinds remembered.
const (
	Every = 5 * time.Second
	Kinds = 256
)

// Note counts a line of kind at now, and says whether to log it, and if
// so how many of its kind were held back before it.
func (r *Lines) Note(kind string, now time.Time) (log bool, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.seen[kind]
	if rp == nil {
		if r.seen == nil || len(r.seen) >= Kinds {
			r.forgetLocked(now)
		}
		r.seen[kind] = &repeat{logged: now}
		return true, 0
	}
	if now.Sub(rp.logged) < Every {
		rp.held++
		return false, 0
	}
	held = rp.held
	rp.logged, rp.held = now, 0
	return true, held
}

// forgetLocked forgets the kinds not logged within Every, and all
// of them if that leaves no room. It requires that r.mu is held.
func (r *Lines) forgetLocked(now time.Time) {
	for kind, rp := range r.seen {
		if now.Sub(rp.logged) >= Every {
			delete(r.seen, kind)
		}
	}
	if r.seen == nil || len(r.seen) >= Kinds {
		r.seen = map[string]*repeat{}
	}
}

// Log logs msg with args at level through logger, unless a line of kind
// was logged within Every: then at debug level. A line logged after
// some were held back says how many, in "repeated" (since the last line
// of its kind).
func (r *Lines) Log(logger *slog.Logger, level slog.Level, kind, msg string, args ...any) {
	ok, held := r.Note(kind, time.Now())
	if !ok {
		logger.Debug(msg, args...)
		return
	}
	if held > 0 {
		args = append(args, "repeated", held)
	}
	logger.Log(context.Background(), level, msg, args...)
}
