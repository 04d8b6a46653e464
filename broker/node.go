package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor"
)

// NodeConfig sets up a node. URL and Streamer are required.
type NodeConfig struct {
	Config
	// Streamer runs the items on this machine's workers; it is started by
	// the caller and shut down after the node.
	Streamer *supervisor.Streamer
	// Capacity is the most items the node reads from the shared stream
	// to hold at once, running or queued on its workers: about what they
	// can run soon (workers × batch size × pipeline depth). What waits on
	// its own stream (the callers it just answered) may come beyond it.
	// It is for the workers the Streamer has when the node is made, and
	// follows their number in proportion as SetWorkers changes it.
	// Zero means 128.
	Capacity int
	// Name is the node's consumer name in the group; empty means
	// host-pid-random. Two live nodes must not share one.
	Name string
	// PoisonTTL is how long an item found to crash the model is refused
	// by every node. Zero means 10 minutes.
	PoisonTTL time.Duration

	// beatEvery is how often the node beats: heartbeat, unless a test
	// set it longer (see SlowBeats).
	beatEvery time.Duration
}

// Node reads items from the shared stream through the consumer group,
// runs them on its Streamer, writes the answers to the asking front ends'
// reply streams (those of one write for one front end packed in one entry)
// and only then acknowledges the items. It claims the items of nodes that
// have been silent for ClaimIdle.
type Node struct {
	cfg   NodeConfig
	rdb   *redis.Client
	where string // the Redis, named for messages
	k     keys
	own   string // the node's own stream
	s     *supervisor.Streamer
	// workersAtStart is the Streamer's workers when the node was made,
	// for which cfg.Capacity is given (see capacity).
	workersAtStart int
	clock          *clock // Redis's, for the times front ends and nodes read (see clock)
	probe          probe  // whether the Redis can serve at all

	mu   sync.Mutex
	held map[entry]time.Time // the items held, since when they were last claimed by us
	// lostOn names the streams, other than the node's two, that a read or
	// claim that got no answer took from (see fetched): recoverLost looks
	// there too.
	lostOn map[string]bool
	// claimAt is where the next claim looks in each stream's pending list
	// (see claimFrom); under takeMu.
	claimAt map[string]string
	room    chan struct{} // a token when held shrinks

	// The answers to write: posted by answer, taken by the writer.
	answersMu sync.Mutex
	answers   []answerEntry
	posted    chan struct{} // a token when answers grows
	// The node's copy of the quarantine: hashes until their expiry. Read
	// with every item; written under poisonMu.
	poison   atomic.Pointer[map[string]time.Time]
	poisonMu sync.Mutex
	// refused says why Redis refuses to take the node's answers, for want
	// of a permission; nil while it takes them (see refuse).
	refused atomic.Pointer[string]
	// readRefused says why Redis refuses the node's reads of items: its
	// user lacks XREADGROUP, or Redis had it renamed away since the start,
	// or the shared stream's key holds another type; nil while it reads
	// (see refuseReads).
	readRefused atomic.Pointer[string]
	// claimsRefused says why the node takes no items: Redis refuses its
	// user XCLAIM or XAUTOCLAIM; nil while it lets it claim (see
	// checkClaims). claimsChecked is set once a check found that it may:
	// until then, as when Redis did not answer the start's, the node
	// takes no items, and its upkeep asks again.
	claimsRefused atomic.Pointer[string]
	claimsChecked atomic.Bool
	// ownBroken is set while the node's own stream's key holds another
	// type than a stream, and Redis refused to replace it: the node reads
	// the shared stream alone, its own unlisted (see mendStreams).
	ownBroken atomic.Bool
	// mismatch says why the node takes no items: the nodes under its
	// prefix serve another model; nil while they serve its own (see
	// checkModel).
	mismatch    atomic.Pointer[string]
	modelLogged atomic.Bool // a refused script on the model is logged
	// versions counts the versions of the model that the live nodes run,
	// as the node's beats read them; staleVersions are the entries its
	// last beat found stale, which its next deletes (see liveVersions).
	// Only the beats touch staleVersions.
	versions       versionWatch
	staleVersions  []string
	versionsLogged atomic.Bool // a refused read or write of the versions is logged
	// token is the node's own, under which Redis keeps its name for it;
	// nameTaken says why the node takes no items, another live node
	// keeping its name; nil while it is its own (see checkName).
	token      string
	nameTaken  atomic.Pointer[string]
	nameLogged atomic.Bool // a refused script on the name is logged
	// nameUntil is when the name stops being the node's own, as its last
	// keep of it found, in time since born (see holdsName).
	nameUntil atomic.Int64
	born      time.Time
	// takeMu keeps a node's claims and its look for the items of failed
	// reads apart (see recoverLost).
	takeMu sync.Mutex
	// lost is set by a read or claim that got no answer, after Redis may
	// have run it (see fetched), and cleared by the read loop's look for
	// the items it brought (see recoverLost).
	lost atomic.Bool
	// fetchCap, when not zero, bounds the items a read or claim asks for:
	// one that ran out of time asked for too many (see fetched); fetchFull
	// counts the reads that brought as many since it was last set, at
	// fetchCapSet (see sinceBorn).
	fetchCap, fetchFull, fetchCapSet atomic.Int64
	// quietUntil (see sinceBorn) holds off claims and adoptions while
	// Redis does not serve the node, and for nodeSilence after (see
	// upkeepLoop).
	quietUntil atomic.Int64
	// claimDue, when not zero, is the time (see sinceBorn) until which
	// the read loop makes a claim at its next room, before it reads new
	// items: the upkeep found items to claim and no room to take them
	// (see leaveClaim).
	claimDue atomic.Int64
	// down is set by a command that got no answer from Redis, and
	// cleared by one that did (see warn); broken, by a connection that
	// closed under a command since; full, by a write Redis refused for
	// want of memory, and cleared by the next that went through.
	down, broken, full atomic.Bool
	// back is when Redis answered the node again after it was down (see
	// sinceBorn; zero for never), as reachable notes it: a dial refused
	// soon after is the client library's, not Redis's (see dialGrace).
	back atomic.Int64
	// unable is set while the node beats as leaving for want of a
	// worker that can run (see beat); unlisted, while it beats as neither
	// alive nor leaving, its Streamer shut down (see streamerGone).
	unable, unlisted atomic.Bool
	// streamerSeen is the Streamer's state as the read loop last saw it
	// (see noteStreamer).
	streamerSeen atomic.Int32
	// beatSoon has a token when the node should beat at once: Redis
	// serves it again after an outage (see reachable).
	beatSoon chan struct{}
	// startUnbeaten is set by Start, before the loops, when its beat
	// failed: Redis may have been down, and the nodes silent, since.
	startUnbeaten bool
	// joined is set once a join went through whole: until then the
	// upkeep joins again after each beat, as a join cut short (its own
	// stream's group made, and the reply lost) would leave the stream
	// unlisted, and no front end would route to it.
	joined atomic.Bool
	// refusedOnce holds what the node did that Redis refused for want of
	// a permission, logged once (see warn).
	refusedOnce sync.Map
	repeats     repeats.Lines // the warnings that repeat, held back (see warn)
	stalls      stallWatch    // the node's own stalls, from Start until Shutdown is done

	stopOnce sync.Once
	started  atomic.Bool   // Start was called
	stop     chan struct{} // closed: read no more
	stopped  chan struct{} // closed: the writer is done
	left     chan struct{} // closed: Shutdown is done
	loops    sync.WaitGroup
	writer   sync.WaitGroup

	stats struct {
		read, claimed, answered, expired, released, quarantined, writeFailures, withdrawn atomic.Uint64
	}
}

// entry names an item: its stream and its id there.
type entry struct{ stream, id string }

// answerEntry is an answer to write, for the item with stream id id on
// stream.
type answerEntry struct {
	entry
	front, seq, index string
	ttl               time.Duration // the front end's ReplyTTL; 0: the node's
	output            []byte
	err               error
}

// NodeStats counts a node's traffic with Redis.
type NodeStats struct {
	// Read counts the items read from the stream; Claimed those of them
	// taken over from a silent node.
	Read    uint64 `json:"read"`
	Claimed uint64 `json:"claimed"`
	// Answered counts the answers written and acknowledged.
	Answered uint64 `json:"answered"`
	// Expired counts items whose deadline passed while they waited in Redis.
	Expired uint64 `json:"expired"`
	// Released counts items left for another node, as this one could not
	// run them (its workers were unavailable or it was shutting down).
	Released uint64 `json:"released"`
	// Quarantined counts items refused because some node found them to
	// crash the model.
	Quarantined uint64 `json:"quarantined"`
	// WriteFailures counts the writes of answers that Redis did not take
	// (unreachable, or out of memory), each attempt of each of the writes
	// out at once: they are retried, their items kept, but for those
	// counted in Withdrawn.
	WriteFailures uint64 `json:"write_failures"`
	// Withdrawn counts the items whose answers the node dropped as Redis
	// refused them for want of memory, their front end having withdrawn
	// them (their callers gone), or another node having answered them.
	Withdrawn uint64 `json:"withdrawn"`
	// Held is the items held now.
	Held int `json:"held"`
	// Refused says why Redis refuses the node's answers: its user lacks a
	// permission. The node then takes no items and beats no more, and
	// leaves those it holds to other nodes, until a write goes through.
	// Or why it refuses the node's reads of items, or why they fail (the
	// shared stream's key holds another type): the node then takes no
	// items, and is listed as no node, alive or leaving, until a read goes
	// through. Or why the node takes no items, keeping those it holds:
	// the nodes under its prefix serve another model or version (see
	// ModelID), or another live node has its name (see ErrNameTaken).
	// Empty while none of these holds.
	Refused string `json:"refused,omitempty"`
	// ModelVersions is how many versions of the model (see
	// ModelID.Version) the nodes heard from within 3 s run, this one
	// among them, as its last beat read them: more than one while
	// callers get the answers of either (a rolling upgrade, until it is
	// done), logged as it begins and ends.
	ModelVersions int64 `json:"model_versions"`
}

// NewNode returns a node for cfg, not yet running. Its Redis client is
// made already: Shutdown releases it, also when Start was never called.
func NewNode(cfg NodeConfig) (*Node, error) {
	base, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Config = base
	if cfg.Streamer == nil {
		return nil, errors.New("broker: a node needs a Streamer")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 128
	}
	if cfg.PoisonTTL == 0 {
		cfg.PoisonTTL = 10 * time.Minute
	}
	if cfg.beatEvery == 0 {
		cfg.beatEvery = heartbeat
	}
	if err := checkNegatives(intSetting("Capacity", cfg.Capacity), durationSetting("PoisonTTL", cfg.PoisonTTL)); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(3))
	}
	rdb, where, err := connect(cfg.Config, 8)
	if err != nil {
		return nil, err
	}
	k := newKeys(cfg.Prefix)
	n := &Node{
		cfg: cfg, rdb: rdb, where: where, k: k, own: k.nodeItems(cfg.Name), s: cfg.Streamer, token: randomHex(8), born: time.Now(),
		workersAtStart: max(cfg.Streamer.Workers(), 1),
		clock:          &clock{skew: cfg.skew, log: cfg.Logger},
		held:           map[entry]time.Time{},
		lostOn:         map[string]bool{},
		claimAt:        map[string]string{},
		room:           make(chan struct{}, 1),
		beatSoon:       make(chan struct{}, 1),
		posted:         make(chan struct{}, 1),
		stop:           make(chan struct{}),
		stopped:        make(chan struct{}),
		left:           make(chan struct{}),
	}
	empty := map[string]time.Time{}
	n.poison.Store(&empty)
	return n, nil
}

// Name is the node's consumer name.
func (n *Node) Name() string { return n.cfg.Name }

// Stats counts the node's traffic.
func (n *Node) Stats() NodeStats {
	n.mu.Lock()
	held := len(n.held)
	n.mu.Unlock()
	return NodeStats{
		Read: n.stats.read.Load(), Claimed: n.stats.claimed.Load(), Answered: n.stats.answered.Load(),
		Expired: n.stats.expired.Load(), Released: n.stats.released.Load(), Quarantined: n.stats.quarantined.Load(),
		WriteFailures: n.stats.writeFailures.Load(), Withdrawn: n.stats.withdrawn.Load(),
		Held:          held,
		Refused:       cmp.Or(n.refusal(), n.readsRefused()),
		ModelVersions: n.versions.count.Load(),
	}
}

// NotReady says why the node takes no items now, or nil while it may take
// them: supervisor.ErrShuttingDown once Shutdown was called, and else a
// supervisor.ErrUnavailable saying that it is not started, that its
// Streamer is shut down (shut down in the wrong order: the node first),
// that Redis or the prefix refuses it (see NodeStats.Refused), or that no
// worker of its Streamer can run (see supervisor.Streamer.Available).
func (n *Node) NotReady() error {
	select {
	case <-n.stop:
		return supervisor.ErrShuttingDown
	default:
	}
	switch {
	case !n.started.Load():
		return unavailablef("this node is not started")
	case !n.s.Started():
		return unavailablef("this node takes no items: its Streamer is shut down (shut the node down before its Streamer)")
	}
	if why := cmp.Or(n.refusal(), n.readsRefused()); why != "" {
		return unavailablef("this node takes no items: %s", why)
	}
	if !n.s.Available() {
		return unavailablef("this node takes no items: no worker of this node is ready, nor has one been able to run within its Streamer's UnavailableAfter (front ends count it as leaving until one can)")
	}
	return nil
}

