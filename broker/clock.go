package broker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clock keeps the times that one machine writes to Redis for another to
// read (heartbeats, deadlines, the quarantine's expiries) on Redis's clock
// rather than its own, so that front ends and nodes whose clocks differ
// still agree on them: a node whose clock is seconds behind is not taken
// for gone, and one seconds ahead does not drop every item as past its
// deadline. Each front end and node measures Redis's time (TIME, in its
// checks and heartbeats), to within half a round trip, and runs it on
// from there by its monotonic clock: a step of its wall clock (an NTP
// step, a VM resumed) moves none of the times it shares, and each measure
// corrects what the two clocks drifted apart since the last.
type clock struct {
	skew time.Duration // added to this machine's clock: tests' stand-in for a clock off
	// wall is this machine's wall clock; nil means time.Now. Tests step
	// it. It is read for the offset reported and for the times shared
	// where Redis's clock is not known (see local), never to run
	// Redis's on.
	wall func() time.Time
	log  *slog.Logger
	// redis is Redis's time at the last measure taken, and when it was
	// taken on this machine's monotonic clock; nil until one is.
	redis atomic.Pointer[redisTime]
	// offset is Redis's clock less this machine's wall clock, in
	// nanoseconds, as last measured: reported, and warned of when large.
	offset atomic.Int64
	// measured is set once redis holds a measure; bestRTT is the
	// shortest round trip of the measures taken, in nanoseconds.
	measured atomic.Bool
	bestRTT  atomic.Int64
	warned   atomic.Bool // the offset was past clockOffsetWarn, and logged
	// timeRefused is set once Redis has refused TIME (an ACL without it):
	// the times stay on this machine's clock, which must then agree with
	// the other machines'.
	timeRefused atomic.Bool
}

// redisTime is a measure of Redis's clock: its time, at an instant of
// this machine's.
type redisTime struct {
	time time.Time // Redis's, without a monotonic reading
	at   time.Time // this machine's, with its monotonic reading (a time.Now)
}

// maxTimeRoundTrip bounds the round trip of a TIME whose answer is taken
// (the estimate is off by up to half of it), but for the first, for those
// within twice the shortest seen (a Redis far away is measured too), and
// for any once staleMeasure has passed without one (a failover to a
// master further away).
const (
	maxTimeRoundTrip = 100 * time.Millisecond
	staleMeasure     = 10 * time.Second
)

// local is this machine's wall-clock time now.
func (c *clock) local() time.Time {
	if c.wall != nil {
		return c.wall().Add(c.skew)
	}
	return time.Now().Add(c.skew)
}

// now is Redis's time now: the last measure, run on by the monotonic
// clock since; this machine's own where Redis's is not known.
func (c *clock) now() time.Time {
	if m := c.redis.Load(); m != nil {
		return m.time.Add(time.Since(m.at))
	}
	return c.local()
}

// shared turns a time of this machine (a deadline) into Redis's, by the
// time until it on the monotonic clock.
func (c *clock) shared(t time.Time) time.Time { return c.now().Add(time.Until(t)) }

// fromShared turns a time on Redis's clock into one of this machine, on
// its monotonic clock.
func (c *clock) fromShared(t time.Time) time.Time { return time.Now().Add(t.Sub(c.now())) }

// timeCmd queues TIME on pipe, for observe after the pipeline ran: sent
// at sent, on this machine's monotonic clock. It queues nothing, and
// returns nil, once Redis has refused TIME.
func (c *clock) timeCmd(ctx context.Context, pipe redis.Pipeliner) (cmd *redis.TimeCmd, sent time.Time) {
	if c.timeRefused.Load() {
		return nil, time.Time{}
	}
	return pipe.Time(ctx), time.Now()
}

