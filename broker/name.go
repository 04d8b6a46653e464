package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/supervisor"
)

// ErrNameTaken says that another live node beats under the node's name
// (NodeConfig.Name) and prefix: two nodes of one name would share a
// consumer in the group, each taking the other's items for its own, and
// one stream of their own. The node takes no items while the other keeps
// the name.
var ErrNameTaken = errors.New("broker: another live node has this node's name")

// nameScript keeps a node's name for it, under its token, for a time: a
// node that finds the name kept under another token learns how long it is
// kept yet (ms), and takes nothing; empty when the name is the node's
// now. With "release", it gives the name up if it is the node's.
//
//	KEYS[1] the name's key
//	ARGV    the node's token, how long the name is kept (ms), and
//	        "keep" or "release"
var nameScript = redis.NewScript(`
local held = redis.call('GET', KEYS[1])
if ARGV[3] == 'release' then
  if held == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return ''
end
if not held or held == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ''
end
return tostring(redis.call('PTTL', KEYS[1]))
`)

// nameKept is how long a node's name stays its own after its last beat:
// as long as front ends wait for a silent node.
func (n *Node) nameKept() time.Duration { return max(nodeSilence, 3*n.cfg.beatEvery) }

// nameMargin is how much sooner than Redis lets it lapse the node takes
// its name for no longer its own: its clock and Redis's may run apart by
// that much over nameKept.
const nameMargin = time.Second

// keepName keeps the node's name for it, or answers how long another
// node keeps it yet (taken; less than 0 when it has no time to live). It
// renews the node's lease on its name (see holdsName), or ends it.
func (n *Node) keepName(ctx context.Context) (lapse time.Duration, taken bool, err error) {
	sent := n.age()
	held, err := nameScript.Run(ctx, n.rdb, []string{n.k.names + n.cfg.Name}, n.token, n.nameKept().Milliseconds(), "keep").Text()
	switch {
	case permissionRefused(err):
		n.nameUntil.Store(math.MaxInt64) // unchecked: see checkName
		return 0, false, err
	case err != nil:
		return 0, false, err
	case held == "":
		n.nameUntil.Store(int64(sent + n.nameKept() - nameMargin))
		return 0, false, nil
	}
	n.nameUntil.Store(0)
	ms, err := strconv.ParseInt(held, 10, 64)
	if err != nil || ms == -2 {
		ms = 0 // gone meanwhile: looked at again
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// holdsName says whether the node's name is its own now, as its last keep
// of it found, a margin before Redis lets it lapse. A node whose name
// lapsed (Redis did not answer its beats for seconds) may find it
// another's: until it has kept it again it reads, claims and takes up the
// items of failed reads under that name not at all, as those pending to
// it may be the other's.
func (n *Node) holdsName() bool { return int64(n.age()) < n.nameUntil.Load() }

// age is the time since the node was made, by the larger of its
// monotonic and wall clocks: the monotonic clock stops while the host is
// suspended, when Redis lets the name lapse all the same.
func (n *Node) age() time.Duration {
	return max(time.Since(n.born), time.Now().Round(0).Sub(n.born.Round(0)))
}

// ownsName says, as the node leaves, whether its name is its own, so that
// it may take itself off the lists of nodes and give its name up: a node
// that another live node's name kept out leaves that one's listings as
// they are. A node that has not kept its name for a while (Redis down
// since) looks once, for a second at most.
func (n *Node) ownsName() bool {
	if n.nameTaken.Load() == nil && !n.holdsName() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.checkName(ctx)
	}
	return n.nameTaken.Load() == nil && n.holdsName()
}

// checkName keeps the node's name for it, or finds it another live node's:
// the node then takes no items and says why (see refusal) until the name
// is its own again. A user whose ACL leaves the key out serves without the
// check, logged once.
func (n *Node) checkName(ctx context.Context) error {
	lapse, taken, err := n.keepName(ctx)
	if permissionRefused(err) {
		if !n.nameLogged.Swap(true) {
			n.cfg.Logger.Warn("redis refuses the check that no other live node has this node's name: the check is off (let the user run scripts, EVALSHA and EVAL, and read and write "+n.k.names+"*)", "node", n.cfg.Name, "err", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis at %s: %w", n.where, err)
	}
	if !taken {
		if n.nameTaken.Swap(nil) != nil {
			n.cfg.Logger.Info("no other live node has this node's name now; it takes items", "node", n.cfg.Name)
		}
		return nil
	}
	return n.noteNameTaken(n.nameTakenError(lapse))
}

// noteNameTaken notes err, that another node has the node's name: it
// takes no items until a check finds the name its own (see refusal).
func (n *Node) noteNameTaken(err error) error {
	msg := err.Error()
	if n.nameTaken.Swap(&msg) == nil {
		n.cfg.Logger.Error("this node takes no items", "node", n.cfg.Name, "err", err)
	}
	return err
}

// nameTakenError says that another node keeps the node's name, for lapse
// yet (less than 0: for ever).
func (n *Node) nameTakenError(lapse time.Duration) error {
	who := fmt.Sprintf("a node named %q beats under the key prefix %q on redis at %s", n.cfg.Name, n.cfg.Prefix, n.where)
	if lapse < 0 {
		who = fmt.Sprintf("the key %s on redis at %s, which keeps the name of the live node named so, has no time to live (a node gives it one: it was set by hand, and only its deletion frees the name)", n.k.names+n.cfg.Name, n.where)
	}
	return fmt.Errorf("%w: %s: two live nodes must not share a name, as they would take each other's items for their own (give each its own NodeConfig.Name, or leave it empty for one of its own)", ErrNameTaken, who)
}

// startName has the node's name kept for it as it starts, within ctx
// (check runs a step of the start). A node started again under its name
// after a crash finds it kept by its predecessor, for nameKept at most:
// it waits that out once, and fails with ErrNameTaken when the name is
// kept still. A ctx that ends first leaves the node refused until its
// upkeep finds the name its own; an unanswered check leaves it to the
// node's read loop, which reads nothing before it has kept its name.
func (n *Node) startName(ctx context.Context, check func(func(context.Context) error) error) error {
	var lapse time.Duration
	taken := false
	err := check(func(ctx context.Context) (err error) {
		lapse, taken, err = n.keepName(ctx)
		return err
	})
	switch {
	case permissionRefused(err):
		return check(n.checkName) // says so, once
	case err != nil || !taken:
		return err
	case lapse < 0:
		return n.noteNameTaken(n.nameTakenError(lapse))
	}
	lapse = min(lapse, n.nameKept())
	n.cfg.Logger.Info("another node has had this node's name within the last seconds; waiting for it to lapse", "node", n.cfg.Name, "for", lapse.Round(time.Millisecond))
	t := time.NewTimer(lapse + 50*time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-n.stop:
		n.noteNameTaken(n.nameTakenError(lapse))
		return fmt.Errorf("broker: start of node %s, as it waited for its name to lapse: %w", n.cfg.Name, supervisor.ErrShuttingDown)
	case <-ctx.Done():
		n.noteNameTaken(n.nameTakenError(lapse))
		return fmt.Errorf("broker: node %s: its name kept by another node as the start ended: %w", n.cfg.Name, ctx.Err())
	}
	return check(n.checkName)
}

// releaseName gives up the node's name as it leaves, so that a node
// started again under it need not wait; best effort.
func (n *Node) releaseName(ctx context.Context) {
	n.nameUntil.Store(0)
	nameScript.Run(ctx, n.rdb, []string{n.k.names + n.cfg.Name}, n.token, 0, "release")
}