// Start joins the consumer group (making it when missing), within ctx,
// and returns, the node running in the background until Shutdown. Its
// Streamer must be started first. Its errors:
//   - supervisor.ErrUnavailable: Redis did not serve (wrapping
//     context.DeadlineExceeded only if ctx's deadline passed); the node
//     runs on, and retries.
//   - ErrRefused or ErrUntrusted (see Refusal): Redis refused the client;
//     the node runs on and retries too, but its owner may take it for a
//     mistake in the URL, as streamer serve does, and shut it down.
//   - ErrPermission, with supervisor.ErrUnavailable: Redis refuses the
//     client's user a command or key of the start; the node runs on, and
//     serves once an operator grants it.
//   - ErrUnsupportedRedis, or ErrModelMismatch (the prefix serves another
//     model, or another version of streamer: then it is ErrVersionMismatch
//     too): no retry mends it, and the node takes no items (found before
//     it ran, the start ends there, and the node runs nothing).
//   - ErrNameTaken: another live node has the node's Name, and kept it
//     while the start waited for it to lapse (up to 3 s, for the name of
//     a node killed just before). The node runs nothing. A ctx that ends
//     before the name lapses ends the start with ctx's error: the node
//     runs on, and takes items once the name is its own. A name found
//     taken later (Redis down as the node started, or the node cut off
//     from Redis for seconds) is logged, and in NodeStats.Refused, while
//     the node takes no items.
//   - An error naming a Streamer not started (or shut down), the
//     caller's mistake: nothing started, and a Start once the Streamer
//     runs may succeed.
//   - supervisor.ErrStarted for a second Start, and
//     supervisor.ErrShuttingDown for one after Shutdown.
//
// Anything but ErrUnavailable is thus for its owner to act on.
func (n *Node) Start(ctx context.Context) error {
	select {
	case <-n.stop:
		return fmt.Errorf("broker: start of node %s after its Shutdown: %w", n.cfg.Name, supervisor.ErrShuttingDown)
	default:
	}
	if !n.s.Started() {
		return fmt.Errorf("broker: node %s: its Streamer is not started, or shut down: start it before the node", n.cfg.Name)
	}
	if !n.started.CompareAndSwap(false, true) {
		return fmt.Errorf("broker: node %s: %w", n.cfg.Name, supervisor.ErrStarted)
	}
	// A hung Redis holds each command to the client's ReadTimeout: each
	// step of the start gets that long, the first that gets no answer
	// leaves the rest to the node's upkeep (which beats, and joins until a
	// join went through), and a slow link has the time of a step for
	// each step's few round trips.
	step := func(f func(context.Context) error) error {
		sctx, cancel := context.WithTimeout(ctx, startTimeout)
		defer cancel()
		err := f(sctx)
		if ended(sctx) && !ended(ctx) {
			if err == nil {
				// The probe says nothing of a Redis that did not answer.
				err = fmt.Errorf("redis at %s: %w", n.where, context.DeadlineExceeded)
			}
			err = fmt.Errorf("%w (no answer within %s)", err, startTimeout)
		}
		return err
	}
	err := step(func(ctx context.Context) error { return n.probe.check(ctx, n.rdb, n.where) })
	if errors.Is(err, ErrUnsupportedRedis) {
		return err
	}
	if err == nil {
		err = step(n.checkModel)
		if errors.Is(err, ErrModelMismatch) || notRedis(err) != nil {
			// Nothing started: no retry mends either.
			return startError(ctx, err, n.where)
		}
	}
	if err == nil {
		err = n.startName(ctx, step)
		if errors.Is(err, ErrNameTaken) || errors.Is(err, supervisor.ErrShuttingDown) {
			return err
		}
	}
	n.startUnbeaten = true
	if err == nil {
		// Alive before its stream exists: a node adopts the streams of
		// nodes it has not heard from.
		err = step(n.beat)
		n.startUnbeaten = err != nil
	}
	if err == nil {
		err = step(n.join)
	}
	if err == nil {
		err = step(n.checkClaims)
	}
	n.stalls.look(time.Now())
	n.writer.Go(func() { n.stalls.run(n.stopped) }) // stopped: the writer is done
	n.writer.Add(1)
	go n.writeLoop()
	n.loops.Add(2)
	go n.readLoop()
	go n.upkeepLoop()
	if err != nil {
		err = fmt.Errorf("%w%s", err, connHint(n.rdb, err))
	}
	return startError(ctx, err, n.where)
}

// startTimeout bounds each step of a node's Start: a check of Redis, of
// the model, a beat, a join.
const startTimeout = readTimeout

// join makes the consumer group on the shared stream and on the node's
// own, reading from their start so that items put there before it existed
// are served too, and lists its own stream for the front ends to route to.
func (n *Node) join(ctx context.Context) error {
	for _, key := range []string{n.k.items, n.own} {
		if key == n.own && n.ownBroken.Load() {
			return nil // neither made nor listed: see mendStreams
		}
		err := n.rdb.XGroupCreateMkStream(ctx, key, nodeGroup, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			return fmt.Errorf("broker: join group %s of %s on redis at %s: %w", nodeGroup, key, n.where, err)
		}
	}
	// Listed, and both given the time to live the beats renew, at once: a
	// node that died before its next beat left them for good. Not in a
	// transaction, which a refused SADD would abort as a whole, its own
	// error (a user's NOPERM, say) lost in Redis's EXECABORT.
	pipe := n.rdb.Pipeline()
	listed := pipe.SAdd(ctx, n.k.streams, n.own)
	pipe.Expire(ctx, n.k.streams, nodeKeysTTL)
	pipe.Expire(ctx, n.own, nodeKeysTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		what := "set the time to live of"
		if listed.Err() != nil {
			what = "list"
		}
		return fmt.Errorf("broker: %s %s on redis at %s: %w", what, n.own, n.where, err)
	}
	n.joined.Store(true)
	return nil
}

// free is how many more items the node may take now.
func (n *Node) free() int {
	capacity := n.capacity()
	n.mu.Lock()
	defer n.mu.Unlock()
	return capacity - len(n.held)
}

// capacity is the most items the node holds: Capacity, for as many
// workers as the Streamer has now. A node scaled up by SetWorkers reads
// enough for its new workers to form whole batches; one scaled down no
// more than its workers left can run soon.
func (n *Node) capacity() int {
	return max(n.cfg.Capacity*n.s.Workers()/n.workersAtStart, 1)
}

// readLoop reads new items while the node has room and its workers can run.
func (n *Node) readLoop() {
	defer n.loops.Done()
	ctx, cancel := n.stopContext()
	defer cancel()
	retry := newBackoff()
	poll := aheadPoll
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		n.noteStreamer()
		// None is read before the node knows that the Redis can serve,
		// and its clock, on which the items' deadlines are (after a start
		// while Redis was down).
		if !n.fit(ctx) {
			retry.wait(n.stop)
			continue
		}
		if !n.holdsName() {
			// Its name not kept since it started, or since Redis last
			// answered a keep (see holdsName).
			if err := n.checkName(ctx); err != nil && !errors.Is(err, ErrNameTaken) && ctx.Err() == nil {
				n.warn("keep the node's name", err)
			}
			if !n.holdsName() {
				retry.wait(n.stop)
				continue
			}
			retry.reset()
		}
		want, block := n.wanted()
		if want > 0 && n.lost.Swap(false) {
			more, err := n.recoverLost(ctx, want)
			if err != nil || more {
				n.lost.Store(true)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				n.warn("look for items a failed read brought", err)
				retry.wait(n.stop)
				continue
			}
			want, block = n.wanted()
		}
		if want > 0 && n.claimIsDue() {
			// Items older than any it would read: see leaveClaim.
			n.takeMu.Lock()
			began := time.Now()
			err := n.claim(ctx)
			n.takeMu.Unlock()
			if err != nil && ctx.Err() == nil {
				n.warnSince("claim items", err, began)
			}
			continue
		}
		if want <= 0 {
			// A worker's restart has no event: look again shortly. Nor
			// has a busy worker's batch nearing its end, when its room
			// ahead opens (see supervisor.Streamer.Room).
			wait := 100 * time.Millisecond
			if in := n.s.RoomAheadIn(); in > 0 {
				wait = min(wait, in)
			}
			if !n.waitRoom(wait) {
				return
			}
			continue
		}
		began := time.Now()
		var wait time.Duration
		if block {
			wait = n.readBlock()
		}
		streams, poison, err := n.read(want, wait)
		n.fetched(want, itemsIn(streams), err)
		switch {
		case errors.Is(err, redis.Nil):
			n.reachable()
			n.readsAllowed()
			if block {
				if wait == blockFor {
					if err := n.steal(ctx, want); err != nil && ctx.Err() == nil {
						n.warn("read other nodes' items", err)
					}
				}
				continue
			}
			// Nothing waits: look again shortly, less often while
			// looks find nothing, or once a worker frees.
			if !n.waitRoom(poll) {
				return
			}
			poll = min(2*poll, aheadPollMax)
			continue
		case err != nil:
			n.takeRead(streams, nil) // those read whole before it failed
			if ctx.Err() != nil {
				return
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				// Redis lost the group (restarted without its data).
				if err := n.join(ctx); err != nil {
					n.warn("rejoin the group", err)
					retry.wait(n.stop)
				}
				continue
			}
			if permissionRefused(err) || redis.HasErrorPrefix(err, "unknown command") {
				n.refuseReads(err)
				retry.wait(n.stop)
				continue
			}
			if redis.HasErrorPrefix(err, "WRONGTYPE") || keyWent(err) {
				// A key of the streams holds another type: the node's
				// own is replaced, the shared one reported. (Or it went,
				// deleted: the next read rejoins.)
				if mended, err := n.mendStreams(ctx); err != nil && ctx.Err() == nil {
					n.warn("look at the types of the streams of items", err)
				} else if mended {
					continue
				}
				retry.wait(n.stop)
				continue
			}
			n.readFailed(err, began)
			retry.wait(n.stop)
			continue
		}
		retry.reset()
		n.reachable()
		n.readsAllowed()
		poll = aheadPoll
		n.takeRead(streams, poison)
	}
}

// takeRead takes the items of a read, with the quarantine read with them,
// or nil to ask Redis for theirs.
func (n *Node) takeRead(streams []redis.XStream, poison map[string]bool) {
	for _, st := range streams {
		n.stats.read.Add(uint64(len(st.Messages)))
		n.takeChecked(st.Stream, st.Messages, poison)
	}
}

// readBlock is how long a read for idle workers waits for items: blockFor,
// or less while the items read last are held for more to fill their
// batch (see supervisor.Streamer.HoldEndsIn): once the hold ends their
// worker runs, and what comes after is for an idle peer, which a read
// still open here would take from it. Whole milliseconds, one at least:
// Redis reads BLOCK 0 as for ever.
func (n *Node) readBlock() time.Duration {
	if hold := n.s.HoldEndsIn(); hold > 0 {
		return min(blockFor, hold.Truncate(time.Millisecond)+time.Millisecond)
	}
	return blockFor
}

// waitRoom waits until a worker frees, or for d; false when the node
// stops meanwhile.
func (n *Node) waitRoom(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-n.room:
	case <-t.C:
	case <-n.stop:
		return false
	}
	return true
}

// read reads up to want new items of the node's own stream first (the
// callers it answered, coming back) and then of the shared one, blocking
// for block if it is not 0, with the quarantine in the same round trip, read
// by Redis right after the items. poison is the quarantine as a set, or
// nil when it was not read whole (then takeChecked asks Redis). The count
// is each stream's, so a read may bring twice want; the own stream holds
// no more than the node answered just before.
//
// The read is not cut short by a stop (blockFor bounds it): Redis may
// hand it items as the stop comes, which would then wait pending for a
// claim.
func (n *Node) read(want int, block time.Duration) (streams []redis.XStream, poison map[string]bool, err error) {
	args := &redis.XReadGroupArgs{
		Group: nodeGroup, Consumer: n.cfg.Name, Streams: []string{n.own, n.k.items, ">", ">"},
		Count: int64(want), Block: -1,
	}
	if n.ownBroken.Load() {
		args.Streams = []string{n.k.items, ">"} // see mendStreams
	}
	if block > 0 {
		args.Block = block
	}
	ctx := context.Background()
	pipe := n.rdb.Pipeline()
	read := pipe.XReadGroup(ctx, args)
	quarantine := pipe.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: n.k.poison, Start: "(" + strconv.FormatInt(n.clock.now().UnixMilli(), 10), Stop: "+inf",
		ByScore: true, Count: quarantineRead,
	})
	_, _ = pipe.Exec(ctx)
	streams, err = read.Result()
	if err != nil {
		// The reply came whole and the connection failed after it (the
		// quarantine's), or it was cut short. The streams read whole are
		// this node's, to run (checked against the quarantine alone); the
		// others' items are looked for (see recoverLost).
		streams = readWhole(streams)
	}
	hashes, qerr := quarantine.Result()
	switch {
	case qerr == nil && len(hashes) < quarantineRead:
		poison = make(map[string]bool, len(hashes))
		for _, h := range hashes {
			poison[h] = true
		}
	case qerr != nil && errors.As(qerr, new(redis.Error)):
		// Redis refused it (the key holds another type, or the user may
		// not read it): asked again for the items read, it would refuse
		// that too, at every read. The items are checked against the
		// node's copy of the quarantine (see quarantined).
		poison = map[string]bool{}
		n.warn("read the quarantine", qerr)
	}
	return streams, poison, err
}

// keyWent says whether err ended a blocked read as its stream's key was
// deleted (or replaced by another type): Redis 7 answers UNBLOCKED, as
// it does to a Redis turned replica, but Redis serves.
func keyWent(err error) bool {
	return redis.HasErrorPrefix(err, "UNBLOCKED") && strings.Contains(err.Error(), "no longer exists")
}