// observe takes Redis's time from cmd, a TIME sent at sent (a time.Now)
// whose pipeline has just answered. Redis is taken to have read its clock
// halfway through the round trip.
func (c *clock) observe(cmd *redis.TimeCmd, sent time.Time) {
	if cmd == nil {
		return
	}
	back, wall := time.Now(), c.local()
	redisNow, err := cmd.Result()
	if err != nil {
		return
	}
	rtt := back.Sub(sent)
	best := time.Duration(c.bestRTT.Load())
	last := c.redis.Load()
	switch {
	case last == nil || time.Since(last.at) > staleMeasure:
		best = rtt
	case rtt <= max(maxTimeRoundTrip, 2*best):
		best = min(best, rtt)
	default:
		return
	}
	c.bestRTT.Store(int64(best))
	at := sent.Add(rtt / 2)
	c.redis.Store(&redisTime{time: redisNow.Round(0), at: at})
	c.measured.Store(true)
	// Redis's time now less the wall clock's now.
	offset := redisNow.Add(back.Sub(at)).Sub(wall)
	c.offset.Store(int64(offset))
	switch off := offset.Abs(); {
	case off > clockOffsetWarn && !c.warned.Swap(true):
		c.log.Warn("this machine's clock is off redis's; streamer shares times on redis's clock, but the clock should be put in sync", "redis_ahead_by", offset.Round(time.Millisecond))
	case off < clockOffsetWarn/2 && c.warned.Swap(false):
		c.log.Info("this machine's clock is back in sync with redis's", "redis_ahead_by", offset.Round(time.Millisecond))
	}
}

// clockOffsetWarn is the offset from Redis's clock past which a machine's
// clock is said to be off.
const clockOffsetWarn = time.Second

// ensure measures Redis's time unless it has a measure already, or Redis
// refuses TIME: the first times written must not be on this machine's
// clock. An error is left to the commands that follow.
func (c *clock) ensure(ctx context.Context, rdb redis.Cmdable) {
	if !c.known() {
		_ = c.measure(ctx, rdb)
	}
}

// known says whether the times shared are on a clock the other machines
// use: Redis's, measured, or, where Redis refuses TIME, this machine's.
func (c *clock) known() bool { return c.measured.Load() || c.timeRefused.Load() }

// measure asks Redis for its time in a round trip of its own.
func (c *clock) measure(ctx context.Context, rdb redis.Cmdable) error {
	pipe := rdb.Pipeline()
	cmd, sent := c.timeCmd(ctx, pipe)
	cmds, err := pipe.Exec(ctx)
	if err = c.pipelineError(cmds, cmd, err); err == nil {
		c.observe(cmd, sent)
	}
	return err
}

// pipelineError is err, the error of the pipeline that ran cmds, TIME as
// cmd among them, unless cmd alone failed, refused by Redis (an ACL
// without it): the other commands' answers stand, and the times stay on
// this machine's clock from then on (timeRefused).
func (c *clock) pipelineError(cmds []redis.Cmder, cmd *redis.TimeCmd, err error) error {
	if err == nil || cmd == nil {
		return err
	}
	for _, other := range cmds {
		if other != redis.Cmder(cmd) && other.Err() != nil {
			return err
		}
	}
	if !refusedCommand(cmd.Err()) {
		return err // no answer, or not served now (NOAUTH, BUSY): the pipeline failed
	}
	if !c.timeRefused.Swap(true) {
		c.log.Warn("redis refuses TIME: heartbeats, deadlines and the quarantine's expiries go on this machine's clock, which must agree with the other machines'", "err", cmd.Err())
	}
	return nil
}

// refusedCommand says whether err is Redis's refusal of a command for
// good (the user may not run it, Redis or a proxy before it does not know
// it), rather than no answer or a Redis that does not serve now: loading,
// busy with a script, in a failover, or waiting for a password.
func refusedCommand(err error) bool {
	if !errors.As(err, new(redis.Error)) || notServing(err) {
		return false
	}
	return !redis.HasErrorPrefix(err, "NOAUTH") && !redis.HasErrorPrefix(err, "WRONGPASS")
}
