package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/redistest"
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
	c.lastTaken.Store(time.Now().Add(-staleMeasure - time.Second).UnixNano())
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