// readFailed logs err, the failure of a read of items begun at began: as
// a stall of the node's own when the read ran out of time long past its
// bound.
func (n *Node) readFailed(err error, began time.Time) {
	if stall, stalled := n.stalls.through(err, began); stalled {
		// Not Redis's fault: the node did not run.
		n.cfg.Logger.Warn("this node did not run for a while (stopped, or starved of CPU): its read of items ran out of time", "for", stall.Round(time.Millisecond), "node", n.cfg.Name)
	} else {
		n.warn("read items", err)
	}
}

// fetchCapMax is past the most items a read asks for: a bound on them
// (see fetched) that grows past it is lifted, as is one set fetchCapLast
// ago. fetchCapGrow is how many reads that brought all they asked for
// under the bound it takes to double it.
const (
	fetchCapMax  = 4096
	fetchCapLast = time.Minute
	fetchCapGrow = 8
)

// fetched notes how a read or claim that asked Redis for up to asked
// items, and got got, from streams (the node's own two need no naming),
// ended. One that got no answer may have been run,
// and handed the node items it does not know of: the read loop looks for
// them (see recoverLost). One that ran out of time may have asked for
// more than this link carries within readTimeout (items of megabytes), and
// a look for them asking as many would run out of time too, for ever,
// each making them new to Redis, so that no other node claimed them
// either: the reads and claims after it ask for half as many, down to
// one, and for twice as many after each fetchCapGrow that brought all
// they asked for, or fetchCapLast after it was set. (A Redis that froze
// has the bound fall too, and it is gone a few dozen reads after.)
func (n *Node) fetched(asked, got int, err error, streams ...string) {
	if !n.sized(asked, got, err) {
		return
	}
	n.mu.Lock()
	for _, stream := range streams {
		if stream != n.own && stream != n.k.items {
			n.lostOn[stream] = true
		}
	}
	n.mu.Unlock()
	n.lost.Store(true)
}

// sized moves the bound on reads and claims as fetched says, and says
// whether the fetch got no answer.
func (n *Node) sized(asked, got int, err error) (failed bool) {
	if err == nil || errors.As(err, new(redis.Error)) { // redis.Nil included
		if c := n.fetchCap.Load(); c > 0 && int64(got) >= c && n.fetchFull.Add(1) >= fetchCapGrow {
			n.fetchFull.Store(0)
			next := 2 * c
			if next > fetchCapMax {
				next = 0
			}
			n.fetchCap.CompareAndSwap(c, next)
		}
		return false
	}
	// A connection closed under the read is taken as one that ran out
	// of time: Redis closes a client whose answer is over its
	// client-output-buffer-limit, and the same read, asked again, would
	// be closed again, for ever.
	if timedOut(err) || brokenConn(err) {
		n.fetchFull.Store(0)
		n.fetchCapSet.Store(n.sinceBorn())
		n.fetchCap.Store(int64(max(asked/2, 1)))
		n.cfg.Logger.Debug("a read of items ran out of time or lost its connection: the next ask for fewer", "items", max(asked/2, 1), "node", n.cfg.Name, "err", err)
	}
	return true
}

// fetchBound is the most items a read or claim may ask for now (see
// fetched), or 0 for no bound.
func (n *Node) fetchBound() int {
	c := n.fetchCap.Load()
	if c > 0 && n.sinceBorn()-n.fetchCapSet.Load() >= int64(fetchCapLast) {
		n.fetchCap.CompareAndSwap(c, 0)
		return 0
	}
	return int(c)
}

// readWhole is what a read that failed had read whole: the client keeps
// what it read of a reply cut short, up to the first stream it could not
// read whole, and gives the error to every command of a pipeline, one
// answered whole included.
func readWhole(streams []redis.XStream) []redis.XStream {
	whole := 0
	for whole < len(streams) && streams[whole].Stream != "" && streams[whole].Messages != nil {
		whole++
	}
	return streams[:whole]
}

// itemsIn counts the entries of streams, as a read answers them.
func itemsIn(streams []redis.XStream) (n int) {
	for _, st := range streams {
		n += len(st.Messages)
	}
	return n
}

// recoverLost takes up to want of the items that Redis gave this node in
// reads or claims whose answers it never got (the read ran out of time as
// the node stalled, or its connection closed under it): pending to the
// node in Redis and unknown to it, they would wait for a claim,
// --claim-idle later. It says whether more are left than it took. takeMu
// keeps claims out meanwhile: an item a claim has just taken is pending to
// the node too, and not yet held.
func (n *Node) recoverLost(ctx context.Context, want int) (more bool, err error) {
	n.takeMu.Lock()
	defer n.takeMu.Unlock()
	if !n.holdsName() {
		return true, nil // those pending to it may be another's (see holdsName)
	}
	if c := n.fetchBound(); c > 0 {
		want = min(want, c) // what a failed read brought may be what it could not carry
	}
	streams := []string{n.own, n.k.items}
	n.mu.Lock()
	for stream := range n.lostOn {
		streams = append(streams, stream)
	}
	n.mu.Unlock()
	for i, stream := range streams {
		if want <= 0 {
			return true, nil // the others are left for the next look
		}
		pending, err := n.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: nodeGroup, Start: "-", End: "+",
			Count: int64(2*n.capacity() + want), Consumer: n.cfg.Name,
		}).Result()
		switch {
		case err != nil && redis.HasErrorPrefix(err, "NOGROUP"):
			// The read loop rejoins; another node's stream went.
			n.recovered(stream)
			continue
		case err != nil:
			return true, err
		}
		var ids []string
		var idle time.Duration // the least of theirs
		left := false
		// Items delivered more than once came from claims. While claims
		// are held off, those may be what a claim sent as Redis froze
		// took from a live node as the freeze ended (see frozeFor):
		// they are left to their node's keep, or to a claim once idle
		// past ClaimIdle. Items read are delivered once.
		heldOff := n.claimsHeldOff()
		n.mu.Lock()
		for _, p := range pending {
			if _, held := n.held[entry{stream, p.ID}]; !held && (!heldOff || p.RetryCount <= 1) {
				if len(ids) == want {
					left = true
					break
				}
				if len(ids) == 0 || p.Idle < idle {
					idle = p.Idle
				}
				ids = append(ids, p.ID)
			}
		}
		n.mu.Unlock()
		if len(ids) > 0 && !n.holdsName() {
			return true, nil // its name lapsed as it looked
		}
		if len(ids) > 0 {
			// As idle as they were: one that another node claimed
			// meanwhile (idle past its --claim-idle, then made new by the
			// claim) stays with it.
			msgs, err := n.rdb.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: nodeGroup, Consumer: n.cfg.Name, MinIdle: idle, Messages: ids}).Result()
			n.fetched(len(ids), len(msgs), err, stream)
			if err != nil {
				return true, err
			}
			if msgs = n.notHeld(stream, msgs); len(msgs) > 0 {
				n.cfg.Logger.Info("took the items a failed read had brought", "items", len(msgs), "stream", stream, "node", n.cfg.Name)
				n.stats.read.Add(uint64(len(msgs)))
				n.take(stream, msgs)
				want -= len(msgs)
			}
		}
		if left {
			return true, nil
		}
		if i >= 2 {
			n.recovered(stream)
		}
	}
	return false, nil
}

// recovered forgets stream as one where items of a failed read or claim
// may be left (see lostOn).
func (n *Node) recovered(stream string) {
	n.mu.Lock()
	delete(n.lostOn, stream)
	n.mu.Unlock()
}

// quarantineRead bounds the quarantine read with the items: a larger one
// is asked of Redis for the items read alone (see quarantined).
const quarantineRead = 256

// wanted is how many items to read now, and whether to wait for them: as
// many as idle workers can start at once (waiting for the first to come),
// else as many as busy workers can take ahead, for their next batches
// (without waiting: a new item should go to a node with an idle worker,
// which Redis hands it to as it arrives; see aheadPoll). It asks for no
// more than its Capacity leaves, from each of its two streams: its own
// holds only the callers it just answered.
func (n *Node) wanted() (want int, block bool) {
	free := n.free()
	if free <= 0 || n.refusal() != "" || n.claimsRefused.Load() != nil || !n.claimsChecked.Load() || !n.holdsName() {
		return 0, false
	}
	if c := n.fetchBound(); c > 0 {
		free = min(free, c)
	}
	now, ahead := n.s.Room()
	switch {
	case now > 0:
		return min(now, free), true
	case ahead > 0:
		return min(ahead, free), false
	}
	return 0, false
}

// aheadPoll is how often a node whose workers are all busy looks for items
// to form their next batches from. Redis hands a new item to a node blocked
// on the stream (one with an idle worker) as it arrives, so what such a
// look finds, no idle worker was waiting for. Before, a busy node read
// ahead only after a read that took all it asked for: items that came
// after waited in Redis until a worker freed, and batches started part
// empty at 512 clients. Looks that find nothing double the interval, up to
// aheadPollMax, so that many busy nodes that keep up do not load Redis.
const (
	aheadPoll    = time.Millisecond
	aheadPollMax = 8 * time.Millisecond
)

// stopContext is canceled when the node stops reading.
func (n *Node) stopContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// take runs the items read from stream, or answers at once those that
// must not run. Those that run are queued together, so that they can share
// a batch.
func (n *Node) take(stream string, msgs []redis.XMessage) { n.takeChecked(stream, msgs, nil) }

// takeChecked is take with the quarantine as read with the items, or nil
// to ask Redis for theirs.
func (n *Node) takeChecked(stream string, msgs []redis.XMessage, quarantine map[string]bool) {
	now := time.Now()
	n.mu.Lock()
	for _, m := range msgs {
		n.held[entry{stream, m.ID}] = now
	}
	n.mu.Unlock()
	poison := n.quarantined(msgs, quarantine)
	run := make([]answerEntry, 0, len(msgs))
	reqs := make([]supervisor.Request, 0, len(msgs))
	for _, m := range msgs {
		// A malformed item is answered with an error when its header
		// names a front end, and only acknowledged when it names none.
		hd, ok := parseHeader(str(m.Values, fieldHeader))
		a := answerEntry{entry: entry{stream, m.ID}, front: hd.front, seq: hd.seq, index: hd.index, ttl: hd.ttl}
		value, hasValue := m.Values[fieldValue].(string)
		if !ok || !hasValue {
			n.repeats.Log(n.cfg.Logger, slog.LevelWarn, "malformed item", "malformed item on the stream; dropped", "id", m.ID, "stream", stream)
			a.err = fmt.Errorf("%w: malformed item %s on the stream", supervisor.ErrBadRequest, m.ID)
			n.answer(a)
			continue
		}
		deadline := hd.deadline
		req := supervisor.Request{Items: [][]byte{[]byte(value)}}
		key, keyed := m.Values[fieldKey].(string)
		if keyed {
			req.Keys = []string{key}
		}
		if deadline > 0 {
			req.Deadline = n.clock.fromShared(time.UnixMicro(deadline))
			if !now.Before(req.Deadline) {
				n.stats.expired.Add(1)
				a.err = fmt.Errorf("%w: while the item waited in redis", supervisor.ErrDeadline)
				n.answer(a)
				continue
			}
		}
		if poison[m.ID] {
			n.stats.quarantined.Add(1)
			a.err = fmt.Errorf("%w: quarantined, as it crashed a node's model", supervisor.ErrPoison)
			n.answer(a)
			continue
		}
		run = append(run, a)
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return
	}
	futs, errs := n.s.SubmitRequests(context.Background(), reqs)
	for i, fut := range futs {
		a, data, key := run[i], reqs[i].Items[0], ""
		if reqs[i].Keys != nil {
			key = reqs[i].Keys[0]
		}
		if fut == nil {
			n.settle(a, key, data, nil, errs[i])
			continue
		}
		// Run by the goroutine that took the batch's answer from its
		// worker, right after it: the answers of one batch are posted
		// one after another (see writeLoop).
		fut.OnDone(func() {
			out, err := fut.Result(context.Background())
			var output []byte
			if len(out) == 1 {
				output = out[0]
			}
			if errors.Is(err, supervisor.ErrPoison) {
				// Shares the quarantine through Redis before answering:
				// a round trip the workers' answers must not wait for.
				go n.settle(a, key, data, output, err)
				return
			}
			n.settle(a, key, data, output, err)
		})
	}
}

// quarantined returns the ids of the items of msgs that some node found to
// crash the model: read from Redis with every read (quarantine, the hashes
// in it then; nil to ask Redis for those of msgs now), so that an item
// found by one node is refused by the others at once, and remembered from
// the heartbeats' copy of the quarantine while Redis does not answer.
func (n *Node) quarantined(msgs []redis.XMessage, quarantine map[string]bool) map[string]bool {
	known := *n.poison.Load()
	now := n.clock.now()
	if len(msgs) == 0 || quarantine != nil && len(quarantine) == 0 && len(known) == 0 {
		return nil // nothing is quarantined: no item needs its hash
	}
	hashes := make([]string, len(msgs))
	for i, m := range msgs {
		value, _ := m.Values[fieldValue].(string)
		hashes[i] = poisonHash(str(m.Values, fieldKey), []byte(value))
	}
	found := func(i int) bool { return quarantine[hashes[i]] }
	if quarantine == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		scores, err := n.rdb.ZMScore(ctx, n.k.poison, hashes...).Result()
		if err != nil {
			n.warn("read the quarantine", err)
		}
		ms := float64(now.UnixMilli())
		found = func(i int) bool { return err == nil && scores[i] > ms }
	}
	var ids map[string]bool
	for i, m := range msgs {
		if until, ok := known[hashes[i]]; (ok && until.After(now)) || found(i) {
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[m.ID] = true
		}
	}
	return ids
}

