package broker

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// policyLookEvery is how often a front end reads Redis's maxmemory-policy
// (see lookAtEviction): an operator may change it on a running Redis.
const policyLookEvery = 10 * time.Second

// evictionLook follows Redis's maxmemory-policy for a front end. A Redis
// that may evict keys, when it is full, deletes streamer's own: the
// shared stream with the items waiting (the front ends then take Redis
// for one that lost its data), or a front end's reply stream with its
// answers (its callers fail as lost). Only noeviction keeps them, and
// refuses writes instead, which streamer tells its callers plainly. It
// also follows Redis's count of keys evicted, so that keys evicted under
// a policy set for less than a look's interval are told of too.
type evictionLook struct {
	last    time.Time // when the policy was last read
	policy  string    // the policy read last, "" unknown
	evicted int64     // Redis's count of keys evicted at the last look
	counted bool      // evicted was read at the last look
	off     bool      // Redis refuses INFO to this user: no more looks
}

// lookAtEviction reads the policy and the keys evicted every
// policyLookEvery. It logs a warning when the policy becomes one that
// evicts, and a note when it no longer does; and an error when Redis has
// evicted keys since the last look. It requires that checkMu is held.
func (fe *FrontEnd) lookAtEviction(ctx context.Context) {
	l := &fe.eviction
	if l.off || time.Since(l.last) < policyLookEvery {
		return
	}
	l.last = time.Now()
	// Through a pipeline, whose connections the check's own are: a lone
	// command would dial one more. Two sections, in two commands: before
	// Redis 7, INFO takes one.
	var memory, stats *redis.StringCmd
	_, _ = fe.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		memory = pipe.Info(ctx, "memory")
		stats = pipe.Info(ctx, "stats")
		return nil
	})
	info, err := memory.Result()
	if err != nil {
		if l.off = refusedCommand(err); l.off {
			fe.cfg.Logger.Warn("redis refuses INFO: streamer cannot see whether redis may evict its keys when full (maxmemory-policy), nor count the keys it evicts; grant the user +info, or check the policy is noeviction yourself (see the README)",
				"redis", fe.where, "err", err)
		}
		return
	}
	policy := infoValue(info, "maxmemory_policy")
	if policy == "" {
		return
	}
	last := l.policy
	l.policy = policy
	switch {
	case last == policy:
	case policy != "noeviction":
		fe.cfg.Logger.Warn("redis may evict keys when it is full (maxmemory-policy "+policy+"): it would delete streamer's items and answers, and requests would fail as lost; set maxmemory-policy noeviction (see the README)",
			"redis", fe.where, "maxmemory_policy", policy)
	case last != "":
		fe.cfg.Logger.Info("redis evicts no keys any more (maxmemory-policy noeviction)", "redis", fe.where)
	}
	fe.noteEvicted(stats.Val())
}

// noteEvicted reads the count of keys evicted from Redis's INFO stats,
// and logs an error when it grew since the last look. A count that fell
// was reset (a restart, CONFIG RESETSTAT): it counts from there.
func (fe *FrontEnd) noteEvicted(stats string) {
	l := &fe.eviction
	evicted, err := strconv.ParseInt(infoValue(stats, "evicted_keys"), 10, 64)
	if err != nil {
		l.counted = false
		return
	}
	if before := l.evicted; l.counted && evicted > before {
		fe.cfg.Logger.Error("redis evicted keys since the last look, for want of memory: they may have been streamer's items, answers or beats, and requests may have failed as lost; set maxmemory-policy noeviction and a maxmemory with room (see the README)",
			"evicted", evicted-before, "in_the_last", policyLookEvery, "maxmemory_policy", l.policy, "redis", fe.where)
	}
	l.evicted, l.counted = evicted, true
}
