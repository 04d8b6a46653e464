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
// deadline. Each front end and node measures how far Redis's clock is from
// its own (TIME, in its checks and heartbeats), to within half a round
// trip.
type clock struct {
	skew   time.Duration // added to this machine's clock: tests' stand-in for a clock off
	log    *slog.Logger
	offset atomic.Int64 // Redis's clock less this machine's, in nanoseconds
	// measured is set once offset holds a measure; bestRTT is the
	// shortest round trip of the measures taken, in nanoseconds.
	measured  atomic.Bool
	bestRTT   atomic.Int64
	lastTaken atomic.Int64 // when the last measure was taken, in Unix nanoseconds
	warned    atomic.Bool  // the offset was past clockOffsetWarn, and logged
	// timeRefused is set once Redis has refused TIME (an ACL without it):
	// the times stay on this machine's clock, which must then agree with
	// the other machines'.
	timeRefused atomic.Bool
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

// local is this machine's time now.
func (c *clock) local() time.Time { return time.Now().Add(c.skew) }

// now is Redis's time now, as last measured.
func (c *clock) now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// shared turns a time of this machine (a deadline) into Redis's.
func (c *clock) shared(t time.Time) time.Time { return c.now().Add(time.Until(t)) }

// fromShared turns a time on Redis's clock into one of this machine.
func (c *clock) fromShared(t time.Time) time.Time { return time.Now().Add(t.Sub(c.now())) }

// timeCmd queues TIME on pipe, for observe after the pipeline ran: sent
// at sent, on this machine's clock. It queues nothing, and returns nil,
// once Redis has refused TIME.
func (c *clock) timeCmd(ctx context.Context, pipe redis.Pipeliner) (cmd *redis.TimeCmd, sent time.Time) {
	if c.timeRefused.Load() {
		return nil, time.Time{}
	}
	return pipe.Time(ctx), c.local()
}

// observe takes Redis's time from cmd, a TIME sent at sent whose
// pipeline has just answered.
func (c *clock) observe(cmd *redis.TimeCmd, sent time.Time) {
	if cmd == nil {
		return
	}
	back := c.local()
	redisNow, err := cmd.Result()
	if err != nil {
		return
	}
	rtt := back.Sub(sent)
	best := time.Duration(c.bestRTT.Load())
	switch {
	case !c.measured.Load() || time.Since(time.Unix(0, c.lastTaken.Load())) > staleMeasure:
		best = rtt
	case rtt <= max(maxTimeRoundTrip, 2*best):
		best = min(best, rtt)
	default:
		return
	}
	c.bestRTT.Store(int64(best))
	c.lastTaken.Store(time.Now().UnixNano())
	offset := redisNow.Sub(sent.Add(back.Sub(sent) / 2))
	c.offset.Store(int64(offset))
	c.measured.Store(true)
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