// settle answers an item that ran (or was refused by the Streamer), or
// leaves it to another node when this one could not run it.
func (n *Node) settle(a answerEntry, key string, data, output []byte, err error) {
	switch {
	case errors.Is(err, supervisor.ErrUnavailable), errors.Is(err, supervisor.ErrShuttingDown), errors.Is(err, supervisor.ErrOverloaded):
		// Not the item's fault: leave it in the group, unacknowledged and
		// no longer kept alive by this node, for another to claim.
		n.stats.released.Add(1)
		n.release(a.entry)
		return
	case errors.Is(err, supervisor.ErrPoison):
		n.quarantine(poisonHash(key, data))
	}
	a.output, a.err = output, itemError(err)
	n.answer(a)
	n.signalRoom() // the worker that ran it may be idle now
}

// signalRoom wakes the read loop, which looks again at how much to read.
func (n *Node) signalRoom() {
	select {
	case n.room <- struct{}{}:
	default:
	}
}

// answer posts a for the writer. It never waits: it runs in the goroutine
// that takes the workers' answers (see takeChecked).
func (n *Node) answer(a answerEntry) {
	n.answersMu.Lock()
	n.answers = append(n.answers, a)
	n.answersMu.Unlock()
	select {
	case n.posted <- struct{}{}:
	default:
	}
}

// takeAnswers appends the answers posted so far to batch.
func (n *Node) takeAnswers(batch []answerEntry) []answerEntry {
	n.answersMu.Lock()
	batch = append(batch, n.answers...)
	clear(n.answers) // their outputs are batch's now
	n.answers = n.answers[:0]
	n.answersMu.Unlock()
	return batch
}

// release forgets the item e.
func (n *Node) release(e entry) {
	n.mu.Lock()
	delete(n.held, e)
	n.mu.Unlock()
	n.signalRoom()
}

// quarantine shares an item's hash with every node.
func (n *Node) quarantine(hash string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	until := n.clock.now().Add(n.cfg.PoisonTTL)
	pipe := n.rdb.Pipeline()
	pipe.ZAdd(ctx, n.k.poison, redis.Z{Score: float64(until.UnixMilli()), Member: hash})
	// Gone with its last entry, should no node beat again (see beat).
	pipe.Expire(ctx, n.k.poison, n.cfg.PoisonTTL+heartbeat)
	if _, err := pipe.Exec(ctx); err != nil {
		n.cfg.Logger.Warn("share a poison item", "err", err)
	}
	n.rememberPoison(map[string]time.Time{hash: until})
}

// rememberPoison adds hashes to the node's copy of the quarantine, each
// until its time, and drops those whose time has passed.
func (n *Node) rememberPoison(hashes map[string]time.Time) {
	n.poisonMu.Lock()
	defer n.poisonMu.Unlock()
	now := n.clock.now()
	old := *n.poison.Load()
	fresh := make(map[string]time.Time, len(old)+len(hashes))
	for _, m := range []map[string]time.Time{old, hashes} {
		for h, until := range m {
			if until.After(now) && until.After(fresh[h]) {
				fresh[h] = until
			}
		}
	}
	n.poison.Store(&fresh)
}

// writeLoop writes the answers, many in one round trip, and acknowledges
// their items once they are written. An answer that cannot be written is
// retried until it is, or until the node is killed: its item stays in the
// group meanwhile, for another node to claim.
//
// Up to writesInFlight writes are out at once. A node's workers often
// finish within a fraction of a millisecond of each other (they started
// on the halves of one read), and with one write at a time the second
// batch's answers waited for the first's round trip, about half a
// millisecond on a loaded machine, and its callers came back that much
// later (TestASecondBatchsAnswersDoNotWaitForTheFirstsWrite).
func (n *Node) writeLoop() {
	defer n.writer.Done()
	out := make(chan struct{}, writesInFlight) // a token per write out
	defer func() {
		for range writesInFlight {
			out <- struct{}{}
		}
	}()
	for {
		select {
		case <-n.posted:
		case <-n.stopped:
			return
		}
		// A free place first: answers posted while two writes are out
		// go together in the next.
		select {
		case out <- struct{}{}:
		case <-n.stopped:
			return
		}
		batch := n.gatherAnswers()
		if len(batch) == 0 {
			<-out
			continue
		}
		go func() {
			defer func() { <-out }()
			n.write(batch)
		}()
	}
}

// writesInFlight bounds the writes of answers out at once (see writeLoop).
const writesInFlight = 2

// gatherAnswers takes the answers posted, once the batch being answered as
// it is called has posted all of its own. The answers of one batch are
// posted one after another by the goroutine that took them from the
// worker: let it post them all before writing, so that the batch's callers
// are answered in one write and come back together. It waits while the
// batch under way as it began is being answered (Streamer.Answering), then
// until none came for answersQuiet (a batch after it goes in the next
// write). Before, each answer came from a goroutine of its own, and on a
// busy machine a batch's answers went out in up to five writes, its
// callers came back in as many bunches, and the next batches started part
// empty.
func (n *Node) gatherAnswers() []answerEntry {
	var batch []answerEntry
	first := time.Now()
	last := first
	_, since := n.s.Answering()
	for len(batch) < 512 {
		k := len(batch)
		batch = n.takeAnswers(batch)
		now := time.Now()
		answering, done := n.s.Answering()
		switch {
		case len(batch) > k:
			last = now
		case now.Sub(first) >= answersMaxWait:
		case answering && done == since:
			runtime.Gosched()
			continue
		}
		if now.Sub(last) >= answersQuiet || now.Sub(first) >= answersMaxWait {
			break
		}
		runtime.Gosched()
	}
	return batch
}

// write writes the answers of batch until Redis takes them or the node is
// killed, letting their items go as they are written: a batch whose
// outputs are larger than writeMaxBytes goes in several writes.
func (n *Node) write(batch []answerEntry) {
	for len(batch) > 0 {
		k, size := 1, len(batch[0].output)
		for k < len(batch) && size+len(batch[k].output) <= writeMaxBytes {
			size += len(batch[k].output)
			k++
		}
		if !n.writeWhole(batch[:k]) {
			return
		}
		batch = batch[k:]
	}
}

// flushTimeout bounds one write of answers.
const flushTimeout = 2 * time.Second

// writeMaxBytes bounds the outputs of one write of answers, so that it
// goes through within the client's write timeout (2 s) on a slow link: 4
// MiB take 34 ms at 1 Gb/s. A larger answer goes alone.
const writeMaxBytes = 4 << 20

// writeWhole writes the answers of batch in one transaction until Redis
// takes them, and lets their items go; it returns false if the node was
// killed first.
func (n *Node) writeWhole(batch []answerEntry) bool {
	retry := newBackoff()
	for {
		began := time.Now()
		err := n.flush(batch)
		if err == nil {
			break
		}
		n.stats.writeFailures.Add(1)
		stall, stalled := n.stalls.through(err, began)
		switch {
		case redis.HasErrorPrefix(err, "NOPERM"):
			n.refuse(err, len(batch))
		case stalled:
			n.cfg.Logger.Warn("this node did not run for a while (stopped, or starved of CPU): its write of answers ran out of time; writing them again", "for", stall.Round(time.Millisecond), "node", n.cfg.Name)
		default:
			n.warn(fmt.Sprintf("write %d answers", len(batch)), err)
		}
		select {
		case <-n.stopped:
			return false
		default:
		}
		if outOfMemory(err) {
			if batch = n.dropUnwanted(batch); len(batch) == 0 {
				return true
			}
		}
		retry.wait(n.stopped)
	}
	n.reachable()
	if n.full.Swap(false) {
		n.cfg.Logger.Info("redis takes this node's answers again", "redis", n.where)
	}
	if n.refused.Swap(nil) != nil {
		n.cfg.Logger.Info("redis takes this node's answers again; it takes items again", "redis", n.where)
	}
	n.mu.Lock()
	for _, a := range batch {
		delete(n.held, a.entry)
	}
	n.mu.Unlock()
	n.signalRoom()
	n.stats.answered.Add(uint64(len(batch)))
	return true
}

// goneScript answers which of the items named are gone from their
// streams (their places among the pairs, from 1). It writes nothing, so a
// full Redis runs it. It reads the items whole, for at most ARGV[1] bytes
// of them (see lostLookBytes): those left once they are read are not
// judged, and their answers kept.
//
//	ARGV    the most bytes of items to read, then stream, id, stream, id, ...
var goneScript = redis.NewScript(`
local gone = {}
local budget = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  if budget <= 0 then break end
  local e = redis.call('XRANGE', ARGV[i], ARGV[i + 1], ARGV[i + 1])
  if #e == 0 then
    gone[#gone + 1] = i / 2
  else
    for _, v in ipairs(e[1][2]) do budget = budget - #v end
  end
end
return gone
`)

