package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis can lose some of its last writes and keep the rest: a replica
// promoted by Sentinel lacks what the master had not yet sent it, and a
// Redis restarted from an append-only file synced every second lacks up to
// that second. Its epoch stays (see check), so a front end does not know
// that the items of some calls are gone, and those calls would wait until
// their deadline, or for ever without one. A front end therefore looks for
// its calls' items in Redis: all of them after each outage, and every
// lostLookEvery those of calls out for longer than lostLookAge. An item
// still on its stream is waiting or running; an item gone was answered,
// its answer written to the reply stream in the same transaction that
// deleted it, or lost. The look reads the reply stream's last entry in the
// same step as it looks for the items, and waits until the reader has
// delivered up to there: an item gone then, and not answered, is lost, and
// its call fails with supervisor.ErrUnavailable.
const (
	lostLookEvery = 2 * time.Second
	lostLookAge   = 2 * time.Second
	// lostLookMax bounds the items one look asks Redis about: Redis serves
	// nobody else while the script runs (about 2µs an item).
	lostLookMax = 4096
	// lostLookBytes bounds the bytes of items one look reads (see
	// lostScript), and a node's look for items gone (see goneScript): a
	// look that read every item whole held Redis for over a second with a
	// few dozen items of 4 MB, and every front end and node took it for
	// down.
	lostLookBytes = 4 << 20
)

// lostScript answers which of the items named are gone from their streams
// (their places among the pairs, from 1), and the id of the last entry on
// the reply stream (0-0 when it has none). An item a node holds (pending
// in the group) is there, and is not read; one not yet read by a node is
// looked for by reading it whole, which the script does for at most
// ARGV[1] bytes of items: those left once they are read are not judged.
//
//	KEYS[1] the front end's reply stream
//	ARGV    the group, the most bytes of items to read, then stream, id, stream, id, ...
var lostScript = redis.NewScript(`
local gone = {}
local budget = tonumber(ARGV[2])
for i = 3, #ARGV, 2 do
  local held = redis.pcall('XPENDING', ARGV[i], ARGV[1], ARGV[i + 1], ARGV[i + 1], 1)
  if (held.err or #held == 0) and budget > 0 then
    local e = redis.call('XRANGE', ARGV[i], ARGV[i + 1], ARGV[i + 1])
    if #e == 0 then
      gone[#gone + 1] = (i - 1) / 2
    else
      for _, v in ipairs(e[1][2]) do budget = budget - #v end
    end
  end
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return {'0-0', gone} end
return {last[1][1], gone}
`)

