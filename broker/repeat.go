package broker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// repeats holds back the log lines that repeat: the first of a kind is
// logged at once, and the next at most once every repeatEvery, saying
// how many were held back since the last (those go to debug level). A
// fault that lasts, such as a key of the wrong type read with every read
// of items, wrote a line at each read before: hundreds a second.
type repeats struct {
	mu   sync.Mutex
	seen map[string]*repeat // by kind
}

// repeat is what repeats knows of one kind of line.
type repeat struct {
	logged time.Time // when one was last logged
	held   int       // those held back since
}

// repeatEvery is the least time between two lines of one kind.
// repeatKinds bounds the kinds remembered.
const (
	repeatEvery = 5 * time.Second
	repeatKinds = 256
)

// note counts a line of kind at now, and says whether to log it, and if
// so how many of its kind were held back before it.
func (r *repeats) note(kind string, now time.Time) (log bool, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := r.seen[kind]
	if rp == nil {
		if r.seen == nil || len(r.seen) >= repeatKinds {
			r.forgetLocked(now)
		}
		r.seen[kind] = &repeat{logged: now}
		return true, 0
	}
	if now.Sub(rp.logged) < repeatEvery {
		rp.held++
		return false, 0
	}
	held = rp.held
	rp.logged, rp.held = now, 0
	return true, held
}

// forgetLocked forgets the kinds not logged within repeatEvery, and all
// of them if that leaves no room. It requires that r.mu is held.
func (r *repeats) forgetLocked(now time.Time) {
	for kind, rp := range r.seen {
		if now.Sub(rp.logged) >= repeatEvery {
			delete(r.seen, kind)
		}
	}
	if r.seen == nil || len(r.seen) >= repeatKinds {
		r.seen = map[string]*repeat{}
	}
}

// log logs msg with args at level through logger, unless a line of kind
// was logged within repeatEvery: then at debug level. A line logged after
// some were held back says how many, in "repeated" (since the last line
// of its kind).
func (r *repeats) log(logger *slog.Logger, level slog.Level, kind, msg string, args ...any) {
	ok, held := r.note(kind, time.Now())
	if !ok {
		logger.Debug(msg, args...)
		return
	}
	if held > 0 {
		args = append(args, "repeated", held)
	}
	logger.Log(context.Background(), level, msg, args...)
}

// repeatKind names the kind of a line about what failing with err: what
// (its numbers left out, as in "write 12 answers"), and the first word of
// an error Redis answered (WRONGTYPE, ERR, ...).
func repeatKind(what string, err error) string {
	what = strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, what)
	var answered redis.Error
	if errors.As(err, &answered) {
		word, _, _ := strings.Cut(answered.Error(), " ")
		return what + "\x00" + word
	}
	return what
}