// dropUnwanted returns the answers of batch still wanted, once Redis has
// refused them for want of memory, and lets the others' items go without
// an answer: those gone from their streams, withdrawn by their front end
// as their callers gave up (see withdrawScript), whose answers would take
// memory for nobody. In a Redis filled by items, their callers failed for
// it, the answers are what would keep it full. XACK takes no memory. On a
// failure it keeps them all: nothing is lost but the memory.
func (n *Node) dropUnwanted(batch []answerEntry) []answerEntry {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	args := make([]any, 0, 1+2*len(batch))
	args = append(args, lostLookBytes)
	for _, a := range batch {
		args = append(args, a.stream, a.id)
	}
	places, err := goneScript.Run(ctx, n.rdb, nil, args...).Int64Slice()
	if err != nil || len(places) == 0 {
		return batch
	}
	gone := make(map[int]bool, len(places))
	ids := map[string][]string{} // by stream
	for _, k := range places {
		if k < 1 || int(k) > len(batch) {
			return batch
		}
		a := batch[k-1]
		gone[int(k-1)] = true
		ids[a.stream] = append(ids[a.stream], a.id)
	}
	pipe := n.rdb.Pipeline()
	for stream, ids := range ids {
		pipe.XAck(ctx, stream, nodeGroup, ids...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return batch
	}
	var wanted []answerEntry
	n.mu.Lock()
	for i, a := range batch {
		if gone[i] {
			delete(n.held, a.entry)
		} else {
			wanted = append(wanted, a)
		}
	}
	n.mu.Unlock()
	n.signalRoom()
	n.stats.withdrawn.Add(uint64(len(gone)))
	n.cfg.Logger.Debug("redis is full: dropped the answers of items gone from their streams (withdrawn, their callers gone, or answered by another node)", "answers", len(gone), "node", n.cfg.Name)
	return wanted
}

// warn logs err, the failure of what. A Redis that does not answer (down,
// unreachable, loading its data, refusing the node's password) is logged
// once, as an error, and then at debug level until it answers again (see
// reachable): the node's loops fail several times a second meanwhile. So
// is a Redis out of memory,
// until it takes a write again. A permission the node's user lacks
// (NOPERM) is logged once for each thing the node did, as it does not
// mend by itself. Another error Redis answered (a key of the wrong type)
// is logged at once, and then at most once every repeats.Every for each
// thing the node did and kind of error, with the count of those held back
// (see repeats.Lines): a read fails so hundreds of times a second.
func (n *Node) warn(what string, err error) {
	if permissionRefused(err) {
		if _, seen := n.refusedOnce.LoadOrStore(what, true); seen {
			n.cfg.Logger.Debug(what, "redis", n.where, "err", err)
			return
		}
		n.cfg.Logger.Warn(what+": the node's redis user lacks a permission (the README's \"Many machines\" lists what it needs); logged once", "redis", n.where, "err", err)
		return
	}
	if outOfMemory(err) {
		if n.full.Swap(true) {
			n.cfg.Logger.Debug(what, "redis", n.where, "err", err)
			return
		}
		n.cfg.Logger.Error("redis is out of memory and refuses writes; this node keeps its answers and retries, but for those of items withdrawn meanwhile, their callers gone (raise Redis's maxmemory, or lower --max-queue)", "while", what, "redis", n.where, "err", err)
		return
	}
	var reply redis.Error
	// A password changed on Redis refuses every command alike, as an
	// outage does, until it is mended.
	authRefused := authError(err)
	if errors.As(err, &reply) && !notServing(err) && !authRefused {
		n.repeats.Log(n.cfg.Logger, slog.LevelWarn, repeatKind(what, err), what, "redis", n.where, "err", err)
		return
	}
	if brokenConn(err) && !n.broken.Swap(true) {
		// One connection closed or reset says nothing of Redis: the
		// node goes on over a new one. Another before Redis answers
		// again (each new one closed at once) is an outage.
		n.cfg.Logger.Warn(what+": a connection to redis closed; going on over a new one (if this repeats while items are large, redis may be closing connections whose answers pass its client-output-buffer-limit for normal clients: raise it)", "redis", n.where, "err", err)
		return
	}
	if back := n.back.Load(); dialFailed(err) && back != 0 && n.sinceBorn()-back < int64(dialGrace) {
		// The client library hands the failure of its last dial to the
		// commands of a pool it has not dialled again since, for up to a
		// second after Redis came back: no news of Redis.
		n.cfg.Logger.Debug(what, "redis", n.where, "err", err)
		return
	}
	if n.down.Swap(true) {
		n.cfg.Logger.Debug(what, "redis", n.where, "err", err)
		return
	}
	if authRefused {
		n.cfg.Logger.Error("redis refuses this node's authentication (the password or user changed on Redis, or the user is gone?); it keeps its items and retries", "while", what, "redis", n.where, "err", err)
		return
	}
	n.cfg.Logger.Error("redis does not serve this node; it keeps its items and retries", "while", what, "redis", n.where, "err", err)
}

// warnSince is warn for a command begun at began, unless its time ran out
// because the node did not run (see stallWatch): that is said as such,
// and not taken for an outage of Redis.
func (n *Node) warnSince(what string, err error, began time.Time) {
	if stall, stalled := n.stalls.through(err, began); stalled {
		n.cfg.Logger.Warn("this node did not run for a while (stopped, or starved of CPU): a command ran out of time", "while", what, "for", stall.Round(time.Millisecond), "node", n.cfg.Name)
		return
	}
	n.warn(what, err)
}

// notServing says whether err, an error Redis answered, means it does not
// serve for now: it loads its data, or it is a replica (a failover under
// way; a script learns it from its first write, a blocked read is ended
// with UNBLOCKED), or its master is gone, or a script runs too long.
func notServing(err error) bool {
	for _, prefix := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "BUSY ", "UNBLOCKED"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return strings.Contains(err.Error(), "READONLY You can't write against a read only replica")
}

// outOfMemory says whether err is Redis's refusal of a write for want of
// memory: OOM as a command's reply (a script's too, in Redis 7), or, in
// Redis 6.2, the same error raised inside a script ("ERR Error running
// script ... -OOM command not allowed ...").
func outOfMemory(err error) bool {
	if redis.HasErrorPrefix(err, "OOM") {
		return true
	}
	return errors.As(err, new(redis.Error)) && strings.Contains(err.Error(), "-OOM command not allowed")
}

// dialGrace is how long after Redis answered the node again a connection
// refused is not taken for Redis down again: the Redis client redials a
// pool whose dials failed once a second, and until then its commands fail
// with the last dial's error, though Redis answers.
const dialGrace = 1500 * time.Millisecond

// dialFailed says whether err is the failure to open a connection.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// reachable notes that Redis answered the node.
func (n *Node) reachable() {
	n.broken.Store(false)
	if n.down.Swap(false) {
		n.back.Store(max(n.sinceBorn(), 1))
		n.cfg.Logger.Info("redis serves this node again", "redis", n.where)
		// Front ends count it again once it beats; a Redis restarted
		// without its data has no list of nodes until then.
		n.beatNow()
	}
}

// noteStreamer has the upkeep beat at once when the Streamer can take
// less than when the read loop last looked (no worker can run, or it was
// shut down), so that front ends learn it within a look rather than a
// heartbeat: until then they admit requests for the node, which it cannot
// run, and which it leaves for a claim. A worker that can run again waits
// for the next heartbeat, as before: one that crashes as it comes up (on
// an item it retries) would otherwise have front ends admit requests for
// it at once, and fail them.
func (n *Node) noteStreamer() {
	var state int32
	switch {
	case !n.s.Started():
		state = 2
	case !n.s.Available():
		state = 1
	}
	if n.streamerSeen.Swap(state) < state {
		n.beatNow()
	}
}

// streamerGone says whether the node's Streamer is shut down and the node
// holds no item: it will run nothing again (a Streamer does not start
// after Shutdown), nor has anything left to finish.
func (n *Node) streamerGone() bool {
	if n.s.Started() {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.held) == 0
}

// beatNow has the upkeep beat at once.
func (n *Node) beatNow() {
	select {
	case n.beatSoon <- struct{}{}:
	default:
	}
}

// refuseReads notes that Redis refused the node's read of items for err:
// its user lacks the permission, or Redis no longer knows the command (the
// start checks that it does). No retry mends that until an operator does,
// and the node had gone on beating as alive: front ends admitted requests
// for it that no node read, and their callers waited to their deadlines.
// It now takes itself off the lists of nodes, alive and leaving (see
// beat), at once: front ends admit nothing for it and route nothing to it,
// another node adopts its own stream, and with no other node the callers
// waiting fail with 503 as when no node is alive, their unread items
// withdrawn (beating as leaving would have kept them waiting for items
// that no node reads). It answers what it holds, claims nothing, and
// retries its reads, with a backoff, until one goes through.
func (n *Node) refuseReads(err error) {
	n.stopReads(err.Error(), "redis refuses this node's reads of items (the README's \"Many machines\" lists what its user needs); it takes no items, and front ends count it as no node, until a read goes through",
		"redis", n.where, "err", err)
}

// stopReads has the node take no items, for why, as refuseReads says,
// and logs msg with args as an error, once until a read goes through.
func (n *Node) stopReads(why, msg string, args ...any) {
	n.claimDue.Store(0)
	if n.readRefused.Swap(&why) == nil {
		n.cfg.Logger.Error(msg, args...)
		n.beatNow()
	}
}

// mendStreams looks, after a read refused for WRONGTYPE, at which of the
// node's two streams holds another type than a stream (written by hand,
// or by another program sharing the Redis), and says whether it mended
// what it found. Before, the node's read, which reads both in one
// command, failed for ever, while the node beat as alive: callers routed
// to it, or with it the only node, waited for their deadlines, and the
// node's log said only that a read failed.
//
// Its own stream, which only it reads and which holds only the callers
// it just answered, it replaces with a new stream and group, logging
// what the key held, which is lost, as are the items that were on the
// stream (their front ends find them gone, and fail their calls). Should
// Redis refuse that, it takes its stream off the list front ends route
// by, reads the shared stream alone, and tries again at its upkeep's
// ticks. The shared stream it leaves to an operator (front ends write
// it, and refuse requests meanwhile, naming it): it takes no items,
// beats as neither alive nor leaving, so that front ends count it as no
// node and fail its callers at once, and reads again, with a backoff,
// until a read goes through.
func (n *Node) mendStreams(ctx context.Context) (mended bool, err error) {
	pipe := n.rdb.Pipeline()
	own := pipe.Type(ctx, n.own)
	shared := pipe.Type(ctx, n.k.items)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, err
	}
	if t := own.Val(); t != typeStream && t != "none" {
		mended = n.mendOwn(ctx)
	} else if n.ownBroken.Swap(false) {
		n.cfg.Logger.Info("the node's own stream is a stream again; front ends route callers to it again", "stream", n.own, "node", n.cfg.Name)
		n.joined.Store(false) // listed again by the next join
	}
	if t := shared.Val(); t != typeStream && t != "none" {
		why := fmt.Sprintf("%s holds %s, where streamer keeps the stream of items", n.k.items, article(t))
		n.stopReads(why, "the shared stream of items holds another type: this node takes no items, and front ends count it as no node, until it is a stream again (delete the key; front ends refuse requests meanwhile)",
			"key", n.k.items, "type", t, "redis", n.where, "node", n.cfg.Name)
	}
	return mended, nil
}

// mendOwn replaces the node's own stream, whose key holds another type,
// with a new stream and group (see mendStreams), and says whether it did.
func (n *Node) mendOwn(ctx context.Context) bool {
	m, err := mend(ctx, n.rdb, n.own, typeStream, nodeGroup)
	if err == nil && !m.replaced(typeStream) {
		// Of another type no more (deleted by hand meanwhile).
		if n.ownBroken.Swap(false) {
			n.joined.Store(false)
		}
		return true
	}
	if err != nil {
		if !n.ownBroken.Swap(true) {
			n.cfg.Logger.Error("the node's own stream holds another type than a stream, and redis refuses to replace it: the node reads the shared stream alone, and front ends route it no callers, until it is mended (delete the key)",
				"stream", n.own, "redis", n.where, "node", n.cfg.Name, "err", err)
		}
		// Front ends route by the list: off it, callers go to the shared
		// stream. Best effort, at each try.
		if err := n.rdb.SRem(ctx, n.k.streams, n.own).Err(); err != nil {
			n.warn("take the node's own stream off the list", err)
		}
		return false
	}
	n.cfg.Logger.Error("the node's own stream held another type than a stream: replaced by a new stream; what the key held is lost, and so are the items that were on the stream, whose front ends fail their callers",
		"stream", n.own, "held", m.String(), "redis", n.where, "node", n.cfg.Name)
	if n.ownBroken.Swap(false) {
		n.joined.Store(false) // listed again by the next join
	}
	return true
}

// readsAllowed notes that a read of items went through.
func (n *Node) readsAllowed() {
	if n.readRefused.Load() != nil && n.readRefused.Swap(nil) != nil {
		n.cfg.Logger.Info("this node reads items again; it takes items", "redis", n.where)
		n.beatNow()
	}
}

// readsRefused says why Redis refuses the node's reads, or its claims,
// or "".
func (n *Node) readsRefused() string {
	if why := n.readRefused.Load(); why != nil {
		return *why
	}
	if why := n.claimsRefused.Load(); why != nil {
		return *why
	}
	return ""
}

// refuse notes that Redis refused to take answers for err, a permission
// the node's user lacks (an ACL that leaves out the reply streams, or
// XADD). No retry fixes that until an operator does, and other nodes may
// have the permission: the node takes no items, stops its heartbeat (so
// that front ends route nothing to it, and other nodes adopt its own
// stream) and stops keeping those it holds, which other nodes claim after
// ClaimIdle and answer. It retries its writes meanwhile, and takes items
// again once one goes through.
func (n *Node) refuse(err error, answers int) {
	msg := err.Error()
	if n.refused.Swap(&msg) == nil {
		n.cfg.Logger.Error("redis refuses this node's answers: its user lacks a permission; it takes no items and leaves those it holds to other nodes until a write goes through",
			"answers", answers, "redis", n.where, "err", err)
		n.signalRoom() // a Shutdown waiting for the items need wait no more
	}
}

// answersQuiet is how long the writer waits after the last answer posted
// before it writes, once the batch it woke for is answered: short against a
// round trip to Redis. answersMaxWait bounds the whole wait, should a
// batch's answering stall.
const (
	answersQuiet   = 20 * time.Microsecond
	answersMaxWait = 20 * time.Millisecond
)

// replyMaxLen bounds, in entries (a write's answers each), a reply stream
// whose front end stopped reading it while alive; the front end trims what
// it has read.
const replyMaxLen = 100_000

// flush writes the answers of batch, then acknowledges and deletes their
// items, in one transaction: Redis refuses it whole when it cannot take the
// answers (out of memory), and then nothing is acknowledged. If the node
// dies before the transaction, its items are claimed and answered by
// another node; the front end drops any second answer.
func (n *Node) flush(batch []answerEntry) error {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	pipe := n.rdb.TxPipeline()
	ids := map[string][]string{} // by stream
	workers := n.s.Workers()
	// Busy: no worker idles, items wait for them (saturation). The front
	// end then sends these callers' next requests to whichever node reads
	// first rather than back to this one.
	room, _ := n.s.Room()
	busy := 0
	if room == 0 {
		busy = 1
	}
	fronts := map[string]*replies{}
	for i := range batch {
		a := &batch[i]
		ids[a.stream] = append(ids[a.stream], a.id)
		if a.front == "" {
			continue // malformed: nobody to answer
		}
		key := n.k.replyPrefix + a.front
		p := fronts[key]
		if p == nil {
			p = &replies{ttl: cmp.Or(a.ttl, n.cfg.ReplyTTL)}
			fronts[key] = p
		}
		p.add(a)
	}
	for key, p := range fronts {
		for _, chunk := range p.chunks {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: replyMaxLen, Approx: true, Values: []any{
				fieldNode, n.cfg.Name, fieldWorkers, workers, fieldBusy, busy, fieldAnswers, chunk,
			}})
		}
		pipe.Expire(ctx, key, p.ttl)
	}
	for stream, ids := range ids {
		pipe.XAck(ctx, stream, nodeGroup, ids...)
		pipe.XDel(ctx, stream, ids...)
	}
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	if redis.HasErrorPrefix(err, "EXECABORT") {
		// Refused whole, as a command was refused when queued (no
		// memory, no permission): that command's error says why.
		for _, cmd := range cmds {
			if e := cmd.Err(); e != nil && !redis.HasErrorPrefix(e, "EXECABORT") {
				return fmt.Errorf("%s: %w", cmd.Name(), e)
			}
		}
		return err
	}
	// A command that failed as it ran (the group gone after a restart)
	// needs no retry; a transaction never received does.
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && !errors.As(e, new(redis.Error)) {
			return e
		}
	}
	if !errors.As(err, new(redis.Error)) {
		return err
	}
	return nil
}

