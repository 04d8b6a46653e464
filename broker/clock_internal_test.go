package broker

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// Only a refusal for good (NOPERM, an unknown command, a proxy's refusal)
// makes the clock give up TIME: a Redis that does not serve now (a
// password not given yet, a script running long, loading) is asked again.
func TestOnlyARefusalForGoodStopsTheClockAsking(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{Password: "pw"})
	rs.Do(t, "ACL", "SETUSER", "notime", "on", ">pw", "~*", "&*", "+@all", "-time")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply := func(opt *redis.Options, args ...any) error {
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		return rdb.Do(ctx, args...).Err()
	}
	noPerm := reply(&redis.Options{Addr: rs.Addr(), Username: "notime", Password: "pw"}, "TIME")
	unknown := reply(&redis.Options{Addr: rs.Addr(), Password: "pw"}, "NOSUCHCOMMAND")
	noAuth := reply(&redis.Options{Addr: rs.Addr()}, "TIME")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"NOPERM", noPerm, true},
		{"unknown command", unknown, true},
		{"NOAUTH", noAuth, false},
		{"BUSY", busyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), false},
		{"LOADING", busyError("LOADING Redis is loading the dataset in memory"), false},
		{"a proxy's refusal", busyError("ERR unsupported command"), true},
		{"no answer", context.DeadlineExceeded, false},
	} {
		if tc.err == nil {
			t.Errorf("%s: Redis answered; the test wants its error", tc.name)
			continue
		}
		if got := refusedCommand(tc.err); got != tc.want {
			t.Errorf("refusedCommand(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}

	// NOAUTH on the first measure leaves the clock asking, and measuring
	// once Redis lets it in.
	c := &clock{log: slog.New(slog.DiscardHandler)}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	c.ensure(ctx, rdb)
	if c.timeRefused.Load() || c.measured.Load() {
		t.Fatalf("after NOAUTH: refused %v, measured %v; want neither", c.timeRefused.Load(), c.measured.Load())
	}
	rs.Do(t, "CONFIG", "SET", "requirepass", "")
	c.ensure(ctx, rdb)
	if !c.measured.Load() {
		t.Error("the clock did not measure once Redis let it in")
	}
}

// busyError is a Redis error reply, as the client library gives them.
type busyError string

func (e busyError) Error() string { return string(e) }
func (busyError) RedisError()     {}

// A first measure is taken whatever its round trip, and later ones when
// within the bound or twice the shortest: a Redis far away is measured.
func TestTheClockMeasuresARedisFarAway(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	c := &clock{log: slog.New(slog.DiscardHandler), skew: time.Hour}
	sample := func(rtt time.Duration) {
		pipe := rdb.Pipeline()
		cmd, sent := c.timeCmd(ctx, pipe)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		c.observe(cmd, sent.Add(-rtt)) // as if sent rtt earlier
	}
	sample(300 * time.Millisecond)
	if !c.measured.Load() {
		t.Fatal("a first measure with a 300ms round trip was not taken")
	}
	// The estimate is off by up to half the round trip, plus the skew's
	// sign: Redis's clock is an hour behind this one.
	if off := time.Duration(c.offset.Load()); (off + time.Hour).Abs() > 200*time.Millisecond {
		t.Errorf("offset %s, want about -1h", off)
	}
	// The first measure was off by about half its 300ms: a quick one is
	// taken in its place.
	sample(0)
	if off := time.Duration(c.offset.Load()); (off + time.Hour).Abs() > 75*time.Millisecond {
		t.Errorf("after a quick measure, offset %s; want -1h within its round trip", off)
	}
	before := c.offset.Load()
	sample(500 * time.Millisecond)
	if c.offset.Load() != before {
		t.Error("a measure whose round trip is past the bound and twice the shortest was taken")
	}
	// With no measure taken for a while (a failover to a master further
	// away), the next is taken whatever its round trip.
	last := *c.redis.Load()
	last.at = last.at.Add(-staleMeasure - time.Second)
	c.redis.Store(&last)
	sample(500 * time.Millisecond)
	if c.offset.Load() == before {
		t.Error("no measure was taken after none for longer than staleMeasure")
	}
}

// A Redis out of memory is known as such whether it refused a command or
// a write inside a script, in Redis 7's words (asked of the real one) and
// in Redis 6.2's, which wraps a script's error in "ERR Error running
// script"; other errors of a script are not taken for it.
func TestAWriteRefusedForMemoryIsKnownInEveryForm(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	rs.Do(t, "CONFIG", "SET", "maxmemory", "1")
	command := rdb.Set(ctx, "k", "v", 0).Err()
	script := rdb.Eval(ctx, "return redis.call('SET', KEYS[1], 'v')", []string{"k"}).Err()
	rs.Do(t, "CONFIG", "SET", "maxmemory", "0")
	notPermitted := rdb.Eval(ctx, "return redis.call('NOSUCHCOMMAND')", nil).Err()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a command", command, true},
		{"a script", script, true},
		{"a script in Redis 6.2", busyError("ERR Error running script (call to f_0a1b): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'."), true},
		{"another error of a script", notPermitted, false},
		{"no answer", context.DeadlineExceeded, false},
	} {
		if tc.err == nil {
			t.Errorf("%s: Redis answered; the test wants its error", tc.name)
			continue
		}
		if got := outOfMemory(tc.err); got != tc.want {
			t.Errorf("outOfMemory(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// steppedWall is a wall clock that a test steps, as NTP or a VM resumed
// steps a machine's: its readings carry no monotonic reading, so that
// the step shows in every difference taken between them.
type steppedWall struct{ by atomic.Int64 }

func (w *steppedWall) now() time.Time {
	return time.Now().Add(time.Duration(w.by.Load())).Round(0)
}

func (w *steppedWall) step(d time.Duration) { w.by.Add(int64(d)) }

// redisNow asks Redis for its time.
func redisNow(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// A step of this machine's wall clock, forward or back, moves neither
// Redis's time as the clock tells it nor a deadline turned into Redis's
// time and back: they run on the monotonic clock from the last measure.
// The next measure reports the clock's new offset.
func TestRedisTimeHoldsThroughAStepOfTheWallClock(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	wall := &steppedWall{}
	c := &clock{log: slog.New(slog.DiscardHandler), wall: wall.now}
	if err := c.measure(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	const slack = 100 * time.Millisecond
	for _, step := range []time.Duration{10 * time.Minute, -20 * time.Minute, 10*time.Minute + 3*time.Second} {
		wall.step(step)
		deadline := time.Now().Add(30 * time.Second)
		shared := c.shared(deadline)
		now := c.now()
		redisAt := redisNow(t, rdb)
		if d := now.Sub(redisAt); d.Abs() > slack {
			t.Errorf("after a step of %s: the clock says Redis's time is %s off it; want within %s", step, d, slack)
		}
		if d := shared.Sub(redisAt.Add(30 * time.Second)); d.Abs() > slack {
			t.Errorf("after a step of %s: a deadline 30s away shared %s off Redis's time + 30s; want within %s", step, d, slack)
		}
		if d := c.fromShared(shared).Sub(deadline); d.Abs() > slack {
			t.Errorf("after a step of %s: a deadline shared and back is %s off; want within %s", step, d, slack)
		}
	}
	if err := c.measure(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if off := time.Duration(c.offset.Load()); (off + 3*time.Second).Abs() > slack {
		t.Errorf("after the clock stepped 3s ahead in all: offset %s; want about -3s", off)
	}
}

// A step of a node's or a front end's wall clock, forward or back, leaves
// the times they share on Redis's: the node's heartbeat is scored at
// Redis's time, so that front ends still count it; a front end still
// counts a node that beats; and the quarantine's entries are not taken
// for expired by a node whose clock jumped past them.
func TestAStepOfAMachinesClockLeavesTheSharedTimesOnRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := supervisor.New(supervisor.Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }), Workers: 1, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Shutdown(context.Background()) }()
	n, err := NewNode(NodeConfig{Config: Config{URL: rs.URL()}, Streamer: st, Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.rdb.Close() })
	fe := unstartedFront(t, rs.URL(), 0)
	nodeWall, frontWall := &steppedWall{}, &steppedWall{}
	n.clock.wall, fe.clock.wall = nodeWall.now, frontWall.now

	beatAndCheck := func(when string) {
		t.Helper()
		if err := n.beat(ctx); err != nil {
			t.Fatalf("%s: beat: %v", when, err)
		}
		score, err := rdb.ZScore(ctx, n.k.nodes, n.cfg.Name).Result()
		if err != nil {
			t.Fatalf("%s: the node's heartbeat: %v", when, err)
		}
		if d := time.UnixMilli(int64(score)).Sub(redisNow(t, rdb)); d.Abs() > time.Second {
			t.Errorf("%s: the heartbeat is scored %s off Redis's time; want within a second", when, d)
		}
		if err := fe.check(ctx); err != nil {
			t.Fatalf("%s: the front end's check: %v", when, err)
		}
		if got := fe.nodes.Load(); got != 1 {
			t.Errorf("%s: the front end counts %d nodes alive; want 1", when, got)
		}
	}
	beatAndCheck("before any step")
	poisoned := poisonHash("", []byte("crash"))
	expiry := redisNow(t, rdb).Add(5 * time.Minute)
	if err := rdb.ZAdd(ctx, n.k.poison, redis.Z{Score: float64(expiry.UnixMilli()), Member: poisoned}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name        string
		node, front time.Duration
	}{
		{"the node's clock 10 minutes ahead", 10 * time.Minute, 0},
		{"the front end's clock 10 minutes ahead", 0, 10 * time.Minute},
		{"both clocks 20 minutes back", -20 * time.Minute, -20 * time.Minute},
	} {
		nodeWall.step(step.node)
		frontWall.step(step.front)
		beatAndCheck(step.name)
		if err := rdb.ZScore(ctx, n.k.poison, poisoned).Err(); err != nil {
			t.Errorf("%s: the quarantine's entry, 5 minutes from expiry: %v; want it kept", step.name, err)
		}
		if _, ok := (*n.poison.Load())[poisoned]; !ok {
			t.Errorf("%s: the node's copy of the quarantine lacks the entry 5 minutes from expiry", step.name)
		}
	}
}
