package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
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

// keepName keeps the node's name for it, or answers how long another
// node keeps it yet (taken).
func (n *Node) keepName(ctx context.Context) (lapse time.Duration, taken bool, err error) {
	held, err := nameScript.Run(ctx, n.rdb, []string{n.k.names + n.cfg.Name}, n.token, n.nameKept().Milliseconds(), "keep").Text()
	if err != nil || held == "" {
		return 0, false, err
	}
	var ms int64
	if _, err := fmt.Sscan(held, &ms); err != nil || ms < 0 {
		ms = 0 // kept for ever, or gone meanwhile: looked at again
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// checkName keeps the node's name for it, or finds it another live node's:
// the node then takes no items and says why (see refusal) until the name
// is its own again. A user whose ACL leaves the key out serves without the
// check, logged once.
func (n *Node) checkName(ctx context.Context) error {
	_, taken, err := n.keepName(ctx)
	if redis.HasErrorPrefix(err, "NOPERM") {
		if !n.nameLogged.Swap(true) {
			n.cfg.Logger.Warn("redis refuses the check that no other live node has this node's name (let the user run scripts, EVALSHA and EVAL, and read and write "+n.k.names+"*)", "node", n.cfg.Name, "err", err)
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
	err = n.nameTakenError()
	msg := err.Error()
	if n.nameTaken.Swap(&msg) == nil {
		n.cfg.Logger.Error("this node takes no items", "node", n.cfg.Name, "err", err)
	}
	return err
}

func (n *Node) nameTakenError() error {
	return fmt.Errorf("%w: a node named %q beats under the key prefix %q on redis at %s: two live nodes must not share a name, as they would take each other's items for their own (give each its own NodeConfig.Name, or leave it empty for one of its own)",
		ErrNameTaken, n.cfg.Name, n.cfg.Prefix, n.where)
}

// awaitName waits, as the node starts, for its name to lapse when another
// node kept it (lapse, as keepName found): a node started again under its
// name after a crash finds it kept by its predecessor for nameKept at
// most. Then the name is checked again, within a check's time.
func (n *Node) awaitName(ctx context.Context, lapse time.Duration, check func(func(context.Context) error) error) error {
	lapse = min(lapse, n.nameKept())
	n.cfg.Logger.Info("another node has had this node's name within the last seconds; waiting for it to lapse", "node", n.cfg.Name, "for", lapse.Round(time.Millisecond))
	t := time.NewTimer(lapse + 50*time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return fmt.Errorf("%w (%w waiting for the name to lapse)", n.nameTakenError(), ctx.Err())
	}
	return check(n.checkName)
}

// releaseName gives up the node's name as it leaves, so that a node
// started again under it need not wait; best effort.
func (n *Node) releaseName(ctx context.Context) {
	nameScript.Run(ctx, n.rdb, []string{n.k.names + n.cfg.Name}, n.token, 0, "release")
}