// upkeepLoop keeps the node's items its own, takes over those of silent
// nodes, says the node is alive, and follows the shared quarantine.
func (n *Node) upkeepLoop() {
	defer n.loops.Done()
	ctx, cancel := n.stopContext()
	defer cancel()
	every := n.upkeepEvery()
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastBeat := time.Now()
	var beatOK time.Time // when the last beat went through
	// quietUntil holds off claims and adoptions while Redis does not
	// serve the node, and for nodeSilence after: Redis was down, or
	// froze, or the node stalled, and the other nodes may not have kept
	// their items nor beaten either, while their items' idle time and
	// their silence grew on Redis's clock. Taking their items or their
	// streams waits until they have had the time to.
	troubled := n.holdOffClaims
	if n.startUnbeaten {
		troubled()
	}
	for {
		var now time.Time
		soon := false
		select {
		case now = <-tick.C:
		case <-n.beatSoon:
			now, soon = time.Now(), true
		case <-n.stop:
			return
		}
		if n.mismatch.Load() != nil {
			if err := n.checkModel(ctx); err != nil && !errors.Is(err, ErrModelMismatch) {
				n.warn("read the model of the prefix", err)
			}
		}
		if n.nameTaken.Load() != nil {
			if err := n.checkName(ctx); err != nil && !errors.Is(err, ErrNameTaken) {
				n.warn("keep the node's name", err)
			}
		}
		if n.claimsRefused.Load() != nil || !n.claimsChecked.Load() {
			if err := n.checkClaims(ctx); err != nil && !errors.Is(err, ErrPermission) && ctx.Err() == nil {
				n.warn("ask redis whether this node may claim items", err)
			}
		}
		if (n.mismatch.Load() != nil || n.nameTaken.Load() != nil) && n.refused.Load() == nil {
			// It takes nothing, but keeps what it holds from the claims
			// of the nodes of the other model (or name) until it has
			// answered.
			if err := n.keep(ctx); err != nil {
				n.warn("keep items", err)
			}
			continue
		}
		if n.refusal() != "" {
			continue // see refuse, fit, and checkModel
		}
		if n.ownBroken.Load() {
			if _, err := n.mendStreams(ctx); err != nil && ctx.Err() == nil {
				n.warn("look at the types of the streams of items", err)
			}
		}
		// Beats are a heartbeat apart by the ticker's clock, whatever
		// this loop's round trips took (half a tick of slack for its
		// jitter), and a failed one is tried again at the next tick:
		// front ends take a node silent for three heartbeats for gone.
		if soon || now.Sub(lastBeat) >= n.cfg.beatEvery-every/2 {
			began := time.Now()
			if err := n.beat(ctx); errors.Is(err, ErrModelMismatch) || errors.Is(err, ErrNameTaken) {
				continue // logged by checkModel or checkName
			} else if err != nil && ctx.Err() != nil {
				continue // cut short by a stop, not by Redis: the loop ends
			} else if err != nil {
				n.warnSince("heartbeat", err, began)
				troubled()
			} else {
				n.reachable()
				if !beatOK.IsZero() && time.Since(beatOK) > 2*n.cfg.beatEvery || time.Since(began) > slowTrip {
					troubled()
				}
				beatOK = time.Now()
				lastBeat = now
				if err := n.forgetGone(ctx); err != nil && ctx.Err() == nil {
					n.warn("forget gone nodes' consumers", err)
				}
				if !n.joined.Load() {
					if err := n.join(ctx); err != nil && ctx.Err() == nil {
						n.warn("join the nodes' group", err)
					}
				}
			}
		}
		began := time.Now()
		if err := n.keep(ctx); err != nil && ctx.Err() != nil {
			continue // cut short by a stop
		} else if err != nil {
			n.warnSince("keep items", err, began)
			troubled()
		} else if time.Since(began) > slowTrip {
			troubled() // it waited in a Redis that froze, or the node stalled
		}
		if !n.fit(ctx) {
			continue // claimed items are judged as read ones
		}
		if n.claimsHeldOff() || n.readRefused.Load() != nil {
			continue
		}
		n.takeMu.Lock() // see recoverLost
		began = time.Now()
		err := n.claim(ctx)
		n.takeMu.Unlock()
		if err != nil && ctx.Err() == nil {
			n.warnSince("claim items", err, began)
		}
	}
}

// beat says the node is alive and reads the shared quarantine. A node none
// of whose workers has been able to run for the streamer's
// UnavailableAfter beats as one leaving instead (see drainBeat): front
// ends admit no request for it, as a local server would refuse them,
// route none to it, and do not fail the callers whose items it holds;
// other nodes adopt its own stream. It beats as a live node again once a
// worker runs. A node whose reads Redis refuses is listed as neither (see
// refuseReads), until one goes through; so is a node whose Streamer was
// shut down before it, once it holds nothing (see streamerGone): it will
// never run an item again, and beating as leaving would keep its front
// ends' callers waiting for it, for the items it let go, ClaimIdle long.
func (n *Node) beat(ctx context.Context) error {
	if err := n.checkFit(ctx); err != nil {
		return err
	}
	if err := n.checkModel(ctx); err != nil {
		return err // not alive: it would take no item
	}
	if err := n.checkName(ctx); err != nil {
		return err // the same
	}
	n.clock.ensure(ctx, n.rdb)
	pipe := n.rdb.Pipeline()
	timeCmd, sent := n.clock.timeCmd(ctx, pipe)
	now := n.clock.now()
	workers := n.s.Available()
	alive, out := n.k.nodes, n.k.leaving
	if !workers {
		alive, out = out, alive
	}
	gone := n.streamerGone()
	if n.readRefused.Load() != nil || n.claimsRefused.Load() != nil || gone {
		// Listed as neither: see refuseReads, refuseClaims, and
		// streamerGone.
		pipe.ZRem(ctx, alive, n.cfg.Name)
	} else {
		pipe.ZAdd(ctx, alive, redis.Z{Score: float64(now.UnixMilli()), Member: n.cfg.Name})
	}
	pipe.ZRem(ctx, out, n.cfg.Name)
	pipe.ZRemRangeByScore(ctx, n.k.nodes, "-inf", unixMs(now.Add(-time.Hour)))
	pipe.ZRemRangeByScore(ctx, n.k.leaving, "-inf", unixMs(now.Add(-time.Hour)))
	prune := pipe.ZRemRangeByScore(ctx, n.k.poison, "-inf", unixMs(now))
	var listed *redis.IntCmd
	if n.joined.Load() && !n.ownBroken.Load() {
		// Listed again should the list have gone (deleted by hand, as a
		// key of another type): front ends route only to listed streams.
		// Before the times to live are set, so that a list made again
		// gets one too.
		listed = pipe.SAdd(ctx, n.k.streams, n.own)
	}
	// The keys only running nodes prune go by themselves once no node
	// runs: the lists of nodes and streams an hour after the last beat,
	// the quarantine once its last entry could have expired.
	for _, key := range []string{n.k.nodes, n.k.leaving, n.k.streams, n.own} {
		pipe.Expire(ctx, key, nodeKeysTTL)
	}
	pipe.Expire(ctx, n.k.poison, n.cfg.PoisonTTL+heartbeat)
	poison := pipe.ZRangeWithScores(ctx, n.k.poison, 0, -1)
	versions := n.versionsBeat(ctx, pipe, now, workers && !gone && n.readRefused.Load() == nil && n.claimsRefused.Load() == nil)
	cmds, err := pipe.Exec(ctx)
	if listed != nil && errors.As(listed.Err(), new(redis.Error)) {
		// Of another type, or refused: the node is alive all the same.
		n.warn("list the node's own stream", listed.Err())
		cmds = slices.DeleteFunc(cmds, func(c redis.Cmder) bool { return c == redis.Cmder(listed) })
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			err = nil
		}
	}
	if qerr := cmp.Or(prune.Err(), poison.Err()); qerr != nil && errors.As(qerr, new(redis.Error)) {
		// The quarantine refused (its key of another type, or a
		// permission): the node is alive all the same, and its copy of
		// the quarantine stays as it was.
		n.warn("read the quarantine", qerr)
		cmds = slices.DeleteFunc(cmds, func(c redis.Cmder) bool { return c == redis.Cmder(prune) || c == redis.Cmder(poison) })
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			err = nil
		}
	}
	if verr := versionsErr(versions); verr != nil {
		// Refused (a permission, or its key of another type): the node
		// is alive all the same, and counts no versions meanwhile.
		if !n.versionsLogged.Swap(true) {
			n.cfg.Logger.Warn("redis refuses this node's read or write of the model's versions: the versions the nodes run are not counted (let the user read and write "+n.k.versions+")", "node", n.cfg.Name, "err", verr)
		}
		cmds = slices.DeleteFunc(cmds, func(c redis.Cmder) bool { return slices.Contains(versions, c) })
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			err = nil
		}
		versions = nil
	}
	if err = n.clock.pipelineError(cmds, timeCmd, err); err != nil {
		return fmt.Errorf("redis at %s: %w", n.where, err)
	}
	n.clock.observe(timeCmd, sent)
	n.noteVersions(versions, now)
	if !n.unlisted.Swap(gone) && gone {
		n.cfg.Logger.Error("this node's Streamer is shut down: the node takes no items, and front ends count it as no node (shut the node down before its Streamer)", "node", n.cfg.Name)
	}
	// A Streamer shut down is logged as such, above, rather than as
	// workers that cannot run.
	if n.unable.Swap(!workers) != !workers && n.s.Started() {
		if workers {
			n.cfg.Logger.Info("a worker runs again: the node takes items", "node", n.cfg.Name)
		} else {
			n.cfg.Logger.Warn("no worker of this node can run: front ends admit no requests for it until one can", "node", n.cfg.Name)
		}
	}
	hashes := make(map[string]time.Time, len(poison.Val()))
	for _, z := range poison.Val() {
		if h, ok := z.Member.(string); ok {
			hashes[h] = time.UnixMilli(int64(z.Score))
		}
	}
	n.rememberPoison(hashes)
	return nil
}

// slowTrip is how long an upkeep's round trips may take before the node
// takes Redis for one that froze, or itself for stalled (see upkeepLoop):
// they take a millisecond or two.
const slowTrip = 500 * time.Millisecond

// nodeKeysTTL is how long the lists of nodes (alive, leaving, their own
// streams) and a node's own stream stay after the last heartbeat of any
// node under the prefix.
const nodeKeysTTL = time.Hour

// checkFit asks Redis whether it can serve (see probe), the first time it
// answers. A Redis found unfit after the start stops the node for good,
// logged once: it reads, beats and claims no more.
func (n *Node) checkFit(ctx context.Context) error {
	err := n.probe.check(ctx, n.rdb, n.where)
	if err != nil && !n.probe.logged.Swap(true) {
		n.cfg.Logger.Error("redis cannot serve; this node takes no items", "redis", n.where, "err", err)
		n.signalRoom() // a Shutdown waiting for the items need wait no more
	}
	return err
}

// fit says whether the node may take items: Redis can serve, and the node
// knows Redis's clock. It asks Redis for what it does not know yet.
func (n *Node) fit(ctx context.Context) bool {
	if n.checkFit(ctx) != nil || !n.probe.done.Load() {
		return false
	}
	n.clock.ensure(ctx, n.rdb)
	return n.clock.known()
}

// refusal says why the node takes no items: the nodes under its prefix
// serve another model (see checkModel), another live node has its name
// (see checkName), or it cannot answer them (see answersRefused). Empty
// when none of these.
func (n *Node) refusal() string {
	if why := n.mismatch.Load(); why != nil {
		return *why
	}
	if why := n.nameTaken.Load(); why != nil {
		return *why
	}
	return n.answersRefused()
}

// answersRefused says why the node cannot answer the items it holds: it
// may not write its answers, or the Redis cannot serve. Empty when
// neither.
func (n *Node) answersRefused() string {
	if why := n.refused.Load(); why != nil {
		return *why
	}
	if err := n.probe.unfit(); err != nil {
		return err.Error()
	}
	return ""
}

// keep resets the idle time of the items the node has held for a while,
// so that no other node claims them while this one is alive.
func (n *Node) keep(ctx context.Context) error {
	// At the pace of the default too, whatever the node's own: a node of
	// the default claims what is idle past it.
	cutoff := time.Now().Add(-min(n.cfg.ClaimIdle, DefaultClaimIdle) / 4)
	ids := map[string][]string{} // by stream
	n.mu.Lock()
	for e, since := range n.held {
		if since.Before(cutoff) {
			ids[e.stream] = append(ids[e.stream], e.id)
		}
	}
	n.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	// Stamped as the claims are sent: Redis makes the items new as it
	// runs them, after this.
	sent := time.Now()
	pipe := n.rdb.Pipeline()
	for stream, ids := range ids {
		pipe.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: nodeGroup, Consumer: n.cfg.Name, Messages: ids})
	}
	cmds, _ := pipe.Exec(ctx)
	for _, cmd := range cmds {
		// NOGROUP: the stream is gone (a dead node's own, adopted and
		// deleted once empty, its items withdrawn while this node ran
		// them): there is nothing left to keep from claims.
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOGROUP") {
			if permissionRefused(err) {
				n.refuseClaims("XCLAIM", err)
			}
			// Their stamps stay: the next keep tries them again at once.
			return err
		}
	}
	n.mu.Lock()
	for stream, ids := range ids {
		for _, id := range ids {
			if _, held := n.held[entry{stream, id}]; held {
				n.held[entry{stream, id}] = sent
			}
		}
	}
	n.mu.Unlock()
	return nil
}

// checkClaims asks Redis whether the node's user may claim items, with
// claims that take nothing (an idle time no item has). A node that may
// not XCLAIM cannot keep the items it runs from other nodes' claims, which
// run them again, and one that may not XAUTOCLAIM leaves a dead node's
// items unanswered: it takes no items until it may (see refuseClaims).
func (n *Node) checkClaims(ctx context.Context) error {
	const never = 100 * 365 * 24 * time.Hour
	pipe := n.rdb.Pipeline()
	claim := pipe.XClaimJustID(ctx, &redis.XClaimArgs{Stream: n.k.items, Group: nodeGroup, Consumer: n.cfg.Name, MinIdle: never, Messages: []string{"0-1"}})
	auto := pipe.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{Stream: n.k.items, Group: nodeGroup, Consumer: n.cfg.Name, MinIdle: never, Start: "0-0", Count: 1})
	_, _ = pipe.Exec(ctx)
	for _, c := range []struct {
		command string
		err     error
	}{{"XCLAIM", claim.Err()}, {"XAUTOCLAIM", auto.Err()}} {
		switch {
		case c.err == nil, errors.Is(c.err, redis.Nil), redis.HasErrorPrefix(c.err, "NOGROUP"):
		case permissionRefused(c.err):
			return n.refuseClaims(c.command, c.err)
		default:
			return c.err
		}
	}
	n.claimsChecked.Store(true)
	if n.claimsRefused.Swap(nil) != nil {
		n.cfg.Logger.Info("redis lets this node claim items again; it takes items", "redis", n.where)
		n.beatNow()
	}
	return nil
}

