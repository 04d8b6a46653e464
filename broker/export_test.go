package broker

import (
	"context"
	"time"
)

// PoisonHash names an item in the shared quarantine, for tests that put
// one there by hand.
var PoisonHash = poisonHash

// SkewClock sets c's clock off by skew, as the clock of a machine that is
// not in sync.
func SkewClock(c *Config, skew time.Duration) { c.skew = skew }

// SlowBeats makes a node beat every every rather than every second: its
// beats then come from its start and its events alone.
func SlowBeats(c *NodeConfig, every time.Duration) { c.beatEvery = every }

// ClaimNow runs a node's claim at once, as its upkeep would at a tick.
func ClaimNow(n *Node) error {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	return n.claim(context.Background())
}

// HoldOffClaims holds off a node's claims, as a round trip Redis froze
// under does.
func HoldOffClaims(n *Node) { n.holdOffClaims() }

// MarkLost has a node look for the items of a read that got no answer.
func MarkLost(n *Node) { n.lost.Store(true) }

// AutoClaimLate runs a claim's XAUTOCLAIM on the shared stream, and says
// how late Redis ran it after the node sent it.
func AutoClaimLate(n *Node) (time.Duration, error) {
	_, _, late, err := n.autoClaim(context.Background(), n.k.items, "0-0", 1)
	return late, err
}

// EntryLayout is the layout of the entries this version writes.
const EntryLayout = entryLayout

// Sweepers is how many nodes besides its own look at a live node's stream.
const Sweepers = sweepers

// LayoutWire is the model key's wire field for a model of wire w.
var LayoutWire = layoutWire

// Lost says whether a node's read or claim got no answer, its items not
// yet looked for (see recoverLost).
func Lost(n *Node) bool { return n.lost.Load() }

// RecoverLost has a node take up the items of its failed reads at once, as
// its read loop does when it has room.
func RecoverLost(n *Node) error {
	_, err := n.recoverLost(context.Background(), n.cfg.Capacity)
	return err
}

// LookAtEviction has a front end read Redis's eviction policy and count
// at once, as its check does every 10s.
func LookAtEviction(fe *FrontEnd) {
	fe.checkMu.Lock()
	defer fe.checkMu.Unlock()
	fe.eviction.last = time.Time{}
	fe.lookAtEviction(context.Background())
}

// FullWhenSeen is Full as the front end said it at the moment it last saw
// the backlog at its bound; FullPastHold, once fullHold has passed since.
func (fe *FrontEnd) FullWhenSeen() bool {
	seen := fe.fullSeen.Load()
	return fe.fullBy(seen, seen)
}

// FullPastHold: see FullWhenSeen.
func (fe *FrontEnd) FullPastHold() bool {
	seen := fe.fullSeen.Load()
	return fe.fullBy(seen+int64(fullHold), seen)
}

// FullSeen is when the front end last saw the backlog full, on its own
// clock; zero for never.
func (fe *FrontEnd) FullSeen() int64 { return fe.fullSeen.Load() }

// Unread says whether a stream has entries the node's group has not
// delivered, as a claim asks of the streams of nodes gone.
func Unread(n *Node, stream string) (bool, error) { return n.unread(context.Background(), stream) }
