package broker_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// A full backlog refuses requests unread (Full: 429, come back later) only
// while the front end could otherwise serve them: with Redis down, or no
// node heard from, a request is refused for that (503, naming Redis or the
// want of a node), as the backlog seen last says nothing then.
func TestAFullBacklogIsNotFullWhileTheFrontEndCannotServe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		heard  time.Duration // when a node was last heard from, from now
		outage func(*redistest.Server)
		want   func(*redistest.Server) string // in the error of a request during the outage
	}{
		{
			name:   "redis down",
			heard:  time.Hour, // alive for good
			outage: func(rs *redistest.Server) { rs.Kill() },
			want:   func(rs *redistest.Server) string { return "redis at " + rs.Addr() + " does not serve" },
		},
		{
			name:   "no node",
			heard:  0, // and never again
			outage: func(*redistest.Server) {},
			want:   func(*redistest.Server) string { return "no node has been heard from" },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, redistest.Options{})
			heardFrom(t, rs, time.Now().Add(tc.heard))
			// The backlog's two items, of another front end.
			for i := range 2 {
				rs.Do(t, "XADD", "streamer:items", "*", "h", "elsewhere 1 "+strconv.Itoa(i)+" 0 60000", "v", "x")
			}
			fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.MaxBacklog = 2 })
			eventually(t, "the front end ready, with its backlog full", func() bool { return fe.Ready() && fe.Full() })
			tc.outage(rs)
			eventually(t, "the front end not ready", func() bool { return !fe.Ready() })
			if fe.Full() {
				t.Error("Full while the front end cannot serve: requests are told to come back for room (429) rather than why they cannot be served")
			}
			if _, err := predict(t, fe, "x"); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), tc.want(rs)) {
				t.Errorf("a request: %v; want ErrUnavailable saying %q", err, tc.want(rs))
			}
		})
	}
}

// heardFrom makes front ends see a node last heard from at when.
func heardFrom(t *testing.T, rs *redistest.Server, when time.Time) {
	rs.Do(t, "ZADD", "streamer:nodes", strconv.FormatInt(when.UnixMilli(), 10), "elsewhere")
}