// refuseClaims notes that Redis refuses the node's user command (XCLAIM
// or XAUTOCLAIM) for err, and logs it once: the node takes no items until
// a check finds it may (see checkClaims). It returns the refusal, as
// ErrPermission.
func (n *Node) refuseClaims(command string, err error) error {
	why := fmt.Sprintf("redis refuses this node's user %s (%v): a node that may not claim items runs them twice (XCLAIM keeps those it runs from other nodes' claims) or leaves a dead node's unanswered (XAUTOCLAIM); grant it, as the README's user has it", command, err)
	if n.claimsRefused.Swap(&why) == nil {
		n.cfg.Logger.Error("this node takes no items: "+why, "redis", n.where, "node", n.cfg.Name)
		// Off the lists of nodes at once: front ends refuse the requests
		// no node would take, rather than leave them waiting.
		n.beatNow()
	}
	return permissionf("%s", why)
}

// claim takes over, as room allows, the items that other nodes have held
// without a sign of life for ClaimIdle: on the shared stream, on this
// node's own stream, and on the own streams of other nodes that sweeps
// names (a node that took items from another's stream, see steal, holds
// them there; a live node keeps its own from claims, see keep), then
// adopts the streams of nodes that are gone.
//
// Nothing is claimed while claims are held off, and a claim stops where
// Redis ran one of its commands late enough that it may have frozen under
// it (see frozeFor).
func (n *Node) claim(ctx context.Context) error {
	if !n.s.Ready() || n.claimsHeldOff() || !n.holdsName() {
		return nil
	}
	began := time.Now()
	now := n.clock.now()
	pipe := n.rdb.Pipeline()
	listed := pipe.SMembers(ctx, n.k.streams)
	heard := pipe.ZRangeByScoreWithScores(ctx, n.k.nodes, &redis.ZRangeBy{Min: unixMs(now.Add(-goneAfter)), Max: "+inf"})
	_, err := pipe.Exec(ctx)
	if froze := n.frozeFor(time.Since(began)); err != nil || froze {
		return err // after a freeze every node looks silent
	}
	streams := listed.Val()
	live, fresh := make([]string, 0, len(heard.Val())), make([]string, 0, len(heard.Val()))
	for _, beat := range heard.Val() {
		name, _ := beat.Member.(string)
		live = append(live, name)
		if now.Sub(time.UnixMilli(int64(beat.Score))) < n.freshFor() {
			fresh = append(fresh, name)
		}
	}
	for _, key := range n.sweeps(streams, fresh) {
		err := n.claimFrom(ctx, key)
		if key != n.k.items && redis.HasErrorPrefix(err, "WRONGTYPE") {
			// A node's own of another type: its node replaces it (see
			// mendStreams), or, gone, adopt deletes it. The others are
			// claimed meanwhile.
			n.warn("claim items of "+key, err)
			continue
		}
		if err != nil || n.claimsHeldOff() {
			return err
		}
	}
	return n.adopt(ctx, streams, live)
}

// sweepers is how many nodes, besides its own, look at a live node's own
// stream for items to claim.
const sweepers = 2

// sweeps is the streams, of those listed, that this node looks at for
// items to claim: the shared one, its own; those of nodes not heard from
// within goneAfter (not among the live), and of live nodes that have
// missed a beat (not among the fresh, heard from within freshFor), which
// every node looks at; and, of each other fresh node's own,
// those for which this node is one of the sweepers. A live node's own
// stream holds items of other nodes only as they took them from it (see
// steal): its node claims those that such a node died holding, and the
// sweepers when its node has no room or has died. A node whose sweepers
// died with it (nodes of one machine) has missed a beat before they are
// replaced, so that its items wait for a claim no longer than --claim-idle
// or freshFor, whichever is more. Were every node to look at
// every stream, an idle fleet of N nodes would run N × (N+1) claims a
// tick, each with a TIME (see autoClaim): 270 a second at 16 nodes, and
// about as many forgets (see forgetGone); this way, about 4N.
func (n *Node) sweeps(streams, fresh []string) []string {
	own := []string{n.k.items}
	for _, key := range streams {
		name, ok := strings.CutPrefix(key, n.k.items+":")
		switch {
		case key == n.own:
			own = append(own, key)
		case !ok || !slices.Contains(fresh, name) || sweepsFor(key, name, n.cfg.Name, fresh):
			own = append(own, key)
		}
	}
	return own
}

// freshFor is how long a node is fresh after its last beat: the most
// beats are apart (a beat interval and half an upkeep tick, see
// upkeepLoop), and half an interval more for the beat's trip and a late
// tick. 1.5 s to 2 s with the default heartbeat, whatever --claim-idle.
func (n *Node) freshFor() time.Duration {
	return n.cfg.beatEvery*3/2 + n.upkeepEvery()/2
}

// sweepsFor says whether node is among the sweepers of stream, the own
// stream of the fresh node owner: of the fresh nodes but owner, those
// whose hash with the stream is the highest (rendezvous hashing, so that
// each node finds the same ones without a word, and a node's coming or
// going moves only the streams it sweeps).
func sweepsFor(stream, owner, node string, fresh []string) bool {
	if node == owner || !slices.Contains(fresh, node) {
		return false
	}
	mine := sweepRank(stream, node)
	above := 0
	for _, other := range fresh {
		if other == owner || other == node {
			continue
		}
		if r := sweepRank(stream, other); r > mine || r == mine && other > node {
			if above++; above >= sweepers {
				return false
			}
		}
	}
	return true
}

// sweepRank is node's rank for stream: FNV-1a of both, mixed.
func sweepRank(stream, node string) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range []string{stream, "\x00", node} {
		for i := range len(s) {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	// FNV's last bytes move its high bits little: mixed, the ranks of
	// names that differ at their end spread.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// frozeFor says whether a command of a claim, which Redis ran late after
// the node sent it (or whose round trip took late), may have had Redis
// freeze under it, or the node stall, and if so holds claims off as the
// upkeep does when its own round trips are slow (see upkeepLoop). Redis's
// clock goes on through a freeze while no node can keep its items: once
// it serves again, every item held by a live node looks idle for as long
// as the freeze lasted, and a claim that went out as the freeze began
// would run at its end and take them (a test saw an item run twice so).
// The upkeep sends a command at each of its ticks, a quarter of ClaimIdle
// apart at most, and a live node's items are made new about as often (see
// keep): a claim run later than that, or than slowTrip, after it was sent
// is not trusted.
func (n *Node) frozeFor(late time.Duration) bool {
	trust := min(slowTrip, n.cfg.ClaimIdle/4)
	if late <= trust {
		return false
	}
	n.holdOffClaims()
	// Once a quiet time at most: no claim runs while they are held off.
	n.cfg.Logger.Info("redis ran a claim late (it froze, or this node stalled): the claim takes nothing, and claims wait while live nodes keep their items",
		"late", late.Round(time.Millisecond), "trusted", trust, "wait", nodeSilence, "node", n.cfg.Name)
	return true
}

// autoClaim runs XAUTOCLAIM on stream, for up to count items from start,
// and says how late Redis ran it after the node sent it: on Redis's clock,
// by a TIME sent just before it in the same write (Redis runs the two back
// to back; a freeze under way as they come holds both), so that a reply of
// large items, long to come, does not count. Where Redis's clock is not
// known, or TIME got no answer, it is the round trip.
func (n *Node) autoClaim(ctx context.Context, stream, start string, count int) (msgs []redis.XMessage, next string, late time.Duration, err error) {
	began := time.Now()
	pipe := n.rdb.Pipeline()
	var timeCmd *redis.TimeCmd
	if n.clock.measured.Load() {
		timeCmd, _ = n.clock.timeCmd(ctx, pipe)
	}
	claimCmd := pipe.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: nodeGroup, Consumer: n.cfg.Name,
		MinIdle: n.cfg.ClaimIdle, Start: start, Count: int64(count),
	})
	sent := n.clock.now()
	cmds, err := pipe.Exec(ctx)
	_ = n.clock.pipelineError(cmds, timeCmd, err) // notes a TIME refused
	msgs, next, err = claimCmd.Result()
	late = time.Since(began)
	if timeCmd != nil {
		if ran, terr := timeCmd.Result(); terr == nil {
			late = ran.Sub(sent)
		}
	}
	return msgs, next, late, err
}

// holdOffClaims holds off claims and adoptions for nodeSilence: see
// upkeepLoop.
func (n *Node) holdOffClaims() {
	n.quietUntil.Store(n.sinceBorn() + int64(nodeSilence))
	n.claimDue.Store(0)
}

// claimsHeldOff says whether claims and adoptions are held off now.
func (n *Node) claimsHeldOff() bool { return n.sinceBorn() < n.quietUntil.Load() }

// sinceBorn is the time since the node was made, in nanoseconds, on the
// monotonic clock: the node's timers count in it, so that a step of the
// wall clock neither stretches nor shortens them.
func (n *Node) sinceBorn() int64 { return int64(time.Since(n.born)) }

// claimFrom takes over, as room allows, the items of stream that other
// nodes have held without a sign of life for ClaimIdle. XAUTOCLAIM looks
// at no more than ten entries of the pending list per item asked for, so
// it pages through the list, at most claimPages pages a call, and the next
// call goes on where this one stopped: a node with little room would
// otherwise look at the same few live items at the head of the list at
// every tick and never reach a dead node's items behind them.
func (n *Node) claimFrom(ctx context.Context, stream string) error {
	start := cmp.Or(n.claimAt[stream], "0-0")
	defer func() {
		if start == "0-0" {
			delete(n.claimAt, stream)
		} else {
			n.claimAt[stream] = start
		}
	}()
	for range claimPages {
		// As much as a read would take: what idle workers can start, or,
		// with none idle, what busy ones can form ahead, since these items
		// wait upstream (see wanted). Beyond that another node, idler, is
		// left to claim them at its next tick.
		want, _ := n.wanted()
		if want <= 0 {
			return n.leaveClaim(ctx, stream)
		}
		msgs, next, late, err := n.autoClaim(ctx, stream, start, want)
		if n.frozeFor(late) {
			// What Redis claimed as the freeze ended stays pending to
			// the node, untaken and new, even where the node gave up
			// on the answer: a live node takes its items back as it
			// keeps them (see keep), and a claim takes the others once
			// they are idle past ClaimIdle again. Nor does the read
			// loop look for them as a failed read's (see recoverLost).
			n.sized(want, len(msgs), err)
			return nil
		}
		n.fetched(want, len(msgs), err, stream)
		switch {
		case err != nil && redis.HasErrorPrefix(err, "NOGROUP"):
			start = "0-0"
			if stream != n.k.items {
				return nil // an adopted stream deleted meanwhile
			}
			return n.join(ctx)
		case err != nil:
			return err
		}
		if msgs = n.notHeld(stream, msgs); len(msgs) > 0 {
			what := "claimed items their node kept no more, past --claim-idle (it died, stalled, or left them as it shut down)"
			if stream == n.own {
				// Those another node took from it and left, or its own
				// that it could not keep alive (cut off from Redis, or
				// stalled past --claim-idle).
				what = "claimed items of its own stream that no node kept alive"
			}
			n.cfg.Logger.Info(what, "items", len(msgs), "stream", stream, "node", n.cfg.Name)
			n.stats.claimed.Add(uint64(len(msgs)))
			n.stats.read.Add(uint64(len(msgs)))
			n.take(stream, msgs)
		}
		start = next
		if next == "0-0" {
			return nil // the whole list is looked at
		}
	}
	return nil
}

// leaveClaim is what a claim without room does: when stream holds items
// of a node silent for ClaimIdle, it leaves them to the read loop's next
// room, which it takes for them before it reads new items. A node whose
// workers are all busy has room only as a batch ends, and the read loop
// fills it at once: on the upkeep's ticks alone, a silent node's items
// waited, behind newer ones, for as long as every node stayed busy (a node
// killed under load left items unanswered for 20 s and more). Another
// node, idle, may claim them first.
//
// A node is silent to Redis when its consumer has neither read nor
// claimed for that long: a live node reads at every batch, and keeps its
// items by claiming them. The look costs Redis a line per consumer, not
// one per item pending.
func (n *Node) leaveClaim(ctx context.Context, stream string) error {
	began := time.Now()
	consumers, err := n.rdb.XInfoConsumers(ctx, stream, nodeGroup).Result()
	switch {
	case n.frozeFor(time.Since(began)):
		return nil // their idle times grew through the freeze
	case err != nil && redis.HasErrorPrefix(err, "NOGROUP"):
		return nil // the read loop rejoins, or an adopted stream went
	case err != nil:
		return err
	}
	for _, c := range consumers {
		if c.Name != n.cfg.Name && c.Pending > 0 && c.Idle >= n.cfg.ClaimIdle {
			n.claimSoon()
			break
		}
	}
	return nil
}

// claimSoon has the read loop claim at its next room, if that comes
// within two of the upkeep's ticks: the upkeep finds the items again
// meanwhile, unless Redis failed it (then it waits, see upkeepLoop).
func (n *Node) claimSoon() {
	n.claimDue.Store(n.sinceBorn() + int64(2*n.upkeepEvery()))
}

// claimIsDue takes the read loop's turn to claim, if there is one and
// claims are not held off (see upkeepLoop's quiet time; a claim under way
// as Redis was found in trouble may have left the turn after that).
func (n *Node) claimIsDue() bool {
	due := n.claimDue.Load()
	if due == 0 || !n.claimDue.CompareAndSwap(due, 0) {
		return false
	}
	now := n.sinceBorn()
	return now < due && now >= n.quietUntil.Load() && n.readRefused.Load() == nil
}

// upkeepEvery is how often the upkeep loop looks.
func (n *Node) upkeepEvery() time.Duration { return min(n.cfg.ClaimIdle/4, n.cfg.beatEvery) }

