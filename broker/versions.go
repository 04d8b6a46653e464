package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The versions of the model that the nodes run (see ModelID.Version) are
// kept in the versions key, a hash of each node's name to its entry: when
// the node last wrote it, on Redis's clock, in milliseconds, a space, and
// its version. A node writes its own at every beat, in the beat's round
// trip, and reads them all back; a front end reads them at its checks.
// Nothing refuses a mix, which a rolling upgrade makes: it is counted,
// and logged as it begins and ends. Versions of streamer from before the
// key neither read nor write it.

// versionsTTL is how long the versions key outlives the last node's beat,
// and how old a node's entry grows (the node killed, not gone through
// Shutdown) before a beating node deletes it: as long as the model key
// (see modelTTL).
const versionsTTL = modelTTL

// versionEntry is a node's entry in the versions key, written at at.
func versionEntry(at time.Time, version string) string {
	return strconv.FormatInt(at.UnixMilli(), 10) + " " + version
}

// liveVersions reads the versions key, as HGETALL answers it: the
// versions of the nodes whose entries were written after since, each with
// its nodes, sorted; and the nodes whose entries were written before
// stale, or that do not read as an entry (written by hand), to delete.
func liveVersions(entries map[string]string, since, stale time.Time) (live map[string][]string, old []string) {
	live = map[string][]string{}
	for node, entry := range entries {
		ms, version, ok := strings.Cut(entry, " ")
		at, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil || version == "" {
			old = append(old, node)
			continue
		}
		switch written := time.UnixMilli(at); {
		case written.After(since):
			live[version] = append(live[version], node)
		case written.Before(stale):
			old = append(old, node)
		}
	}
	for _, nodes := range live {
		slices.Sort(nodes)
	}
	slices.Sort(old)
	return live, old
}

// versionWatch counts the versions that the live nodes run, as a node's
// beats or a front end's checks read them, and, when it has a logger, logs
// when a mix begins and when it ends: once each, not at every read, and
// only once the mix, or its end, has held for versionsHold.
type versionWatch struct {
	count atomic.Int64
	mu    sync.Mutex
	mixed steady // requires that mu is held
}

// versionsHold is how long a mix of versions, or its end, or a front end
// of a version no node runs, holds before it is logged: a Redis restarted
// without its data, or a node's first beat, has the nodes' entries come
// back one beat apart, a second at most, which read as a mix ended and
// begun again, or as no node of the front end's version.
const versionsHold = nodeSilence

// steady is a condition said once it has held for versionsHold: said is
// the one said last, and since when the other one has held, if pending.
type steady struct {
	said, pending bool
	since         time.Time
}

// note takes in that the condition is v at now, and reports whether it
// is now to be said: it has held for versionsHold since it changed.
func (s *steady) note(v bool, now time.Time) bool {
	switch {
	case v == s.said:
		s.pending = false
		return false
	case !s.pending:
		s.pending, s.since = true, now
		return false
	case now.Sub(s.since) < versionsHold:
		return false
	}
	s.said, s.pending = v, false
	return true
}

// mixMsg and unmixedMsg are the log lines of a mix's beginning and end.
const (
	mixMsg     = "the nodes under this key prefix run more than one version of the model: a request is answered by whichever version runs it (a rolling upgrade shows this until it is done; else give every node the same model file, plugin binary and --plugin-arg)"
	unmixedMsg = "the nodes under this key prefix no longer run more than one version of the model"
)

// note counts the versions of live, and logs to log, when it is not nil, a
// mix begun or ended that has held.
func (w *versionWatch) note(log *slog.Logger, live map[string][]string, attrs ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.count.Store(int64(len(live)))
	if !w.mixed.note(len(live) > 1, time.Now()) || log == nil {
		return
	}
	if w.mixed.said {
		log.Warn(mixMsg, append([]any{"count", len(live), "versions", describeVersions(live)}, attrs...)...)
	} else {
		log.Info(unmixedMsg, append([]any{"count", len(live), "versions", describeVersions(live)}, attrs...)...)
	}
}

