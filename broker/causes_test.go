package broker_test

// Tests that what Redis answers is told under its own cause: a refusal of
// the front end's own before the want of a node, an authentication
// before a refusal of reads, a Redis turned replica as an outage.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestAFrontEndsOwnRefusalComesBeforeTheWantOfANode: a user that loses
// the scripting commands and XREADGROUP (one user for front ends and
// nodes) leaves no node alive and the front end unable to admit; its
// readiness and its 503s said only that no node is alive, hiding its own
// NOPERM. Its own refusal comes first now.
func TestAFrontEndsOwnRefusalComesBeforeTheWantOfANode(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	url := limitedUser(t, rs, "both")
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.URL = url })
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.URL = url })
	eventually(t, "front end ready", fe.Ready)
	rs.Do(t, "ACL", "SETUSER", "both", "-evalsha", "-eval", "-xreadgroup")
	eventually(t, "no node alive, as the front end sees it", func() bool {
		return rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()) == "" && fe.FrontEndStats().Nodes == 0
	})
	own := func(err error) bool {
		return errors.Is(err, supervisor.ErrUnavailable) && errors.Is(err, broker.ErrPermission) &&
			strings.Contains(err.Error(), "refuses this front end's admissions") && strings.Contains(err.Error(), "NOPERM")
	}
	eventually(t, "the front end's readiness naming its own refusal", func() bool { return own(fe.NotReady()) })
	if _, err := predict(t, fe, "x"); !own(err) {
		t.Errorf("a request while the front end may not admit, and no node is alive: %v; want its own refusal", err)
	}
}

// TestARedisTurnedReplicaIsNoRefusalOfReads: a Redis made a replica ends
// the front end's blocked read of its answers with UNBLOCKED, which was
// taken for a refusal of its reads, logged as an error and told to
// callers as such. It is an outage, which the checks tell (READONLY), and
// ends by itself.
func TestARedisTurnedReplicaIsNoRefusalOfReads(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	startNode(t, rs, newRecorder(), 4, nil)
	var logs syncbuf.Buffer
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	eventually(t, "front end ready", fe.Ready)
	unblocked := errorCount(t, rs, "UNBLOCKED")
	eventually(t, "the front end's read of its answers blocked", func() bool {
		for line := range strings.Lines(rs.Do(t, "CLIENT", "LIST")) {
			if strings.Contains(line, " flags=b ") && strings.Contains(line, " cmd=xread ") {
				return true
			}
		}
		return false
	})
	// A master that is not there: the replica keeps its data, and
	// refuses writes.
	rs.Do(t, "REPLICAOF", "127.0.0.1", "1")
	t.Cleanup(func() { rs.Do(t, "REPLICAOF", "NO", "ONE") })
	eventually(t, "a blocked read ended with UNBLOCKED", func() bool { return errorCount(t, rs, "UNBLOCKED") > unblocked })
	// The reader's next read comes once it has taken in the UNBLOCKED.
	reads := commandCalls(t, rs, "xread")
	eventually(t, "the reader's read after the UNBLOCKED", func() bool { return commandCalls(t, rs, "xread") > reads })
	eventually(t, "the front end saying Redis does not serve", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), "READONLY")
	})
	if strings.Contains(logs.String(), "reads of its answers") {
		t.Errorf("the UNBLOCKED of a Redis turned replica is told as a refusal of the reads:\n%s", logs.String())
	}
	rs.Do(t, "REPLICAOF", "NO", "ONE")
	answersEventually(t, fe, "after", "an answer once Redis is a master again")
}

// TestAPasswordChangedIsToldAsSuch: a password set on Redis, and the
// connections killed, refuse the front end's read of its answers with
// NOAUTH, which was told as a refusal of its reads; the node's log said
// that Redis did not serve. Both say now that Redis refuses their
// authentication.
func TestAPasswordChangedIsToldAsSuch(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	var nodeLogs, frontLogs syncbuf.Buffer
	startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.Logger = slog.New(slog.NewTextHandler(&nodeLogs, nil)) })
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Logger = slog.New(slog.NewTextHandler(&frontLogs, nil)) })
	eventually(t, "front end ready", fe.Ready)
	rs.Do(t, "CONFIG", "SET", "requirepass", "changed")
	unset := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = rs.DoAs(ctx, "", "changed", "CONFIG", "SET", "requirepass", "")
	}
	t.Cleanup(unset)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rs.DoAs(ctx, "", "changed", "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the front end saying Redis refuses its authentication", func() bool {
		err := fe.NotReady()
		return err != nil && strings.Contains(err.Error(), "authentication") && strings.Contains(err.Error(), "NOAUTH")
	})
	eventually(t, "the node's log saying so", func() bool { return strings.Contains(nodeLogs.String(), "redis refuses this node's authentication") })
	if strings.Contains(frontLogs.String(), "reads of its answers") || strings.Contains(nodeLogs.String(), "redis does not serve this node") {
		t.Errorf("a password changed is told as a refusal of reads, or an outage:\nfront end:\n%s\nnode:\n%s", frontLogs.String(), nodeLogs.String())
	}
	unset()
	answersEventually(t, fe, "after", "an answer once the password is unset")
}

// errorCount is how many replies of the error prefix Redis has sent
// (INFO errorstats).
func errorCount(t *testing.T, rs *redistest.Server, prefix string) int {
	t.Helper()
	for line := range strings.Lines(rs.Do(t, "INFO", "errorstats")) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+prefix+":count="); ok {
			n := 0
			for _, c := range rest {
				if c < '0' || c > '9' {
					break
				}
				n = 10*n + int(c-'0')
			}
			return n
		}
	}
	return 0
}