// notHeld drops from msgs, claimed from stream, the items the node holds
// already: its own, idle past ClaimIdle in Redis when the node kept them
// too late (it stalled, or its keep failed), which XAUTOCLAIM hands back
// like any other's. They run once, where they are running.
func (n *Node) notHeld(stream string, msgs []redis.XMessage) []redis.XMessage {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.DeleteFunc(msgs, func(m redis.XMessage) bool {
		_, held := n.held[entry{stream, m.ID}]
		return held
	})
}

// claimPages bounds the pages of the pending list one claim looks at.
const claimPages = 16

// Shutdown leaves the list of live nodes (so that front ends stop routing
// requests to its own stream, and another node adopts what is there),
// stops reading, and waits until ctx ends for the items held to be
// answered and acknowledged, unless Redis refuses the node's answers (its
// user lacks a permission: see NodeStats.Refused). Meanwhile it beats as a
// node leaving, in PREFIX:leaving. Items still held at the end stay in the
// group for another node to claim. While Redis hangs, it returns up to
// about 4 s after ctx ends: it waits for its commands under way, and tries
// to leave the lists of nodes, each bounded by its own timeout.
func (n *Node) Shutdown(ctx context.Context) error {
	first := false
	n.stopOnce.Do(func() { first = true; close(n.stop) })
	if !first {
		// Another call leaves; this one waits for it, as long as ctx lets.
		select {
		case <-n.left:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(n.left)
	n.loops.Wait()
	answered := n.stats.answered.Load()
	// A node that another live node's name kept out (see checkName)
	// leaves that one's listings and consumer as they are.
	owns := n.ownsName()
	if owns {
		lctx, cancel := context.WithTimeout(context.Background(), time.Second)
		// Best effort: a node silent for goneAfter is gone too, and its
		// version no longer counted.
		pipe := n.rdb.Pipeline()
		pipe.ZRem(lctx, n.k.nodes, n.cfg.Name)
		pipe.HDel(lctx, n.k.versions, n.cfg.Name)
		_, _ = pipe.Exec(lctx)
		cancel()
	}
	drained := make(chan struct{})
	var draining sync.WaitGroup
	if ctx.Err() == nil {
		draining.Go(func() { n.drainBeat(drained, owns) })
	}
	var err error
	for {
		n.mu.Lock()
		held := len(n.held)
		n.mu.Unlock()
		if held == 0 {
			break
		}
		if why := n.answersRefused(); why != "" {
			// It cannot answer them: other nodes will.
			err = fmt.Errorf("broker: node %s left %d items to be claimed, as redis refuses its answers: %s", n.cfg.Name, held, why)
			break
		}
		select {
		case <-n.room:
			continue
		case <-ctx.Done():
			err = fmt.Errorf("broker: node %s left %d items to be claimed: %w", n.cfg.Name, held, ctx.Err())
		}
		break
	}
	close(drained)
	draining.Wait()
	close(n.stopped)
	n.writer.Wait()
	n.mu.Lock()
	left := len(n.held)
	n.mu.Unlock()
	n.cfg.Logger.Info("node left", "node", n.cfg.Name, "answered_while_leaving", n.stats.answered.Load()-answered, "left_to_other_nodes", left)
	if owns && n.ownsName() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.rdb.ZRem(dctx, n.k.nodes, n.cfg.Name)
		n.rdb.ZRem(dctx, n.k.leaving, n.cfg.Name)
		n.releaseName(dctx)
		// Best effort, as the node leaves: a consumer that still has
		// items pending (left for a claim, or released to another node)
		// stays.
		forgetScript.Run(dctx, n.rdb, []string{n.k.items}, nodeGroup, 0, n.cfg.Name)
	}
	return errors.Join(err, n.rdb.Close())
}

// forgetScript deletes the consumers of the group on a stream that have no
// items pending and have been idle for at least a time, or only the one
// named. Redis drops a consumer's pending items with it, so the check and
// the deletion go in one step: an item read or claimed meanwhile keeps its
// consumer. A live node whose consumer goes reads again under the same
// name; Redis makes it anew.
//
//	KEYS[1] the stream
//	ARGV    the group, the least idle time (ms), and the only consumer to
//	        look at, if any
var forgetScript = redis.NewScript(`
local n = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local name, pending, idle
  for i = 1, #c, 2 do
    if c[i] == 'name' then name = c[i + 1]
    elseif c[i] == 'pending' then pending = c[i + 1]
    elseif c[i] == 'idle' then idle = c[i + 1] end
  end
  if pending == 0 and idle >= tonumber(ARGV[2]) and (ARGV[3] == nil or ARGV[3] == name) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    n = n + 1
  end
end
return n
`)

// forgetGone deletes the consumers, on the shared stream and on the
// node's own stream, that hold nothing and have been idle for goneAfter:
// those of nodes killed, or stopped while items were pending to them, once
// another node has claimed those. Without it the groups keep a consumer for
// every node that ever ran. A live node that has read nothing for as long
// loses its consumer too, and Redis makes it anew when a read brings it
// items. Each live node forgets on its own stream; the stream of a node
// gone goes whole once adopted (see adopt).
func (n *Node) forgetGone(ctx context.Context) error {
	for _, key := range []string{n.k.items, n.own} {
		err := forgetScript.Run(ctx, n.rdb, []string{key}, nodeGroup, goneAfter.Milliseconds()).Err()
		// A stream deleted, or its group, meanwhile, or a key of another
		// type in its place (see mendStreams): nothing to forget.
		if err != nil && !redis.HasErrorPrefix(err, "NOGROUP") && !redis.HasErrorPrefix(err, "no such key") && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return err
		}
	}
	return nil
}

// drainBeat keeps a leaving node alive in Redis until done: it beats in
// the list of nodes leaving, which front ends count so as not to fail its
// callers for want of a node while it finishes their items (but not to
// admit new requests, or route any to it), and which other nodes do not
// read, so that they adopt its own stream at once; and it keeps its items
// from claims. A node that does not own its name (another live node kept
// it: see checkName) leaves that one's listing, name and the model as
// they are, and only keeps its items.
func (n *Node) drainBeat(done <-chan struct{}, owns bool) {
	tick := time.NewTicker(min(n.cfg.ClaimIdle/4, heartbeat))
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		// Its name kept, it beats as leaving, and the prefix keeps the
		// model while its last node drains. A node that another live
		// node's name kept out leaves that one's listing, name and model
		// as they are.
		if owns {
			n.leavingBeat(ctx)
		}
		if err := n.keep(ctx); err != nil {
			n.warn("keep items while leaving", err)
		}
		cancel()
		select {
		case <-tick.C:
		case <-done:
			return
		}
	}
}

// leavingBeat keeps the name of a node that leaves, beats as leaving, and
// keeps the model of the prefix.
func (n *Node) leavingBeat(ctx context.Context) {
	if err := n.checkName(ctx); err != nil {
		if !errors.Is(err, ErrNameTaken) {
			n.warn("keep the node's name while leaving", err)
		}
		return
	}
	pipe := n.rdb.Pipeline()
	pipe.ZAdd(ctx, n.k.leaving, redis.Z{Score: float64(n.clock.now().UnixMilli()), Member: n.cfg.Name})
	pipe.Expire(ctx, n.k.leaving, nodeKeysTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		n.warn("heartbeat while leaving", err)
	}
	if err := n.checkModel(ctx); err != nil && !errors.Is(err, ErrModelMismatch) {
		n.warn("keep the model while leaving", err)
	}
}

// steal takes, up to want, the items that wait unread on other nodes' own
// streams. It is called when this node's workers have had nothing to do
// for blockFor: requests routed to a node that is busy (or slow) do not
// wait there while this one idles.
func (n *Node) steal(ctx context.Context, want int) error {
	if !n.holdsName() {
		return nil // see holdsName
	}
	streams, err := n.rdb.SMembers(ctx, n.k.streams).Result()
	if err != nil {
		return err
	}
	var others []string
	for _, key := range streams {
		if key != n.own {
			others = append(others, key)
		}
	}
	if len(others) == 0 {
		return nil
	}
	if len(others) > want {
		// An item from each of want streams, picked at random: no more
		// than want in all.
		rand.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		others = others[:want]
	}
	ids := make([]string, len(others))
	for i := range ids {
		ids[i] = ">"
	}
	read, err := n.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: nodeGroup, Consumer: n.cfg.Name, Streams: append(others, ids...), Count: int64(max(want/len(others), 1)), Block: -1,
	}).Result()
	n.fetched(want, itemsIn(read), err, others...)
	switch {
	case errors.Is(err, redis.Nil), err != nil && redis.HasErrorPrefix(err, "NOGROUP"):
		return nil // nothing waits, or a stream went meanwhile: the next look sees
	case err != nil:
		read = readWhole(read) // and the rest looked for (see recoverLost)
	}
	for _, st := range read {
		if len(st.Messages) > 0 {
			n.cfg.Logger.Debug("took items waiting for another node", "items", len(st.Messages), "stream", st.Stream)
			n.stats.read.Add(uint64(len(st.Messages)))
			n.take(st.Stream, st.Messages)
		}
	}
	return err
}

// goneAfter is how long a node is silent before its own stream is adopted:
// front ends route to a node heard from within nodeSilence, so nothing
// more comes to its stream after that.
const goneAfter = nodeSilence

// adopt serves the streams, of those listed, of nodes that are gone (not
// among the live, those heard from within goneAfter: silent, or left),
// once claim has taken what they held: it reads what they had not read
// yet, and deletes a stream left empty once its node has been gone twice
// as long.
func (n *Node) adopt(ctx context.Context, streams, live []string) error {
	if len(streams) <= 1 {
		return nil
	}
	var others, names []string
	for _, key := range streams {
		if key != n.own {
			others = append(others, key)
			names = append(names, strings.TrimPrefix(key, n.k.items+":"))
		}
	}
	now := n.clock.now()
	for i, key := range others {
		if slices.Contains(live, names[i]) {
			continue
		}
		if err := n.readFrom(ctx, key); err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return err
		}
		cutoff := unixMs(now.Add(-2 * goneAfter))
		dropped, err := dropScript.Run(ctx, n.rdb, []string{key, n.k.nodes, n.k.streams}, names[i], cutoff).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if found, ok := dropped.(string); ok {
			n.cfg.Logger.Error("the own stream of a node gone held another type than a stream: deleted it, and what it held", "stream", key, "type", found, "node", n.cfg.Name)
		}
	}
	return nil
}

// readFrom reads, as room allows, the items of stream that its node left
// unread.
func (n *Node) readFrom(ctx context.Context, stream string) error {
	want, _ := n.wanted() // as claimFrom takes
	if want <= 0 {
		// Left to the read loop's next room, as claims are (see
		// leaveClaim), when some of its items are unread.
		unread, err := n.unread(ctx, stream)
		if unread {
			n.claimSoon()
		}
		return err
	}
	streams, err := n.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: nodeGroup, Consumer: n.cfg.Name, Streams: []string{stream, ">"}, Count: int64(want), Block: -1,
	}).Result()
	n.fetched(want, itemsIn(streams), err, stream)
	switch {
	case errors.Is(err, redis.Nil), err != nil && redis.HasErrorPrefix(err, "NOGROUP"):
		return nil
	case err != nil:
		streams = readWhole(streams) // and the rest looked for (see recoverLost)
	}
	for _, st := range streams {
		if len(st.Messages) > 0 {
			n.cfg.Logger.Info("adopted items routed to a node that is gone", "items", len(st.Messages), "stream", stream)
			n.stats.claimed.Add(uint64(len(st.Messages)))
			n.stats.read.Add(uint64(len(st.Messages)))
			n.take(stream, st.Messages)
		}
	}
	return err
}

// unread says whether stream has entries the group has not delivered: its
// last is past the group's last delivered. (The entries pending to nodes
// count in XLEN, and the group's lag is an estimate.)
func (n *Node) unread(ctx context.Context, stream string) (bool, error) {
	pipe := n.rdb.Pipeline()
	groups := pipe.XInfoGroups(ctx, stream)
	last := pipe.XRevRangeN(ctx, stream, "+", "-", 1)
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	if err := cmp.Or(groups.Err(), last.Err()); err != nil {
		if redis.HasErrorPrefix(err, "no such key") || redis.HasErrorPrefix(err, "NOGROUP") {
			return false, nil // gone meanwhile
		}
		return false, err
	}
	if len(last.Val()) == 0 {
		return false, nil
	}
	newest, err := parseStreamID(last.Val()[0].ID)
	if err != nil {
		return false, nil
	}
	for _, g := range groups.Val() {
		if g.Name != nodeGroup {
			continue
		}
		delivered, err := parseStreamID(g.LastDeliveredID)
		return err == nil && delivered.before(newest), nil
	}
	return false, nil
}

// dropScript deletes a node's own stream once it is empty and the node has
// not been heard from since the cutoff, and takes it off the list front
// ends route by, in one step: no request is routed to a stream that is
// gone. A key of another type in its place, which holds no item and
// which its node, gone, does not replace (see mendStreams), goes alike:
// the others' reads of the nodes' streams, which read several in one
// command, would fail for it for ever. It answers 1 when it deleted the
// stream, the type found when it deleted a key of another type, and 0
// when it deleted nothing.
//
//	KEYS[1] the node's stream, KEYS[2] the live nodes, KEYS[3] the list
//	ARGV    the node's name, the cutoff (unix ms)
var dropScript = redis.NewScript(`
local found = redis.call('TYPE', KEYS[1])['ok']
if found == 'stream' and redis.call('XLEN', KEYS[1]) > 0 then return 0 end
local beat = redis.call('ZSCORE', KEYS[2], ARGV[1])
if beat and tonumber(beat) >= tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[3], KEYS[1])
if found ~= 'stream' and found ~= 'none' then return found end
return 1
`)