// describeVersions names the live versions and the nodes that run each,
// for a log line, bounded: the first few versions, a few nodes each.
func describeVersions(live map[string][]string) string {
	const maxVersions, maxNodes = 4, 3
	versions := slices.Sorted(maps.Keys(live))
	var parts []string
	for i, v := range versions {
		if i == maxVersions {
			parts = append(parts, fmt.Sprintf("and %d more versions", len(versions)-i))
			break
		}
		nodes := live[v]
		names := strings.Join(nodes[:min(len(nodes), maxNodes)], ", ")
		if len(nodes) > maxNodes {
			names += fmt.Sprintf(" and %d more", len(nodes)-maxNodes)
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", clipVersion(v), names))
	}
	return strings.Join(parts, "; ")
}

// clipVersion is v cut to 32 bytes, for a log line: an embedder's
// version may be of any length.
func clipVersion(v string) string {
	if len(v) > 32 {
		return v[:32] + "…"
	}
	return v
}

// versionsBeat queues, on a beat's pipeline, the node's part in the
// versions key: its own entry written at now while it is alive (listed
// among the live nodes) and has a version, else deleted; the stale
// entries its last beat found deleted; and the key read back, last.
func (n *Node) versionsBeat(ctx context.Context, pipe redis.Pipeliner, now time.Time, alive bool) []redis.Cmder {
	var cmds []redis.Cmder
	if len(n.staleVersions) > 0 {
		cmds = append(cmds, pipe.HDel(ctx, n.k.versions, n.staleVersions...))
	}
	if v := n.cfg.modelVersion(); v != "" && alive {
		cmds = append(cmds, pipe.HSet(ctx, n.k.versions, n.cfg.Name, versionEntry(now, v)),
			pipe.PExpire(ctx, n.k.versions, versionsTTL))
	} else {
		cmds = append(cmds, pipe.HDel(ctx, n.k.versions, n.cfg.Name))
	}
	return append(cmds, pipe.HGetAll(ctx, n.k.versions))
}

// versionsErr is the first refusal Redis sent back to cmds, the versions'
// commands of a beat or a check (a permission, or the key of another
// type); nil when none, or when they failed as every command did (no
// answer).
func versionsErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil && errors.As(err, new(redis.Error)) {
			return err
		}
	}
	return nil
}

// noteVersions takes in the versions key as a beat at now read it, the
// last of cmds (none when Redis refused it): the versions of the nodes
// heard from within nodeSilence are counted, and the entries past
// versionsTTL are deleted at the next beat.
func (n *Node) noteVersions(cmds []redis.Cmder, now time.Time) {
	if len(cmds) == 0 {
		n.staleVersions = nil
		n.versions.note(nil, nil)
		return
	}
	entries := cmds[len(cmds)-1].(*redis.MapStringStringCmd).Val()
	live, old := liveVersions(entries, now.Add(-nodeSilence), now.Add(-versionsTTL))
	n.staleVersions = old
	// Counted, not logged: the front ends log it, that of the node's own
	// process among them, which would say it a second time.
	n.versions.note(nil, live)
}

// noteVersions takes in the versions key as a check read it (nil when
// Redis refused it), counting the versions of the nodes that wrote theirs
// after since, as it counts the nodes. A front end of a version that none
// of them runs warns once, while it lasts: its clients see its model, on
// the v2 routes too, while the nodes answer with theirs. It requires that
// checkMu is held.
func (fe *FrontEnd) noteVersions(entries map[string]string, since time.Time) {
	live, _ := liveVersions(entries, since, time.Time{})
	fe.versions.note(fe.cfg.Logger, live, "redis", fe.where, "prefix", fe.cfg.Prefix)
	mine := fe.cfg.modelVersion()
	other := mine != "" && fe.modelErr == nil && len(live) > 0 && live[mine] == nil
	fe.otherVersion.Store(other)
	if !fe.otherSaid.note(other, time.Now()) {
		return
	}
	if other {
		fe.cfg.Logger.Warn(otherVersionMsg, "front_end", clipVersion(mine), "nodes", describeVersions(live), "redis", fe.where, "prefix", fe.cfg.Prefix)
	} else if live[mine] != nil {
		fe.cfg.Logger.Info("a node runs this front end's version of the model again", "front_end", clipVersion(mine), "redis", fe.where, "prefix", fe.cfg.Prefix)
	}
}

// otherVersionMsg is the log line of a front end whose model is another
// version than every live node's.
const otherVersionMsg = "this front end's model is another version than every node's: it names its own model (on the v2 routes too) while the nodes answer with theirs (give it the nodes' --model file, or binary and --plugin-arg; SIGHUP it once its file is replaced)"
