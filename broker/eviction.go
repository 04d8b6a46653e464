package broker

import (
	"context"
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
// refuses writes instead, which streamer tells its callers plainly.
type evictionLook struct {
	last   time.Time // when the policy was last read
	policy string    // the policy read last, "" unknown
	off    bool      // Redis refuses INFO to this user: no more looks
}

// lookAtEviction reads the policy every policyLookEvery, and logs a warning
// when it becomes one that evicts, and a note when it no longer does. It
// requires that checkMu is held.
func (fe *FrontEnd) lookAtEviction(ctx context.Context) {
	l := &fe.eviction
	if l.off || time.Since(l.last) < policyLookEvery {
		return
	}
	l.last = time.Now()
	// Through a pipeline, whose connections the check's own are: a lone
	// command would dial one more.
	var cmd *redis.StringCmd
	_, _ = fe.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = pipe.Info(ctx, "memory")
		return nil
	})
	info, err := cmd.Result()
	if err != nil {
		l.off = refusedCommand(err)
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
}