// lookForLost fails the calls out for at least minAge whose items Redis
// has lost (see lostLookEvery).
func (fe *FrontEnd) lookForLost(ctx context.Context, minAge time.Duration) error {
	places, args := fe.waitingItems(minAge)
	if len(places) == 0 {
		return nil
	}
	// In another order each time: the items past the script's bound on
	// the bytes it reads are judged by a later look.
	rand.Shuffle(len(places), func(i, j int) {
		places[i], places[j] = places[j], places[i]
		args[2*i], args[2*j] = args[2*j], args[2*i]
		args[2*i+1], args[2*j+1] = args[2*j+1], args[2*i+1]
	})
	res, err := lostScript.Run(ctx, fe.rdb, []string{fe.replyKey}, append([]any{nodeGroup, lostLookBytes}, args...)...).Slice()
	if err != nil {
		return err
	}
	last, _ := res[0].(string)
	gone, _ := res[1].([]any)
	if len(gone) == 0 {
		return nil
	}
	upTo, err := parseStreamID(last)
	if err != nil {
		return fmt.Errorf("the reply stream's last entry: %w", err)
	}
	// The answers of the items gone that were answered are on the reply
	// stream by last: once they are delivered, those not answered are lost.
	if err := fe.readPast(ctx, upTo); err != nil {
		return err
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	lost, err := fe.stillUnansweredLocked(places, gone)
	if err != nil || len(lost) == 0 {
		return err
	}
	fe.failLostLocked(lost)
	return nil
}

// place is an item of a call: its index in the call's items.
type place struct {
	c     *call
	index int
}

// waitingItems are the items not answered yet of the calls admitted at
// least minAge ago, up to lostLookMax, and the lost items' script's
// arguments for them: each one's stream and id.
func (fe *FrontEnd) waitingItems(minAge time.Duration) (places []place, args []any) {
	now := time.Now()
	fe.mu.Lock()
	defer fe.mu.Unlock()
	for _, c := range fe.calls {
		if c.ids == nil || now.Sub(c.sent) < minAge {
			continue // not admitted yet, or young
		}
		for i, id := range c.ids {
			if !c.got[i] && len(places) < lostLookMax {
				places = append(places, place{c, i})
				args = append(args, c.stream, id)
			}
		}
	}
	return places, args
}

// stillUnansweredLocked are the items among places that the lost items'
// script found gone (gone: their places, from 1) and that are still not
// answered, by call. It requires fe.mu held.
func (fe *FrontEnd) stillUnansweredLocked(places []place, gone []any) (map[*call]map[int]bool, error) {
	lost := map[*call]map[int]bool{}
	for _, g := range gone {
		k, ok := g.(int64)
		if !ok || k < 1 || int(k) > len(places) {
			return nil, fmt.Errorf("the lost items' script answered %v", g)
		}
		p := places[k-1]
		if fe.calls[p.c.seq] == p.c && !p.c.got[p.index] {
			if lost[p.c] == nil {
				lost[p.c] = map[int]bool{}
			}
			lost[p.c][p.index] = true
		}
	}
	return lost, nil
}

// failLostLocked fails the calls whose items Redis lost (lost: the calls
// and their items gone), withdrawing their other items, and says why: the
// answers may have expired unread, when the front end went past its reply
// TTL without refreshing its stream since the call was sent, or else
// Redis lost them. It requires fe.mu held.
func (fe *FrontEnd) failLostLocked(lost map[*call]map[int]bool) {
	lostErr := unavailablef("redis at %s lost the request's items (a failover to a replica that lacked them, or a restart that lost its last writes)", fe.where)
	var expiredErr error
	gap := fe.lastGap.Load()
	if last := time.Unix(0, fe.refreshedAt.Load()); time.Since(last) > fe.cfg.ReplyTTL {
		// Not refreshed for that long now (this look ran on, stalled
		// with the front end, before the check that would note it).
		gap = &span{from: last, to: time.Now()}
	}
	if gap != nil {
		expiredErr = unavailablef("the request's answers may have expired in redis at %s unread: this front end went %s without refreshing its reply stream, past its reply TTL of %s (was it stalled, or cut off from redis?)", fe.where, gap.to.Sub(gap.from).Round(time.Millisecond), fe.cfg.ReplyTTL)
	}
	items, expired := 0, 0
	for c, gone := range lost {
		err := lostErr
		if gap != nil && c.sent.Before(gap.to) {
			err = expiredErr
			expired++
		}
		if err == lostErr {
			items += len(gone)
		}
		// Its other items, still there, need not run.
		var left []string
		for i, id := range c.ids {
			if !c.got[i] && !gone[i] {
				left = append(left, id)
			}
		}
		fe.withdraw(c.stream, left)
		fe.failLocked(c, err)
	}
	if expired > 0 {
		fe.cfg.Logger.Error("failing the requests whose answers may have expired unread", "requests", expired, "unrefreshed_for", gap.to.Sub(gap.from).Round(time.Millisecond), "reply_ttl", fe.cfg.ReplyTTL, "redis", fe.where)
	}
	if expired < len(lost) {
		fe.cfg.Logger.Error("failing the requests whose items redis lost", "requests", len(lost)-expired, "redis", fe.where)
	}
	fe.stats.lost.Add(uint64(items))
	fe.noteIdleLocked()
}

// span is a stretch of time.
type span struct{ from, to time.Time }

// readPast waits until the reader has delivered the reply stream's entries
// up to id, or ctx ends.
func (fe *FrontEnd) readPast(ctx context.Context, id streamID) error {
	for {
		fe.readMu.Lock()
		done, moved := !fe.readTo.before(id), fe.readMoved
		fe.readMu.Unlock()
		if done {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("the answers on the reply stream up to %s not read yet: %w", id, ctx.Err())
		}
	}
}

// noteRead records that the reader has delivered the reply stream's
// entries up to id.
func (fe *FrontEnd) noteRead(id string) {
	sid, err := parseStreamID(id)
	if err != nil {
		return
	}
	fe.readMu.Lock()
	defer fe.readMu.Unlock()
	if fe.readTo.before(sid) {
		fe.readTo = sid
		close(fe.readMoved)
		fe.readMoved = make(chan struct{})
	}
}

// streamID is a stream entry's id: milliseconds, then a sequence number.
type streamID struct{ ms, seq uint64 }

func parseStreamID(s string) (streamID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return streamID{}, fmt.Errorf("malformed stream id %q", s)
	}
	return streamID{a, b}, nil
}

func (a streamID) before(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

func (a streamID) String() string { return fmt.Sprintf("%d-%d", a.ms, a.seq) }
