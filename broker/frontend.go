package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/internal/repeats"
	"github.com/streamer-dev/streamer/supervisor"
)

// FrontEndConfig sets up a front end. Only URL is required.
type FrontEndConfig struct {
	Config
	// MaxBacklog is the most items the shared stream may hold (waiting or
	// running, from every front end); a request that would pass it is
	// refused with supervisor.ErrOverloaded, and one of more items than it
	// with ErrTooLarge. Zero means 6400.
	MaxBacklog int
	// MaxItems is the most items in one request; more is ErrTooLarge.
	// Zero means 4096.
	MaxItems int
	// MaxItemBytes is the largest item, in bytes, a request may carry (a
	// node's workers take batches of at most their MaxBatchBytes): a
	// request with a larger one is refused whole, with an ItemError of
	// ErrTooLarge naming it, before any of its items enters Redis. Set it
	// to the nodes' MaxBatchBytes, as streamer serve does: the refusal
	// speaks of a batch's bound, in the words of a local Streamer's, so
	// that a caller gets the same answer from either. Zero means 64 MiB.
	MaxItemBytes int
	// Outage is how long Redis may be unreachable, every node silent, or
	// the front end's reads of its answers refused, before the requests
	// waiting for answers fail with
	// supervisor.ErrUnavailable, counted from the start of the first
	// check that found it so (a Redis that hangs is found so by two
	// checks in a row that get no answer, a second in all: past an Outage
	// of a second or less, the waiting requests fail as it is found).
	// New requests fail at once meanwhile. While the only nodes heard
	// from leave, or none of their workers can run, the requests with an
	// item that none of them holds (unread, or let go and idle for
	// ClaimIdle) fail alike once no node has taken requests for Outage;
	// those whose items they hold wait for their answers. Zero means 1s.
	Outage time.Duration
}

// FrontEnd takes requests and has them answered by the nodes reading the
// same Redis. It offers the Go API of a local supervisor (PredictRequest,
// Ready, Stats, Slots), so the HTTP layer and embedders use it alike.
type FrontEnd struct {
	cfg      FrontEndConfig
	rdb      *redis.Client
	where    string // the Redis, named for messages
	k        keys
	id       string
	replyKey string
	clock    *clock // Redis's, for the times nodes read (see clock)
	probe    probe  // whether the Redis can serve at all

	mu    sync.Mutex
	calls map[uint64]*call // waiting for answers, by request number
	seq   uint64
	held  int // items of the calls

	submits chan *call
	back    comebacks     // the callers answered, expected back with their next request
	idle    chan struct{} // a token when the last call ends while closed
	// writerDone is closed when the writer has stopped taking calls;
	// writerStopped is set, under mu, as it stops (see stopWriting).
	writerDone    chan struct{}
	writerStopped bool
	closing       chan struct{}
	done          sync.WaitGroup // the writer, the checks and the stall watch
	reader        sync.WaitGroup // the reader of answers
	closed        atomic.Bool    // Close was called
	closeDone     chan struct{}  // closed once the first Close has ended
	started       atomic.Bool    // Start was called
	firstLook     chan struct{}  // closed once Start's look at Redis has ended
	// lifeMu orders Start and Close: Start counts every goroutine it will
	// run in done, reader and withdrawing under it, unless closed is set;
	// Close sets closed under it, before it waits for any of them.
	lifeMu sync.Mutex

	// epoch is the value of the epoch key at the last check, under mu: a
	// Redis that lost its data (restarted without persistence, or flushed)
	// has another, or none. Admissions pass it to Redis, which refuses
	// them under another. checkMu keeps checks in turn, so that a check
	// that began before another does not end after it.
	epoch   string
	checkMu sync.Mutex
	// refreshed is when the last check refreshed the reply stream's TTL
	// (under checkMu); unrefreshed, the last span longer than the TTL
	// without a refresh, until a look at every call follows it; lastGap,
	// that span for good: the answers written before its end may have
	// expired unread, and a call sent before it whose items are found gone
	// unanswered, at whichever look, is told so (the first look after the
	// span misses the calls whose admission's verdict the stalled front
	// end had not read yet).
	refreshed   time.Time
	unrefreshed atomic.Pointer[span]
	lastGap     atomic.Pointer[span]
	refreshedAt atomic.Int64 // refreshed, in Unix nanoseconds, for the looks for lost items
	// lookAll asks the check loop for a look at every call's items: a
	// command found Redis down, or its connection closed (see noteDown).
	lookAll atomic.Bool
	// graceSince and graceUntil let the nodes alive before an outage
	// count for a while after it, under checkMu (see nodesSince).
	graceSince, graceUntil time.Time
	// noNodeSince is when checks began to find no node that takes
	// requests (zero while one does), and noNodeLogged whether that was
	// logged, under checkMu (see noteNodesTaking).
	noNodeSince  time.Time
	noNodeLogged bool

	up      atomic.Bool  // Redis answered the last check
	nodes   atomic.Int64 // nodes heard from within nodeSilence, at the last check
	leaving atomic.Int64 // nodes leaving (finishing their items) heard from as recently
	backlog atomic.Int64 // the stream's length at the last check
	room    atomic.Int64 // the room kept in the backlog at the last check (see admitScript)
	// fullSeen is when the backlog was last seen full for a request no
	// larger than most, by a check or an admission refused: in
	// nanoseconds since born, on the monotonic clock, plus one; zero for
	// never (see Full).
	born     time.Time
	fullSeen atomic.Int64
	// sharedMean is the mean size of the requests every front end had
	// admitted of late, as the last check read it, in 1/1024 items;
	// largeShare, the share of this front end's requests of late that
	// were larger than most by it, in 1/1024; sentAny, whether it has
	// sent any (see carriesLarge).
	sharedMean, largeShare atomic.Int64
	sentAny                atomic.Bool
	// roomLapse is how long the backlog keeps room for a request after
	// each of its tries: roomKeep, but in tests.
	roomLapse time.Duration
	lastErr   atomic.Pointer[string]
	// readRefused says why Redis refuses the reader's reads of the reply
	// stream (an error it answered, such as NOPERM: the front end's user
	// may not read it), or nil while they go through (see refuseReads).
	readRefused atomic.Pointer[string]
	// admitRefused says why Redis refuses the front end's admissions (a
	// NOPERM: its user may not run the admission script, or not on the
	// keys it reads and writes), or nil while they may go through;
	// admitProbed, under checkMu, that a check has tried one since the
	// start (see probeAdmission).
	admitRefused atomic.Pointer[string]
	// admitFailing says why Redis fails the front end's admissions
	// otherwise (an error it answered that is neither a refusal nor an
	// outage: a key the admission reads holds another type), or nil
	// while they may go through (see failAdmissions).
	admitFailing  atomic.Pointer[admitFault]
	admitProbed   bool
	admitProbedAt time.Time     // when the last probe ran, under checkMu
	eviction      evictionLook  // under checkMu
	stalls        stallWatch    // the front end's own stalls, from Start until Close
	repeats       repeats.Lines // the warnings that repeat, held back (see repeats.Lines)
	// mismatch says why the front end takes no requests: the nodes serve a
	// model that reads items otherwise than it writes them; nil while
	// they agree (see noteModel). modelErr is that, as the last check
	// found it, under checkMu.
	mismatch    atomic.Pointer[error]
	modelErr    error
	modelLogged atomic.Bool // a refused read of the model is logged
	// otherName is set while the nodes' model has another name than the
	// front end's (logged once each time it begins; see noteModel).
	otherName atomic.Bool
	// versions counts the versions of the model the live nodes run, as
	// the checks read them; otherVersion is set while the front end's own
	// is none of them (logged once it has held a while; see noteVersions).
	versions       versionWatch
	otherVersion   atomic.Bool
	otherSaid      steady      // under checkMu: otherVersion as logged
	versionsLogged atomic.Bool // a refused read of the versions is logged
	// fullAt is when Redis last refused a write for want of memory, as
	// fullSeen counts (see noteFull); fullLogged, that the refusals
	// since Redis last took the front end's writes for Outage were logged.
	fullAt     atomic.Int64
	fullLogged atomic.Bool

	// toWithdraw holds, by stream, the items of calls that ended unanswered
	// while they could not be withdrawn at once (Redis down, or the front
	// end closing), for the next check that finds Redis up, or Close;
	// under mu. withdrawing is the withdrawer (see withdrawLoop).
	toWithdraw  map[string][]string
	withdrawing sync.WaitGroup
	// withdrawQ holds, by stream, the items withdraw has queued for the
	// withdrawer (see withdrawLoop), under mu; withdrawNow has a token
	// when it grows.
	withdrawQ   map[string][]string
	withdrawNow chan struct{}
	// unanswered holds the admissions that got no answer (Redis hung, or
	// the connection broke, with the command sent), under mu: Redis may
	// have run them, or run them yet as it resumes, and put on the stream
	// the items of calls that failed. See withdrawUnanswered.
	unanswered []unansweredAdmission

	// readTo is the last entry of the reply stream the reader has
	// delivered; readMoved is closed, and replaced, when it moves (see
	// lookForLost).
	readMu    sync.Mutex
	readTo    streamID
	readMoved chan struct{}

	stats struct {
		submitted, rejected, duplicates, withdrawn, lost atomic.Uint64
		// The outcomes of the items answered, each item in one of them
		// (see supervisor.Stats).
		ok, failed, expired, poisoned, canceled atomic.Uint64
	}
	// endToEnd counts the time from a request's submission to each of its
	// items' answers, for the items a node ran.
	endToEnd supervisor.LatencyHistogram
}

// call is one request waiting for its answers.
type call struct {
	seq      uint64
	items    [][]byte
	keys     []string
	deadline time.Time
	admitted chan error // the stream's verdict: nil, or why it was refused
	route    string     // the node that answered its caller last, if known
	stream   string     // where its items went, once admitted
	owner    string     // the node it counts for in the balance; under comebacks.mu
	ended    bool       // settled: it counts for no node any more; under comebacks.mu
	ids      []string   // the items' stream ids, once admitted
	epoch    string     // the epoch it was admitted in; under FrontEnd.mu
	sent     time.Time  // when it was submitted
	gaveUp   bool       // its caller left before the verdict; under FrontEnd.mu
	// Set by the writer at the call's first admission: tried; roomToken,
	// for a request of two items or more, names it for the room it may
	// have kept in the backlog (the admission judges whether it is larger
	// than most), and roomSince is then when it was first tried;
	// requeued, once it has been sent back to come again for its room;
	// asks, while it comes back without its items, to ask whether they
	// fit (its items weigh on each try otherwise: 4 MB every 5 ms for a
	// request of 4 096 items of 1 KB).
	tried, requeued, asks bool
	roomToken             string
	roomSince             time.Time
	// Under FrontEnd.mu: decided, once the writer has given its verdict
	// or never will; counted, when that verdict admitted its items (they
	// count as submitted); endedEarly, when the call ended before the
	// verdict, with endErr, to be counted once it comes (see
	// settleLocked).
	decided, counted, endedEarly bool
	endErr                       error

	// Filled by the reply reader under FrontEnd.mu.
	outputs [][]byte
	errs    []error
	got     []bool
	left    int
	over    chan struct{} // closed when every item is answered, or the call failed
	failure error         // set before over is closed when the call failed as a whole
}

// admitScript puts the items of several requests on the stream, in one
// command: a node blocked on the stream wakes once for them all, where a
// command per request would wake it for the first alone. A request whose
// items would take the backlog past its bound is refused whole. One that
// carries a token and is larger than most (see the sizes key) has room
// kept for it, unless it is kept for another as large or larger, and is told to
// come back (-2): others are refused meanwhile unless they leave that room
// free, and it takes the room when it comes back with the same token and
// fits (see supervisor.Config.MaxQueue, for the same on a local server).
// It comes back without its items, asking whether it fits: when it does,
// the room is kept on for it and the answer is -3 (send them).
// Larger than most is twice the mean size of the requests admitted of
// late, by every front end, and two items at least: the mean is kept in
// Redis with the room, so that a front end that carries only large
// requests does not take them for the common size, and see them refused
// for ever while another front end's small ones fill every place that
// frees. Each admission moves it a sixteenth of the way to the size of
// the request it admits.
// A request
// routed to a node (its caller was just answered by it) goes to that
// node's own stream while the node is alive and lists it, while no item
// waits unread on the shared stream (it passes nobody), and while none
// waits unread on the node's own as this run begins (the node keeps up:
// requests do not pile up behind a busy node while others could run
// them); the list of streams or the node's stream of another type only
// closes the route. It answers, per request, the stream its items went to and their ids there, or when
// it refused them -1 (the backlog is full), -2 (room is kept for it: come
// back), -3 (it fits: send the items), or the room kept for another
// request. It admits nothing, answering an EPOCH error, when
// the epoch key does not hold the front end's epoch: Redis lost its data
// since the front end last checked, and it must fail the calls admitted
// before the loss, and only those, first.
//
//	KEYS[1] the items stream, KEYS[2] the live nodes, KEYS[3] the node
//	        streams, KEYS[4] the epoch, KEYS[5] the room kept, KEYS[6]
//	        the mean size of the requests admitted of late (in 1/1024
//	        items)
//	ARGV    max backlog, now (unix ms), how long a node may be silent
//	        (ms), the node streams' prefix, the front end's epoch, how
//	        long room is kept for a request between its tries (ms), then
//	        per request: "1" when keys follow ("ask" when no items do:
//	        it asks whether it fits), the node it is routed to (or ""),
//	        its number of items n, its token (or ""), then n × (header,
//	        [key], value)
//
// The streams need no trim: the bound on the backlog bounds them, and an
// item leaves its stream once answered. A trim could only ever delete
// items still waiting or running.
var admitScript = redis.NewScript(`
if ARGV[7] == 'probe' then
  -- For no request: what an admission runs, on the keys it touches, for
  -- the front end to learn whether its user may (see probeAdmission).
  redis.call('GET', KEYS[4])
  redis.call('XLEN', KEYS[1])
  redis.call('XRANGE', KEYS[1], '0-0', '0-0')
  local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
  if type(groups) == 'table' and groups.err and not string.find(groups.err, 'no such key') then
    return redis.error_reply(groups.err)
  end
  redis.call('ZSCORE', KEYS[2], '')
  redis.call('SISMEMBER', KEYS[3], '')
  redis.call('XADD', ARGV[4] .. '-probe', 'NOMKSTREAM', '*', 'p', '1')
  -- The room's value written again as it is, if it is there at all, and
  -- a node stream that no node has deleted: no change, and on keys the
  -- README lists (a user's ACL may name them alone).
  local kept = redis.call('GET', KEYS[5])
  redis.call('SET', KEYS[5], kept or '0', 'XX', 'KEEPTTL')
  redis.call('DEL', ARGV[4] .. '-probe')
  local sizes = redis.call('GET', KEYS[6])
  redis.call('SET', KEYS[6], sizes or '0', 'XX', 'KEEPTTL')
  return {}
end
if redis.call('GET', KEYS[4]) ~= ARGV[5] then
  return redis.error_reply('EPOCH redis lost its data since the front end last checked it')
end
local bound = tonumber(ARGV[1])
local now, silence, prefix = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local backlog = redis.call('XLEN', KEYS[1])
-- The room kept, and the request it is kept for ("N TOKEN").
local room, owner = 0, ''
local kept = redis.call('GET', KEYS[5])
if kept then
  local n, token = string.match(kept, '^(%d+) (.*)$')
  if n then room, owner = tonumber(n), token end
end
-- Kept by a front end of a larger bound than this one's (a mismatch):
-- this one would refuse every request for it.
if room > bound then room = 0 end
-- The mean size of the requests admitted of late, in 1/1024 items: a
-- request refused has room kept for it from twice that (and two items).
-- A value that cannot be one (written by hand) counts as none.
local mean = tonumber(redis.call('GET', KEYS[6]) or '') or 0
if mean < 0 or mean > 2^40 or mean ~= math.floor(mean) then mean = 0 end
local meanBefore = mean
local function largerThanMost(n)
  return n >= math.max(2, math.ceil(2 * mean / 1024))
end
-- unread(key) says whether items wait unread on the stream key: by the
-- nodes' group's lag (Redis 7 on, when it knows it), else by the first
-- entry past the last the group read. Never by the stream's last entry,
-- which it read whole, items of megabytes included, at every admission.
local function unread(key)
  if redis.call('XLEN', key) == 0 then return false end
  local delivered, lag = '0-0', nil
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, id, behind
    for i = 1, #g, 2 do
      if g[i] == 'name' then name = g[i + 1]
      elseif g[i] == 'last-delivered-id' then id = g[i + 1]
      elseif g[i] == 'lag' then behind = g[i + 1] end
    end
    if name == 'nodes' then delivered, lag = id, behind end
  end
  if type(lag) == 'number' then return lag > 0 end
  return #redis.call('XRANGE', key, '(' .. delivered, '+', 'COUNT', 1) > 0
end
local waiting = nil
-- open[key]: the node stream key may take requests in this run (its node
-- is alive and lists it, and nothing waits unread there).
local open = {}
local function sharedWaits()
  if waiting == nil then waiting = unread(KEYS[1]) end
  return waiting
end
local verdicts = {}
local j = 7
while j <= #ARGV do
  local keyed, asks = ARGV[j] == '1', ARGV[j] == 'ask'
  local route, n, token = ARGV[j + 1], tonumber(ARGV[j + 2]), ARGV[j + 3]
  j = j + 4
  local width = 2
  if keyed then width = 3 elseif asks then width = 0 end
  local mine = token ~= '' and token == owner
  if backlog + n > bound or (room > 0 and not mine and backlog + n + room > bound) then
    -- One that asks had room kept for it: found larger than most then,
    -- it keeps its place if its room lapsed meanwhile.
    if mine or (token ~= '' and (asks or largerThanMost(n)) and (room == 0 or n > room)) then
      -- Kept for it, or kept on: it comes back for it (-2).
      room, owner = n, token
      redis.call('SET', KEYS[5], n .. ' ' .. token, 'PX', ARGV[6])
      verdicts[#verdicts + 1] = -2
    elseif room > 0 then
      verdicts[#verdicts + 1] = room
    else
      verdicts[#verdicts + 1] = -1
    end
    j = j + n * width
  elseif asks then
    -- It fits: its room is kept while it sends its items (-3).
    room, owner = n, token
    redis.call('SET', KEYS[5], n .. ' ' .. token, 'PX', ARGV[6])
    verdicts[#verdicts + 1] = -3
  else
    if mine then
      room, owner = 0, ''
      redis.call('DEL', KEYS[5])
    end
    local stream = KEYS[1]
    if route ~= '' and not sharedWaits() then
      local key = prefix .. route
      if open[key] == nil then
        local beat = redis.call('ZSCORE', KEYS[2], route)
        open[key] = false
        if beat and tonumber(beat) > now - silence then
          -- The list of streams, or the node's stream, of another type
          -- closes the route rather than failing the request: the front
          -- end's check mends the one, the node the other.
          local fine, keeps = pcall(function() return redis.call('SISMEMBER', KEYS[3], key) == 1 and not unread(key) end)
          open[key] = fine and keeps
        end
      end
      if open[key] then stream = key end
    end
    if stream == KEYS[1] then waiting = true end
    local ids = {stream}
    for i = 0, n - 1 do
      if keyed then
        ids[#ids + 1] = redis.call('XADD', stream, '*', 'h', ARGV[j], 'k', ARGV[j + 1], 'v', ARGV[j + 2])
      else
        ids[#ids + 1] = redis.call('XADD', stream, '*', 'h', ARGV[j], 'v', ARGV[j + 1])
      end
      j = j + width
    end
    backlog = backlog + n
    verdicts[#verdicts + 1] = ids
    -- A sixteenth of the way to n, one step at least.
    if mean == 0 then
      mean = 1024 * n
    else
      local d = 1024 * n - mean
      local step = math.floor(math.abs(d) / 16)
      if step == 0 and d ~= 0 then step = 1 end
      if d < 0 then step = -step end
      mean = mean + step
    end
  end
end
-- Kept an hour after the last admission that moved it.
if mean ~= meanBefore then
  redis.call('SET', KEYS[6], string.format('%d', mean), 'PX', 3600000)
end
return verdicts
`)

// withdrawScript deletes the items of a request that nobody waits for any
// more (canceled, past its deadline, or failed) and that no node has read
// yet, so that none runs them. It answers how many it deleted. An item a
// node holds is left to it to run, but its entry goes too from Redis 7.0
// on, whose claims pass over deleted entries (where 6.2 hands them out
// empty): it serves nobody now, and its memory may be what a full Redis
// lacks for the answers that would let other items go (see
// withdrawLeftovers). XPENDING and XDEL take no memory: a full Redis runs
// the script.
//
//	KEYS[1] the items stream
//	ARGV    the group, then the items' stream ids
var withdrawScript = redis.NewScript(`
local n = 0
for i = 2, #ARGV do
  if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1) == 0 then
    n = n + redis.call('XDEL', KEYS[1], ARGV[i])
  elseif redis.REDIS_VERSION_NUM then
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return n
`)

// withdrawUnansweredScript withdraws the items of requests whose
// admission got no answer (see unansweredAdmission): it looks on the
// streams, each from an id on, for the entries whose header names the
// front end and one of the requests, and deletes those that no node has
// read. It reads a few entries at a time, items being maybe large, and at
// most 2048 entries of a stream: Redis serves nobody else meanwhile. It
// answers how many it deleted, whether it stopped short of a stream's end
// (1) or read each to its end (0), and the last id it looked at on each
// stream (empty for none), where the next look goes on: other clients' items
// may be more than the budget between the first id and those sought.
//
//	KEYS    the streams
//	ARGV    the group, the front end's id, the first id to look at on
//	        each stream, then the requests' numbers
var withdrawUnansweredScript = redis.NewScript(`
local seqs = {}
for i = 3 + #KEYS, #ARGV do seqs[ARGV[i]] = true end
local prefix = ARGV[2] .. ' '
local n, cut, last = 0, 0, {}
for k, key in ipairs(KEYS) do
  local from = ARGV[2 + k]
  local budget = 2048
  last[k] = ''
  while true do
    if budget <= 0 then
      cut = 1
      break
    end
    budget = budget - 32
    local entries = redis.call('XRANGE', key, from, '+', 'COUNT', 32)
    for _, e in ipairs(entries) do
      local h = e[2][2]
      if e[2][1] == 'h' and string.sub(h, 1, #prefix) == prefix and seqs[string.match(h, '^%S+ (%d+) ')] then
        -- No group yet: no node has read the stream.
        local pending = redis.pcall('XPENDING', key, ARGV[1], e[1], e[1], 1)
        if pending.err or #pending == 0 then n = n + redis.call('XDEL', key, e[1]) end
      end
    end
    if #entries > 0 then
      last[k] = entries[#entries][1]
      from = '(' .. last[k]
    end
    if #entries < 32 then break end
  end
end
return {n, cut, last}
`)

// unansweredAdmission is a round trip of admissions that got no answer:
// the calls it carried failed, but Redis may have run it, or may run it
// yet once it resumes (a Redis held up by a slow disk or a long script
// runs then the commands waiting in its sockets, those of clients gone
// too), and put their items on the stream, where a node would run them
// for nobody. Once Redis answers again, the front end looks for the items
// by the header it writes (see withdrawUnansweredScript) and withdraws
// them, at each of the next unansweredLooks checks that find Redis up: it
// may run the admission just after another client's command. Each look
// goes on where the last stopped, so that all the entries since the
// admission are looked at once, however many other clients added before
// its items.
type unansweredAdmission struct {
	streams []string   // the shared stream, and the node streams it may have used
	from    []streamID // per stream, the first id to look at
	seqs    []any      // the calls' numbers, in decimal
	looks   int        // the looks that read every stream to its end
	tries   int        // all looks, those cut short included
}

// unansweredLooks is how many checks that find Redis up look for the items
// of an admission that got no answer, to the streams' end; unansweredTries
// bounds its looks, those cut short included; unansweredMax bounds the
// admissions remembered, the last kept.
const (
	unansweredLooks = 4
	unansweredTries = 64
	unansweredMax   = 64
)

// NewFrontEnd returns a front end for cfg, not yet running. Its Redis
// client is made already: Close releases it, also when Start was never
// called.
func NewFrontEnd(cfg FrontEndConfig) (*FrontEnd, error) {
	base, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Config = base
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = 100 * 64
	}
	if cfg.MaxItems == 0 {
		cfg.MaxItems = 4096
	}
	if cfg.MaxItemBytes == 0 {
		cfg.MaxItemBytes = 64 << 20
	}
	if cfg.Outage == 0 {
		cfg.Outage = time.Second
	}
	if err := checkNegatives(intSetting("MaxBacklog", cfg.MaxBacklog), intSetting("MaxItems", cfg.MaxItems), intSetting("MaxItemBytes", cfg.MaxItemBytes), durationSetting("Outage", cfg.Outage)); err != nil {
		return nil, err
	}
	rdb, where, err := connect(cfg.Config, 32)
	if err != nil {
		return nil, err
	}
	id := randomHex(frontIDBytes) // see frontID
	k := newKeys(cfg.Prefix)
	return &FrontEnd{
		cfg: cfg, rdb: rdb, where: where, k: k, id: id, replyKey: k.replyPrefix + id,
		clock:       &clock{skew: cfg.skew, log: cfg.Logger},
		calls:       map[uint64]*call{},
		submits:     make(chan *call, 1024),
		idle:        make(chan struct{}, 1),
		writerDone:  make(chan struct{}),
		firstLook:   make(chan struct{}),
		closing:     make(chan struct{}),
		closeDone:   make(chan struct{}),
		readMoved:   make(chan struct{}),
		toWithdraw:  map[string][]string{},
		withdrawQ:   map[string][]string{},
		withdrawNow: make(chan struct{}, 1),
		roomLapse:   roomKeep,
		born:        time.Now(),
	}, nil
}

// ID is the front end's name on Redis: its replies stream is
// PREFIX:reply:ID.
func (fe *FrontEnd) ID() string { return fe.id }

// Start runs the front end: it checks Redis once, within ctx, then
// returns, the front end reading its answers and writing requests in the
// background until Close, whatever the check found: it keeps trying, and
// is not Ready meanwhile. The check's errors, as errors.Is tells them:
//   - supervisor.ErrUnavailable: Redis did not serve (wrapping
//     context.DeadlineExceeded only if ctx's deadline passed).
//   - ErrRefused or ErrUntrusted (see Refusal): Redis refused the client,
//     which its owner may take for a mistake in the URL, as streamer serve
//     does, and Close it.
//   - ErrPermission, with supervisor.ErrUnavailable: Redis refuses the
//     client's user a command or key of the check or of the admissions;
//     the front end serves once an operator grants it.
//   - ErrUnsupportedRedis, or ErrModelMismatch: the nodes under the prefix
//     serve another model, or run another version of streamer (then it is
//     ErrVersionMismatch too; until they agree, calls fail with an error that
//     is both ErrModelMismatch and supervisor.ErrUnavailable).
//   - supervisor.ErrStarted for a second Start, and
//     supervisor.ErrShuttingDown for one after Close, or one that a
//     Close overtook during its check (the front end is closed then,
//     whatever the check found; that Close waits for Start to end).
func (fe *FrontEnd) Start(ctx context.Context) error {
	if err := fe.begin(); err != nil {
		return err
	}
	fe.stalls.look(time.Now())
	go func() {
		defer fe.done.Done()
		fe.stalls.run(fe.closing)
	}()
	err := fe.check(ctx)
	if err == nil {
		err = fe.modelErr // no other check has run yet
	}
	if why := fe.admitRefused.Load(); err == nil && why != nil {
		err = admissionRefused(fe.where, *why) // logged by the check
	}
	close(fe.firstLook)
	go fe.writeLoop()
	go fe.checkLoop()
	go fe.readLoop()
	go fe.withdrawLoop()
	if fe.closed.Load() {
		return fmt.Errorf("broker: front end closed as it started: %w", supervisor.ErrShuttingDown)
	}
	return startError(ctx, err, fe.where)
}

// begin marks the front end started, and counts the goroutines Start
// runs, unless it was closed or started already: a Close from then on
// waits for each of them, those that Start has yet to run too.
func (fe *FrontEnd) begin() error {
	fe.lifeMu.Lock()
	defer fe.lifeMu.Unlock()
	switch {
	case fe.closed.Load():
		return fmt.Errorf("broker: start of a front end closed: %w", supervisor.ErrShuttingDown)
	case !fe.started.CompareAndSwap(false, true):
		return fmt.Errorf("broker: front end: %w", supervisor.ErrStarted)
	}
	fe.done.Add(3) // the stall watch, the writer and the checks
	fe.reader.Add(1)
	fe.withdrawing.Add(1)
	return nil
}

// Ready reports whether a request can be served now: Redis answers, lets
// the front end read its answers and admit requests, has not refused one
// of its writes for want of memory within the last Outage, nor failed
// its admissions since they last went through, and some node has been
// heard from.
func (fe *FrontEnd) Ready() bool {
	return fe.up.Load() && fe.nodes.Load() > 0 && fe.mismatch.Load() == nil && fe.readRefused.Load() == nil &&
		fe.admitRefused.Load() == nil && fe.admitFailing.Load() == nil && fe.fullError() == nil && !fe.closed.Load()
}

// Full reports whether the shared backlog was seen full within fullHold,
// for a request of one item or no larger than most (the room kept for
// a request that waits for it counted as taken, as a local server counts
// it), so that a request can be refused before its body is read. It is
// false while the front end is not ready: a request is then refused for
// that (ErrUnavailable), and the backlog seen last says nothing of when
// to come back. It is false, too, while most of the front end's requests
// are larger than most, or it has sent none yet (see carriesLarge).
func (fe *FrontEnd) Full() bool { return fe.fullBy(fe.sinceBorn(), fe.fullSeen.Load()) }

// fullHold is how long a front end takes the shared backlog for full
// after it last saw it so, by a check or an admission refused. The nodes
// free places as they answer, and other front ends' admissions fill
// them, all unseen: a backlog taken for full until the next check (a
// quarter second) refused every request unread while the nodes emptied
// it and then idled, and under a flood of retries served a tenth of what
// they could. Past the hold, requests are read and sent again, and the
// first refused holds it anew: a few requests read every fullHold, as a
// probe of the room.
const fullHold = 5 * time.Millisecond

// fullBy is Full at now, the backlog seen full at seen (see fullSeen).
func (fe *FrontEnd) fullBy(now, seen int64) bool {
	return seen != 0 && now-seen < int64(fullHold) && fe.Ready() && !fe.carriesLarge()
}

// sinceBorn is the time since the front end was made, in nanoseconds:
// a clock that a step of the wall clock does not move.
func (fe *FrontEnd) sinceBorn() int64 { return int64(time.Since(fe.born)) }

// seenFull notes that the backlog was seen full now (see Full).
func (fe *FrontEnd) seenFull() { fe.fullSeen.Store(fe.sinceBorn() + 1) }

// largerThanMost says whether a request of n items is larger than most
// of those every front end admitted of late, as the last check read
// their mean: twice it, and two items at least (see admitScript).
func (fe *FrontEnd) largerThanMost(n int) bool {
	return 1024*int64(n) >= max(2*1024, 2*fe.sharedMean.Load())
}

// carriesLarge says whether most of the requests this front end sent of
// late were larger than most of those every front end admitted (see
// admitScript), or whether it has sent none yet: they would have room
// kept for them, or their size is unknown, and the backlog is not full
// for them. A front end that its clients send only large requests would
// otherwise refuse them unread, for as long as other front ends' small
// ones keep the backlog full; and one started while it is full, every
// request, never learning their size. A front end whose large requests
// are few refuses its small ones unread, and reads its large ones all
// the same, by their announced length (see the HTTP API's refusedFull).
func (fe *FrontEnd) carriesLarge() bool {
	return !fe.sentAny.Load() || fe.largeShare.Load() >= 1024/2
}

// noteSent notes that a request of n items was sent to be admitted, for
// the share of this front end's requests of late that are larger than
// most (see carriesLarge): a sixteenth of the way to 1 or 0, one step at
// least. Called by the writer.
func (fe *FrontEnd) noteSent(n int) {
	x := int64(0)
	if fe.largerThanMost(n) {
		x = 1024
	}
	if !fe.sentAny.Swap(true) {
		fe.largeShare.Store(x)
		return
	}
	m := fe.largeShare.Load()
	d := x - m
	step := d / 16
	if step == 0 && d != 0 {
		step = d / max(d, -d)
	}
	fe.largeShare.Store(m + step)
}

// Slots is empty: a front end has no workers of its own.
func (fe *FrontEnd) Slots() []supervisor.SlotStatus { return []supervisor.SlotStatus{} }

// CountRejected counts as rejected n items refused before they reached
// PredictRequest (see supervisor.Streamer.CountRejected).
func (fe *FrontEnd) CountRejected(n int) { fe.stats.rejected.Add(uint64(max(n, 0))) }

// Stats counts the front end's items; Queued is those waiting for answers.
func (fe *FrontEnd) Stats() supervisor.Stats {
	fe.mu.Lock()
	held := fe.held
	fe.mu.Unlock()
	// Sums of counters that each count an item one way, so that none
	// reads backwards when read between two additions.
	expired, poisoned, canceled := fe.stats.expired.Load(), fe.stats.poisoned.Load(), fe.stats.canceled.Load()
	failed := fe.stats.failed.Load() + expired + poisoned + canceled
	return supervisor.Stats{
		Answered:  fe.stats.ok.Load() + failed,
		Failed:    failed,
		Expired:   expired,
		Poisoned:  poisoned,
		Canceled:  canceled,
		Submitted: fe.stats.submitted.Load(),
		Rejected:  fe.stats.rejected.Load(),
		Queued:    held,
		RoomKept:  int(fe.room.Load()),
		// A front end sees its items' whole time alone; the nodes see how
		// long they waited there and ran.
		Latency: supervisor.LatencyStats{EndToEnd: fe.endToEnd.Snapshot()},
	}
}

// Duplicates counts the answers dropped: those to an item answered already
// (a node's items claimed by another that answered them too), and those to
// requests that no longer wait (canceled, past their deadline, or failed).
func (fe *FrontEnd) Duplicates() uint64 { return fe.stats.duplicates.Load() }

// FrontEndStats is what a front end knows of Redis, as of its last check
// (every quarter second).
type FrontEndStats struct {
	// Checked says the front end has looked at Redis: false before Start
	// has (on a node, while its workers start), when RedisUp and Nodes
	// say nothing yet.
	Checked bool `json:"checked"`
	// RedisUp says Redis served the last check: it answered, and took
	// its writes (false while it refuses them, for want of memory or of
	// replicas).
	RedisUp bool `json:"redis_up"`
	// Nodes is how many nodes were heard from within the last 3 seconds
	// (for 3 seconds after an outage, those heard from before it); 0
	// while Redis does not serve the front end, which hears from none.
	Nodes int64 `json:"nodes"`
	// Backlog is the items on the shared stream, waiting or running, from
	// every front end, as the last check Redis served found it;
	// MaxBacklog its bound.
	Backlog    int64 `json:"backlog"`
	MaxBacklog int   `json:"max_backlog"`
	// RoomKept is the room in the backlog kept for a request refused for
	// want of it, in items, as the last check found it: 0 when none.
	RoomKept int64 `json:"room_kept"`
	// Duplicates counts the answers dropped: second answers to an item,
	// after a claim, and answers to requests that no longer wait for them
	// (canceled, past their deadline, or failed by an outage).
	Duplicates uint64 `json:"duplicates"`
	// Withdrawn counts the items deleted from the stream before any node
	// read them, as their request was given up: canceled, past its
	// deadline, or failed. (Those a node held are deleted too from Redis
	// 7.0 on, and not counted here: see NodeStats.Withdrawn.)
	Withdrawn uint64 `json:"withdrawn"`
	// Lost counts the items Redis lost while it kept its other data (a
	// failover to a replica that lacked them, a restart that lost its last
	// writes); their requests failed.
	Lost uint64 `json:"lost"`
	// ClockOffsetMs is how far Redis's clock is ahead of this machine's
	// (negative: behind), in milliseconds, as last measured. Deadlines and
	// heartbeats go on Redis's clock, so an offset does no harm here; it
	// says that this machine's clock is not in sync.
	ClockOffsetMs int64 `json:"clock_offset_ms"`
	// ModelVersions is how many versions of the model (see
	// ModelID.Version) the nodes heard from as Nodes counts them run:
	// more than one while callers get the answers of either (a rolling
	// upgrade, until it is done), logged as it begins and ends. Nodes of
	// no version are not counted.
	ModelVersions int64 `json:"model_versions"`
	// OtherVersion is set while the front end's own version is not empty
	// and none of the nodes' (logged as it begins): it names its model
	// while they answer with theirs.
	OtherVersion bool `json:"other_version,omitempty"`
}

// Metrics are the front end's counters of its traffic through Redis (see
// Collector), for the HTTP layer's /metrics: Collector(fe, nil). With a
// node in the same process, register Collector(fe, node) instead, not
// both.
func (fe *FrontEnd) Metrics() prometheus.Collector { return Collector(fe, nil) }

// FrontEndStats returns what the front end knows of Redis.
func (fe *FrontEnd) FrontEndStats() FrontEndStats {
	up, nodes, versions := fe.up.Load(), fe.nodes.Load(), fe.versions.count.Load()
	if !up {
		nodes, versions = 0, 0
	}
	return FrontEndStats{
		Checked: fe.looked(), RedisUp: up, Nodes: nodes, Backlog: fe.backlog.Load(), RoomKept: fe.room.Load(),
		MaxBacklog: fe.cfg.MaxBacklog, Duplicates: fe.stats.duplicates.Load(), Withdrawn: fe.stats.withdrawn.Load(),
		Lost: fe.stats.lost.Load(), ClockOffsetMs: time.Duration(fe.clock.offset.Load()).Milliseconds(),
		ModelVersions: versions, OtherVersion: up && fe.otherVersion.Load(),
	}
}

// looked reports whether Start's look at Redis has ended.
func (fe *FrontEnd) looked() bool {
	select {
	case <-fe.firstLook:
		return true
	default:
		return false
	}
}

// BrokerStats is FrontEndStats, for the HTTP layer's /v1/stats.
func (fe *FrontEnd) BrokerStats() any { return map[string]any{"front_end": fe.FrontEndStats()} }

// Predict runs items as one request. See PredictRequest.
func (fe *FrontEnd) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	return fe.PredictRequest(ctx, supervisor.Request{Items: items})
}

// PredictRequest puts req's items on the shared stream and waits for their
// answers, with the errors of supervisor.Streamer.PredictRequest: it fails
// at once with ErrUnavailable while Redis is unreachable or no node is
// alive, with ErrOverloaded when the shared backlog is full, with
// ErrTooLarge when the request has more items than MaxItems or MaxBacklog,
// and with ErrDeadline (or ErrCanceled) when the request's deadline passes
// (or ctx ends) first, also while Redis is slow to admit it. An
// item's failure comes back as an *supervisor.ItemError for the lowest
// failed index, with the other outputs; when every item of the request
// failed with one error, of one kind and text (their batch failed as a
// whole), its Every is set, as a Streamer's is. A request that fails as
// a whole once admitted (by Close, or an outage) comes back alike: with
// the outputs answered before, and an ItemError for its first item left
// unanswered, wrapping the failure.
func (fe *FrontEnd) PredictRequest(ctx context.Context, req supervisor.Request) ([][]byte, error) {
	n := len(req.Items)
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: no items", supervisor.ErrBadRequest)
	case n > fe.cfg.MaxItems:
		fe.stats.rejected.Add(uint64(n))
		return nil, fmt.Errorf("%w: %d items, the limit per request is %d", supervisor.ErrTooLarge, n, fe.cfg.MaxItems)
	case n > fe.cfg.MaxBacklog:
		// Refused even on an empty stream: no wait would help.
		fe.stats.rejected.Add(uint64(n))
		return nil, fmt.Errorf("%w: %d items, more than the shared backlog's limit of %d", supervisor.ErrTooLarge, n, fe.cfg.MaxBacklog)
	case req.Keys != nil && len(req.Keys) != n:
		fe.stats.rejected.Add(uint64(n))
		return nil, fmt.Errorf("%w: %d keys for %d items", supervisor.ErrBadRequest, len(req.Keys), n)
	}
	for i, item := range req.Items {
		if len(item) > fe.cfg.MaxItemBytes {
			// No node could run it, and its request's other items
			// would run for nothing.
			fe.stats.rejected.Add(uint64(n))
			return nil, &supervisor.ItemError{Index: i, Err: fmt.Errorf("%w: the item is %d bytes encoded; the most one batch may carry is %d", supervisor.ErrTooLarge, len(item), fe.cfg.MaxItemBytes)}
		}
	}
	if err := fe.awaitFirstLook(ctx); err != nil {
		fe.countUnsent(uint64(n), err)
		return nil, err
	}
	if err := fe.unavailable(); err != nil {
		fe.stats.rejected.Add(uint64(n))
		return nil, err
	}
	deadline := req.Deadline
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		err := fmt.Errorf("%w: before the request was queued", supervisor.ErrDeadline)
		fe.countUnsent(uint64(n), err)
		return nil, err
	}
	if ctx.Err() != nil {
		// Its caller has gone: nothing goes to Redis for it, as a
		// Streamer queues nothing for it.
		err := givenUp(ctx, "before the request was queued")
		fe.countUnsent(uint64(n), err)
		return nil, err
	}
	c := &call{
		items: req.Items, keys: req.Keys, deadline: deadline,
		admitted: make(chan error, 1), sent: time.Now(),
		outputs: make([][]byte, n), got: make([]bool, n), left: n,
		over: make(chan struct{}),
	}
	fe.mu.Lock()
	fe.seq++
	c.seq = fe.seq
	fe.calls[c.seq] = c
	fe.held += n
	fe.mu.Unlock()

	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case fe.submits <- c:
	case <-fe.closing:
		return nil, fe.reject(c, supervisor.ErrShuttingDown)
	case <-c.over: // failed meanwhile (an outage)
		fe.mu.Lock()
		fe.decideLocked(c, false) // counted now: the writer never took it
		fe.mu.Unlock()
		return nil, c.failure
	case <-timeout:
		return nil, fe.reject(c, fmt.Errorf("%w: before the request was queued", supervisor.ErrDeadline))
	case <-ctx.Done():
		return nil, fe.reject(c, givenUp(ctx, "before the request was queued"))
	}
	if err := fe.verdict(ctx, c, timeout); err != nil {
		return nil, err
	}
	return fe.await(ctx, c, timeout)
}

// verdict waits for the stream's verdict on c (the writer gives one for
// every call it takes, before it stops), or until the caller gives up, or
// c fails (an outage while Redis hangs on its admission): a slow Redis
// does not keep a request past its deadline, nor past the outage. On an
// error, c is forgotten and its items counted as settled (see settleLocked)
// unless they were already; a call given up is withdrawn from the stream,
// if admitted, by whichever of this and the writer (tell) comes second.
func (fe *FrontEnd) verdict(ctx context.Context, c *call, timeout <-chan time.Time) error {
	var err error
	select {
	case err = <-c.admitted:
	case <-c.over:
		err = c.failure // set before over was closed; nil when answered
	case <-fe.writerDone:
		select {
		case err = <-c.admitted:
		default:
			err = supervisor.ErrShuttingDown
		}
	case <-timeout:
		err = fmt.Errorf("%w: while redis admitted the request", supervisor.ErrDeadline)
	case <-ctx.Done():
		err = givenUp(ctx, "while redis admitted the request")
	}
	if err == nil {
		select {
		case <-c.over:
			// Failed as its verdict came (both were ready): a failure
			// alone, whichever the select took. Nil when answered.
			err = c.failure
		default:
		}
		if err == nil {
			return nil
		}
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	c.gaveUp = true
	if fe.writerStopped {
		fe.decideLocked(c, false) // no verdict will come
	}
	if fe.calls[c.seq] == c {
		fe.settleLocked(c, err)
		fe.forgetLocked(c)
	}
	if c.ids != nil {
		fe.withdraw(c.stream, c.ids)
	}
	return err
}

// givenUp is the error of a call whose ctx ended, when.
func givenUp(ctx context.Context, when string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s, by the caller's deadline", supervisor.ErrDeadline, when)
	}
	return fmt.Errorf("%w: the caller left %s", supervisor.ErrCanceled, when)
}

// awaitFirstLook waits, for a request that comes as the front end starts
// (a server listens before it calls Start, which looks at Redis), until
// Start's look at Redis has ended: a few milliseconds, a second at most.
// Without it, the request would be refused, blaming Redis, which was never
// asked, or the front end, about to start.
func (fe *FrontEnd) awaitFirstLook(ctx context.Context) error {
	select {
	case <-fe.firstLook:
		return nil
	default:
	}
	if fe.closed.Load() {
		return supervisor.ErrShuttingDown
	}
	t := time.NewTimer(firstLookWait)
	defer t.Stop()
	select {
	case <-fe.firstLook:
		return nil
	case <-t.C:
		if !fe.started.Load() {
			return unavailablef("the front end is not started")
		}
		return unavailablef("the front end is starting: its first look at redis at %s has taken over %s", fe.where, firstLookWait)
	case <-ctx.Done():
		return givenUp(ctx, "while the front end started")
	}
}

// firstLookWait bounds the wait for Start's look at Redis: a check and
// its retry after a stall (see check).
const firstLookWait = 3 * checkTimeout

// NotReady says why the front end is not ready (see Ready), or nil.
func (fe *FrontEnd) NotReady() error {
	switch {
	case fe.Ready():
		return nil
	case !fe.started.Load() && !fe.closed.Load():
		return unavailablef("the front end is not started")
	}
	if err := fe.unavailable(); err != nil {
		return err
	}
	if fault := fe.admitFailing.Load(); fault != nil {
		// New requests are sent all the same: those whose admission
		// does not meet the fault (a request not routed to a node, when
		// the list of the nodes' streams is of another type) go through.
		return admissionFailing(fe.where, fault.msg)
	}
	return nil
}

// unavailable says why a request cannot be served now, or nil: the front
// end's own refusals by Redis (of its reads of answers, of its
// admissions) before the want of a node, as no node would serve it either
// (while the front end may not admit, the nodes' heartbeats are most
// often refused too: "no node is alive" hid the cause).
func (fe *FrontEnd) unavailable() error { return fe.unavailableFor(false) }

// waitingFailure is why the calls waiting for answers fail, when they do
// (see failWhenGone): a refusal of the front end's admissions, which they
// passed, comes after the want of a node. A Close under way is no cause:
// the calls it waits for that an outage fails are told the outage, as
// they would be without it, and those it fails itself ErrShuttingDown.
func (fe *FrontEnd) waitingFailure() error { return fe.unavailableFor(true) }

// unavailableFor is unavailable, or waitingFailure when waiting.
func (fe *FrontEnd) unavailableFor(waiting bool) error {
	// The nodes before the model, the reverse of the check's writes: a
	// node that has come is seen with its model (see checkOnce).
	nodes, leaving := fe.nodes.Load(), fe.leaving.Load()
	mismatch := fe.mismatch.Load()
	refused := fe.readRefused.Load()
	admitRefused := fe.admitRefused.Load()
	full := fe.fullError()
	switch {
	case fe.closed.Load() && !waiting:
		return supervisor.ErrShuttingDown
	case full != nil:
		// Before the rest: its checks fail and pass by turns as its
		// memory goes up and down, and the nodes' heartbeats are refused
		// (no node seems alive), but all of that is this.
		return full
	case !fe.up.Load():
		msg := "not checked yet"
		if p := fe.lastErr.Load(); p != nil {
			msg = *p
		}
		return unavailablef("redis at %s does not serve: %s", fe.where, msg)
	case mismatch != nil:
		return &unavailableError{msg: (*mismatch).Error(), cause: *mismatch}
	case refused != nil:
		return readsRefused(fe.where, fe.replyKey, *refused)
	case admitRefused != nil && !waiting:
		return admissionRefused(fe.where, *admitRefused)
	case nodes == 0 && leaving > 0:
		return unavailablef("no node takes requests on redis at %s, under the key prefix %q: the %d heard from are leaving, or none of their workers can run (their logs say which)", fe.where, fe.cfg.Prefix, leaving)
	case nodes == 0:
		return unavailablef("no node is alive on redis at %s, under the key prefix %q: none has beaten within %s, or the last one left (does a node run on this redis and database, under this prefix? its log says why it cannot say it is alive)", fe.where, fe.cfg.Prefix, nodeSilence)
	case admitRefused != nil:
		// After the nodes for the calls admitted before, failed once no
		// node is left: they are told that.
		return admissionRefused(fe.where, *admitRefused)
	}
	return nil
}

// readsRefused is the error of a request while Redis at where refuses the
// front end's reads of its answers on key for msg, worded by its cause
// (see refusal).
func readsRefused(where, key, msg string) error {
	switch {
	case authRefusal(msg):
		return unavailablef("redis at %s refuses this front end's authentication, so no request could be answered: %s (the password or user changed on Redis, or the user is gone?)", where, msg)
	case strings.HasPrefix(msg, "NOPERM"):
		return permissionf("redis at %s refuses this front end's reads of its answers on %s, so no request could be answered: %s (its user lacks a permission)", where, key, msg)
	}
	return unavailablef("redis at %s fails this front end's reads of its answers on %s, so no request could be answered: %s", where, key, msg)
}

// authRefusal says whether msg, an error Redis answered, refuses the
// client's authentication: its password or user changed, or is gone. A
// connection not authenticated that sends a long command (an admission)
// is told of a protocol error instead of NOAUTH.
func authRefusal(msg string) bool {
	for _, prefix := range []string{"NOAUTH", "WRONGPASS", "ERR AUTH", "ERR Protocol error: unauthenticated"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// authError says whether err is Redis's refusal of the client's
// authentication (see authRefusal).
func authError(err error) bool {
	var answered redis.Error
	return errors.As(err, &answered) && authRefusal(answered.Error())
}

// await waits for c's answers, until timeout fires or ctx ends.
func (fe *FrontEnd) await(ctx context.Context, c *call, timeout <-chan time.Time) ([][]byte, error) {
	var err error
	select {
	case <-c.over:
	case <-timeout:
		err = fmt.Errorf("%w: no answer by the request's deadline", supervisor.ErrDeadline)
	case <-ctx.Done():
		err = givenUp(ctx, "waiting for the answers")
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if err != nil && c.left > 0 && c.failure == nil {
		fe.forgetLocked(c)
		var open []string
		for i, id := range c.ids {
			if !c.got[i] {
				open = append(open, id)
			}
		}
		fe.withdraw(c.stream, open)
		fe.settleLocked(c, err)
		return nil, err
	}
	if c.failure != nil {
		return c.outputs, failedWhole(c)
	}
	if err := supervisor.FirstItemError(alike(c.errs)); err != nil {
		return c.outputs, err
	}
	return c.outputs, nil
}

// failedWhole is the error of c, admitted and then failed as a whole with
// c.failure (by Close, or an outage): an *supervisor.ItemError for its
// first item that failed, those left unanswered failed with c.failure,
// which its outputs come with, as a Streamer answers the items a Shutdown
// leaves pending. It requires that fe.mu is held.
func failedWhole(c *call) error {
	errs := make([]error, len(c.got))
	copy(errs, alike(c.errs))
	for i, got := range c.got {
		if !got {
			errs[i] = c.failure
		}
	}
	return supervisor.FirstItemError(errs)
}

// reject forgets c, given up with err before the writer took it, counts
// its items as err says (see countUnsent), unless it failed meanwhile
// (counted then), and returns err.
func (fe *FrontEnd) reject(c *call, err error) error {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.decideLocked(c, false) // the writer never took it
	if fe.calls[c.seq] == c {
		fe.settleLocked(c, err)
		fe.forgetLocked(c)
	}
	return err
}

// settleLocked counts the items of c, which ends with err without their
// answers, as a local server counts items alike: those of a call never
// admitted (refused, or never sent) as rejected, or as its deadline or its
// caller's leaving ended it (see countUnsent); those admitted and left
// unanswered as answered with an error: expired when the deadline ended
// it, canceled when its caller left. Every submitted item is so counted
// as answered once, as on a local server.
// A call that ends before the writer's verdict (its caller gave up while
// Redis admitted it, an outage failed it) is counted when the verdict
// comes (see decideLocked): admitted, its items may run, as submitted
// items do. It requires that fe.mu is held.
func (fe *FrontEnd) settleLocked(c *call, err error) {
	if !c.decided {
		c.endedEarly, c.endErr = true, err
		return
	}
	if !c.counted {
		fe.countUnsent(uint64(len(c.items)), err)
		return
	}
	fe.countFailed(err, uint64(c.left))
}

// countUnsent counts n items that Redis never took, their request ended
// with err: rejected, unless its deadline passed or its caller left first,
// when they count as the request does, expired or canceled (and submitted,
// so that Submitted still equals Answered once all is answered), as a
// Streamer counts them.
func (fe *FrontEnd) countUnsent(n uint64, err error) {
	if !errors.Is(err, supervisor.ErrDeadline) && !errors.Is(err, supervisor.ErrCanceled) {
		fe.stats.rejected.Add(n)
		return
	}
	fe.stats.submitted.Add(n) // first: Stats reads the outcomes before it
	fe.countFailed(err, n)
}

// countFailed counts n items answered with err, by its kind.
func (fe *FrontEnd) countFailed(err error, n uint64) {
	switch {
	case errors.Is(err, supervisor.ErrDeadline):
		fe.stats.expired.Add(n)
	case errors.Is(err, supervisor.ErrPoison):
		fe.stats.poisoned.Add(n)
	case errors.Is(err, supervisor.ErrCanceled):
		fe.stats.canceled.Add(n)
	default:
		fe.stats.failed.Add(n)
	}
}

// decideLocked records the writer's verdict on c, admitted or not (or
// that none will come), once: admitted, its items count as submitted. A
// call that ended before it is counted now (see settleLocked). It
// requires that fe.mu is held.
func (fe *FrontEnd) decideLocked(c *call, admitted bool) {
	if c.decided {
		return
	}
	c.decided = true
	if admitted {
		c.counted = true
		fe.stats.submitted.Add(uint64(len(c.items)))
	}
	if c.endedEarly {
		fe.settleLocked(c, c.endErr)
	}
}

// answeredLocked notes that an answer came for c: Redis admitted it,
// whatever verdict the writer has read. A node may answer before the
// writer reads the verdict, and a verdict lost with its connection is
// taken for a refusal (see tell) while Redis may have run the admission.
// Its items count as submitted before any of them counts as answered
// (Stats reads Answered first). It requires that fe.mu is held.
func (fe *FrontEnd) answeredLocked(c *call) {
	switch {
	case !c.decided:
		fe.decideLocked(c, true)
	case !c.counted:
		// Waiting still, so not counted as rejected yet (see
		// settleLocked): from now on it counts as admitted.
		c.counted = true
		fe.stats.submitted.Add(uint64(len(c.items)))
	}
}

// forgetLocked drops c from the calls waiting; answers for it that come
// later are dropped. It requires that fe.mu is held.
func (fe *FrontEnd) forgetLocked(c *call) {
	if fe.calls[c.seq] == c {
		delete(fe.calls, c.seq)
		fe.held -= c.left
		fe.back.settled(c)
		fe.noteIdleLocked()
	}
}

// noteIdleLocked tells a Close waiting for the calls that none is left. It
// requires that fe.mu is held.
func (fe *FrontEnd) noteIdleLocked() {
	if len(fe.calls) == 0 && fe.closed.Load() {
		select {
		case fe.idle <- struct{}{}:
		default:
		}
	}
}

// failAllLocked ends every waiting call with err. It requires that fe.mu is
// held.
func (fe *FrontEnd) failAllLocked(err error) {
	for _, c := range fe.calls {
		fe.failLocked(c, err)
	}
}

// failLocked ends c, waiting, with err. It requires that fe.mu is held.
func (fe *FrontEnd) failLocked(c *call, err error) {
	if fe.calls[c.seq] != c {
		return // ended already
	}
	fe.settleLocked(c, err)
	delete(fe.calls, c.seq)
	fe.held -= c.left
	fe.back.settled(c)
	c.failure = err
	close(c.over)
	fe.noteIdleLocked()
}

// writeLoop puts the submitted requests on the stream, many in one round
// trip: while one admission is out, the next requests gather. Callers just
// answered who come back with their next request (a closed loop) are
// waited for, briefly, so that they go on the stream together: a node
// blocked on it would otherwise wake for the first alone and start a
// batch for it, and the others would need another worker.
func (fe *FrontEnd) writeLoop() {
	defer fe.done.Done()
	defer close(fe.writerDone)
	var batch []*call
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	for {
		// Cleared, not only cut: the calls of the last round would stay
		// reachable, with their items and answers, until newer ones took
		// their places.
		clear(batch)
		batch = batch[:0]
		select {
		case c := <-fe.submits:
			batch = append(batch, c)
		case <-fe.closing:
			fe.stopWriting()
			return
		}
	gather:
		for len(batch) < 256 {
			select {
			case c := <-fe.submits:
				batch = append(batch, c)
			default:
				break gather
			}
		}
		fe.back.cameBack(firstTries(batch), time.Now())
	linger:
		for len(batch) < 256 {
			until, ok := fe.back.due(time.Now())
			if !ok {
				break
			}
			wait.Reset(time.Until(until))
			select {
			case c := <-fe.submits:
				batch = append(batch, c)
				fe.back.cameBack(firstTries(batch[len(batch)-1:]), time.Now())
			case <-wait.C:
				break linger
			case <-fe.closing:
				break linger
			}
		}
		wait.Stop()
		fe.admit(batch)
	}
}

// firstTries is calls but those that come back for the room kept for them
// (see resubmit): they came, and were counted, at their first try.
func firstTries(calls []*call) []*call {
	if !slices.ContainsFunc(calls, func(c *call) bool { return c.requeued }) {
		return calls
	}
	return slices.DeleteFunc(slices.Clone(calls), func(c *call) bool { return c.requeued })
}

// stopWriting notes that the writer gives no more verdicts, and decides
// those of the calls left unread on submits: none admitted. Their callers
// learn it from writerDone (see verdict).
func (fe *FrontEnd) stopWriting() {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.writerStopped = true
	for {
		select {
		case c := <-fe.submits:
			fe.decideLocked(c, false)
		default:
			return
		}
	}
}

// comebacks follows the callers a front end answered, who in a closed loop
// come back with their next request: the answers of the last
// comebackHorizon, each with the callers not yet counted back; how soon
// after their answer callers come (a decaying histogram of the delays);
// and how long a request is out, from its submission to its answer (a
// running mean). Requests that arrive are counted against the oldest
// answers, and routed back to the node that gave that answer: a node's
// callers return to it, together, as they do to a single server. Through
// the shared stream alone they went to whichever node read first, which
// had not expected them, while the node that expected them waited in vain.
// A node holding more than its share of the callers gives some of them to
// another (see balanceLocked). The callers of a node that answered with no
// idle worker (busy) are not routed back, but they are waited for like the
// others, so that they too go on the stream together. In an open loop,
// counting requests against answers matches strangers to answers, which
// costs a wait only while more were answered than came since, and sends
// them to a node that just answered, and so has a worker free.
type comebacks struct {
	mu      sync.Mutex
	answers []comeback // oldest first
	// delays[i] weighs the callers who came back between i and i+1
	// comebackBucket after their answer; weight their sum.
	delays [comebackHorizon / comebackBucket]float64
	weight float64
	// wait is the delay by which comebackQuantile of the callers are back,
	// as of the last count.
	wait time.Duration
	// flight is the mean time from a request's submission to its answer.
	flight time.Duration
	// The nodes that answered lately: their workers, when they last did,
	// and the calls routed to them that have not ended.
	nodes map[string]*nodeShare
}

// answerer is the node that answered, and whether it was busy: it had no
// idle worker as it answered, and items waited for its workers.
type answerer struct {
	node string
	busy bool
}

type comeback struct {
	at   time.Time
	left int
	node string // the node that answered them; "" when it was busy
	// moveTo takes the first moveN of them instead of node (see
	// balanceLocked).
	moveTo string
	moveN  int
}

// nodeShare is what a front end knows of a node that answered it.
type nodeShare struct {
	workers  int
	answered time.Time
	inFlight int     // calls routed to it that have not ended
	owned    float64 // the callers it holds: a running mean, over its last 16 answers or so
}

// nodeForgotten is how long after its last answer a node no longer counts
// in the balance of callers between nodes.
const nodeForgotten = time.Second

// settled notes that c ended (answered, refused, given up or failed): it
// no longer counts for the node it was routed to.
func (b *comebacks) settled(c *call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ns := b.nodes[c.owner]; ns != nil && ns.inFlight > 0 {
		ns.inFlight--
	}
	c.owner, c.ended = "", true
}

// balanceLocked moves part of the callers node just answered (the last
// answer) to the node furthest below its share, when node holds more than
// its share by a margin. A node's share of this front end's callers (those
// running there and those answered and expected back) is its share of the
// workers of the nodes that answered lately: routed back to the node that
// answered them, callers stay where chance first put them, and a node with
// more than its share runs larger batches, later, while another's workers
// idle. Moving part of one answer's callers keeps the rest together, and
// the moved ones arrive together. It requires that b.mu is held.
func (b *comebacks) balanceLocked(now time.Time) {
	last := &b.answers[len(b.answers)-1]
	owned := map[string]float64{}
	for _, a := range b.answers {
		owned[a.node] += float64(a.left)
	}
	var callers, workers float64
	for name, ns := range b.nodes {
		if now.Sub(ns.answered) > nodeForgotten {
			delete(b.nodes, name)
			continue
		}
		// Smoothed: a count taken while callers are between an answer
		// and their next request swings by a batch's worth.
		ns.owned += (owned[name] + float64(ns.inFlight) - ns.owned) / float64(16*len(b.nodes))
		callers += ns.owned
		workers += float64(ns.workers)
	}
	from := b.nodes[last.node]
	if from == nil || len(b.nodes) < 2 || workers == 0 {
		return
	}
	fair := func(name string) float64 { return callers * float64(b.nodes[name].workers) / workers }
	excess := from.owned - fair(last.node)
	if excess < max(2, fair(last.node)/2) {
		return
	}
	to, deficit := "", 0.0
	for name, ns := range b.nodes {
		if d := fair(name) - ns.owned; d > deficit {
			to, deficit = name, d
		}
	}
	if n := int(min(excess, deficit, float64(last.left))); to != "" && n > 0 {
		last.moveTo, last.moveN = to, n
		from.owned -= float64(n)
		b.nodes[to].owned += float64(n)
	}
}

const (
	// comebackMaxWait bounds how long after an answer its callers are
	// waited for. Within it, the wait is the delay by which most callers
	// were back (comebackQuantile), and at most a quarter of the time a
	// request is out: a wait pays for a batch's fixed cost, which the
	// time out holds, and costs a fast model's callers more than it saves.
	comebackMaxWait = 4 * time.Millisecond
	// comebackHorizon is how long an answer's callers are counted as coming
	// back, longer than the wait so that a delay longer than the wait is
	// learnt too.
	comebackHorizon = 2 * comebackMaxWait
	comebackBucket  = 100 * time.Microsecond
	// comebackQuantile is the share of returning callers waited for: those
	// later than that come back to a batch of their own or join the next.
	comebackQuantile = 0.9
	// comebackMemory is about how many returns the histogram remembers.
	comebackMemory = 4096
)

// answered notes that n callers were answered at now by from, whose node
// runs workers workers, and whose requests were out for flight on the
// mean. The callers of a busy node are not routed back to it: requests
// routed to one would wait behind its backlog while another node could run
// them. They are waited for all the same: admitted as they came, the first
// of them went alone, the next ones in bunches, each to whichever node read
// first, and at 128 to 256 clients the batches stayed split in as many
// parts (in process, 2 nodes × 2 workers, 256 clients: 40 to 43 items on
// the mean against 50 to 60 when waited for; the same at 512).
func (b *comebacks) answered(from answerer, workers, n int, flight time.Duration, now time.Time) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(now)
	if len(b.answers) == 64 { // bounded: the oldest is nearly out anyway
		b.answers = append(b.answers[:0], b.answers[1:]...)
	}
	node := from.node
	if from.busy {
		node = ""
	}
	b.answers = append(b.answers, comeback{at: now, left: n, node: node})
	if b.flight == 0 {
		b.flight = flight
	}
	b.flight += (flight - b.flight) / 16
	if node == "" {
		return
	}
	if b.nodes == nil {
		b.nodes = map[string]*nodeShare{}
	}
	ns := b.nodes[node]
	if ns == nil {
		ns = &nodeShare{}
		b.nodes[node] = ns
	}
	ns.workers, ns.answered = max(workers, 1), now
	b.balanceLocked(now)
}

// cameBack counts the requests of calls, taken by the writer at now,
// against the callers expected, oldest answers first, and routes each to
// the node whose answer it is counted against.
func (b *comebacks) cameBack(calls []*call, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(now)
	counted := false
	for i := 0; i < len(b.answers) && len(calls) > 0; i++ {
		a := &b.answers[i]
		take := min(len(calls), a.left)
		if take == 0 {
			continue
		}
		b.delays[max(now.Sub(a.at), 0)/comebackBucket] += float64(take)
		b.weight += float64(take)
		counted = true
		a.left -= take
		for _, c := range calls[:take] {
			c.route = a.node
			if a.moveN > 0 {
				c.route = a.moveTo
				a.moveN--
			}
			// It counts for that node from now until it ends (unless it
			// ended already: failed, or given up).
			if ns := b.nodes[c.route]; ns != nil && !c.ended {
				c.owner = c.route
				ns.inFlight++
			}
		}
		calls = calls[take:]
	}
	if !counted {
		return
	}
	if b.weight > 2*comebackMemory {
		for i := range b.delays {
			b.delays[i] /= 2
		}
		b.weight /= 2
	}
	b.wait = comebackHorizon
	for i, sum := 0, 0.0; i < len(b.delays); i++ {
		if sum += b.delays[i]; sum >= comebackQuantile*b.weight {
			b.wait = time.Duration(i+1) * comebackBucket
			break
		}
	}
}

// due returns until when to wait for callers still expected, and whether
// any are due later than now (see comebackMaxWait).
func (b *comebacks) due(now time.Time) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	wait := min(b.wait, b.flight/4, comebackMaxWait)
	for _, a := range b.answers {
		if until := a.at.Add(wait); a.left > 0 && now.Before(until) {
			return until, true
		}
	}
	return time.Time{}, false
}

// expireLocked forgets the answers older than comebackHorizon. It requires
// that b.mu is held.
func (b *comebacks) expireLocked(now time.Time) {
	i := 0
	for i < len(b.answers) && now.Sub(b.answers[i].at) >= comebackHorizon {
		i++
	}
	if i > 0 {
		b.answers = append(b.answers[:0], b.answers[i:]...)
	}
}

// admitChunk and admitChunkBytes bound the items of one run of the
// admission script, in number and in bytes: Redis serves nobody else while
// a script runs. admitTripBytes bounds the items of one round trip, so
// that it goes through within the client's timeouts (2 s) on a slow link,
// as a node's writes of answers do (see writeMaxBytes); the rest of a
// batch goes in the round trips that follow. A request larger than a
// bound goes alone.
const (
	admitChunk      = 512
	admitChunkBytes = 1 << 20
	admitTripBytes  = 4 << 20
)

// admit runs the admission script for the calls of batch, once for every
// admitChunk items or admitChunkBytes or so (a larger request alone), in
// round trips of up to admitTripBytes, and tells each call the verdict.
//
// Before each round trip it drops the calls no longer waiting: after one
// that got no answer (Redis hung), those the outage has failed meanwhile
// are not sent (a connection gone silent alone, the rest go on a new one).
func (fe *FrontEnd) admit(batch []*call) {
	for batch = fe.waiting(batch); len(batch) > 0; batch = fe.waiting(batch) {
		var chunks [][]*call
		chunks, batch = nextTrip(batch)
		fe.admitTrip(chunks)
	}
}

// waiting returns the calls of batch still waiting for their admission.
// Calls whose callers gave up waiting for the writer need no verdict.
// Calls that ended meanwhile (an outage failed them) are not admitted:
// their callers were told no, and learn it from the call.
func (fe *FrontEnd) waiting(batch []*call) []*call {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return slices.DeleteFunc(batch, func(c *call) bool {
		switch {
		case c.gaveUp:
			fe.releaseRoom(c)
			fe.decideLocked(c, false)
			return true
		case fe.calls[c.seq] != c:
			fe.decideLocked(c, false)
			c.admitted <- nil
			return true
		}
		return false
	})
}

// nextTrip takes from batch the calls of the next round trip, in chunks
// of one run of the admission script each, and returns them and the rest.
func nextTrip(batch []*call) (chunks [][]*call, rest []*call) {
	start, tripBytes := 0, 0
	for start < len(batch) {
		end, items, bytes := start, 0, 0
		for end < len(batch) {
			n, size := sentItems(batch[end]), callBytes(batch[end])
			if end > start && (items+n > admitChunk || bytes+size > admitChunkBytes) {
				break
			}
			items, bytes, end = items+n, bytes+size, end+1
		}
		if start > 0 && tripBytes+bytes > admitTripBytes {
			break
		}
		chunks = append(chunks, batch[start:end])
		tripBytes += bytes
		start = end
	}
	return chunks, batch[start:]
}

// sentItems is how many items an admission of c sends: none when it asks
// whether they fit.
func sentItems(c *call) int {
	if c.asks {
		return 0
	}
	return len(c.items)
}

// callBytes is about what the items of c weigh in an admission.
func callBytes(c *call) int {
	if c.asks {
		return 0
	}
	n := 0
	for _, item := range c.items {
		n += len(item) + 32 // and the header
	}
	for _, key := range c.keys {
		n += len(key)
	}
	return n
}

// admitTrip runs the admission script for each of chunks, in one round
// trip, and tells each call the verdict. The runs that Redis refused for
// a want of the script, or for an old epoch, are run again once that is
// mended, and only those: the others admitted their calls already.
func (fe *FrontEnd) admitTrip(chunks [][]*call) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), admitTimeout)
	defer cancel()
	start := fe.clock.now()
	cmds := make([]*redis.Cmd, len(chunks))
	epochs := make([]string, len(chunks)) // the epoch each run was made in
	// run runs the chunks whose last run failed with an error of prefix
	// (all of them at first).
	run := func(prefix string) {
		fe.mu.Lock()
		epoch := fe.epoch
		fe.mu.Unlock()
		var pipe redis.Pipeliner
		for i, chunk := range chunks {
			if cmds[i] != nil && !redis.HasErrorPrefix(cmds[i].Err(), prefix) {
				continue
			}
			if pipe == nil {
				pipe = fe.rdb.Pipeline()
			}
			cmds[i] = admitScript.EvalSha(ctx, pipe, fe.admitKeys(), fe.admitArgs(chunk, epoch)...)
			epochs[i] = epoch
		}
		if pipe != nil {
			_, _ = pipe.Exec(ctx) // each command's own error is read below
		}
	}
	failed := func(prefix string) bool {
		return slices.ContainsFunc(cmds, func(cmd *redis.Cmd) bool { return redis.HasErrorPrefix(cmd.Err(), prefix) })
	}
	run("")
	// Redis restarted, or flushed its scripts, before some of the runs
	// (a client may load the script between two of them).
	if failed("NOSCRIPT") && admitScript.Load(ctx, fe.rdb).Err() == nil {
		run("NOSCRIPT")
	}
	// Redis lost its data since the last check: the check fails the calls
	// admitted before, and these go in the new epoch.
	if failed("EPOCH") && fe.check(ctx) == nil {
		run("EPOCH")
	}
	var unanswered []*call
	for i, cmd := range cmds {
		fe.tell(chunks[i], cmd, epochs[i], began)
		if err := cmd.Err(); err != nil && !errors.As(err, new(redis.Error)) {
			unanswered = append(unanswered, chunks[i]...)
		}
	}
	if unanswered != nil {
		fe.noteUnanswered(unanswered, start)
	}
}

// noteUnanswered remembers calls whose admission, sent at start (on
// Redis's clock), got no answer, for withdrawUnanswered.
func (fe *FrontEnd) noteUnanswered(calls []*call, start time.Time) {
	// The items' ids are Redis's times as it ran the admission, after
	// start, which is off by up to half a round trip, or more where Redis
	// refuses TIME and the machines' clocks differ: a margin. Redis ran
	// nothing meanwhile, or the admission would have been answered: the
	// items are among the first on the stream after start.
	margin := 250 * time.Millisecond
	if !fe.clock.measured.Load() {
		margin = 5 * time.Second
	}
	from := streamID{ms: uint64(max(start.Add(-margin).UnixMilli(), 0))}
	a := unansweredAdmission{
		streams: []string{fe.k.items},
		from:    []streamID{from},
		seqs:    make([]any, 0, len(calls)),
	}
	for _, c := range calls {
		a.seqs = append(a.seqs, strconv.FormatUint(c.seq, 10))
		if key := fe.k.nodeItems(c.route); c.route != "" && !slices.Contains(a.streams, key) {
			a.streams = append(a.streams, key)
			a.from = append(a.from, from)
		}
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.unanswered = append(fe.unanswered[max(len(fe.unanswered)-unansweredMax+1, 0):], a)
}

// withdrawUnanswered looks for the items of the admissions that got no
// answer, and withdraws those no node has read (see unansweredAdmission).
// One look serves them all: it reads each stream from the first id any of
// them has yet to look at, for the items of any of them, and Redis runs
// nothing else meanwhile.
func (fe *FrontEnd) withdrawUnanswered(ctx context.Context) {
	fe.mu.Lock()
	all := fe.unanswered
	fe.unanswered = nil
	fe.mu.Unlock()
	if len(all) == 0 {
		return
	}
	var streams []string
	var from []streamID
	var seqs []any
	for _, a := range all {
		for i, key := range a.streams {
			switch j := slices.Index(streams, key); {
			case j < 0:
				streams, from = append(streams, key), append(from, a.from[i])
			case a.from[i].before(from[j]):
				from[j] = a.from[i]
			}
		}
		seqs = append(seqs, a.seqs...)
	}
	args := make([]any, 0, 2+len(from)+len(seqs))
	args = append(args, nodeGroup, fe.id)
	for _, id := range from {
		args = append(args, id.String())
	}
	last, complete, ok := fe.lookUnanswered(ctx, streams, append(args, seqs...))
	var again []unansweredAdmission
	for _, a := range all {
		// Every try counts, answered or not: a look's cost is bounded,
		// but not so small that it should be made for ever.
		a.tries++
		if ok {
			a.from = slices.Clone(a.from) // shared with all's copy
			for i, key := range a.streams {
				// Read up to last from no later than a's own first id.
				if next := last[slices.Index(streams, key)]; next != nil && a.from[i].before(*next) {
					a.from[i] = *next
				}
			}
			if complete {
				a.looks++
			}
		}
		if a.looks < unansweredLooks && a.tries < unansweredTries {
			again = append(again, a)
		}
	}
	if again == nil {
		return
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.unanswered = append(again, fe.unanswered...)
	fe.unanswered = fe.unanswered[max(len(fe.unanswered)-unansweredMax, 0):]
}

// lookUnanswered runs withdrawUnansweredScript on streams with args. It
// answers, per stream, the id to look at next (nil when the look read
// none there), whether it read each stream to its end, and whether it got
// an answer at all.
func (fe *FrontEnd) lookUnanswered(ctx context.Context, streams []string, args []any) (next []*streamID, complete, ok bool) {
	res, err := withdrawUnansweredScript.Run(ctx, fe.rdb, streams, args...).Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("the look answered %d values, not 3", len(res))
	}
	if err != nil {
		fe.cfg.Logger.Debug("look for the items of admissions that got no answer", "err", err)
		return nil, false, false
	}
	n, _ := res[0].(int64)
	cut, _ := res[1].(int64)
	last, _ := res[2].([]any)
	if n > 0 {
		fe.stats.withdrawn.Add(uint64(n))
		fe.cfg.Logger.Info("withdrew the items of failed requests that redis admitted after it stopped answering", "items", n, "redis", fe.where)
	}
	next = make([]*streamID, len(streams))
	for i, v := range last {
		str, _ := v.(string)
		if id, err := parseStreamID(str); err == nil && i < len(next) {
			id.seq++ // the one after it
			next[i] = &id
		}
	}
	return next, cut == 0, true
}

// tell gives each call of chunk its verdict from cmd, the admission
// script's run for them in epoch, sent at began. A call admitted in an
// epoch that a check has ended since has lost its items with Redis's data:
// it fails.
func (fe *FrontEnd) tell(chunk []*call, cmd *redis.Cmd, epoch string, began time.Time) {
	verdicts, err := cmd.Slice()
	if err == nil && len(verdicts) != len(chunk) {
		err = fmt.Errorf("the admission script answered %d verdicts for %d requests", len(verdicts), len(chunk))
	}
	if err != nil {
		err = fe.admissionFailed(err, began)
		fe.mu.Lock()
		for _, c := range chunk {
			// Withdrawn, if Redis ran it, unless an answer came already:
			// then it did, and its items count as admitted.
			fe.decideLocked(c, c.left < len(c.items))
		}
		fe.mu.Unlock()
		for _, c := range chunk {
			c.admitted <- err
		}
		return
	}
	for i, c := range chunk {
		if err := fe.takeVerdict(c, verdicts[i], epoch); err != errComeBack {
			c.admitted <- err
		}
	}
}

// admissionFailed is what the callers of an admission begun at began that
// failed for err are told; a Redis that did not answer is noted down,
// unless the front end itself did not run meanwhile.
func (fe *FrontEnd) admissionFailed(err error, began time.Time) error {
	stall, stalled := fe.stalls.through(err, began)
	if !stalled {
		fe.noteDown(err)
	}
	switch {
	case stalled:
		// Redis has answered by now, unread: the items, if any, are
		// withdrawn as those of any admission without an answer.
		return unavailablef("this front end did not run for %s (stopped, or starved of CPU) while its request's admission waited for redis at %s's answer: send it again", stall.Round(time.Millisecond), fe.where)
	case brokenConn(err):
		// Redis may have run it: its items, if any, are withdrawn (see
		// noteUnanswered), not admitted again, which could run them
		// twice.
		return unavailablef("redis at %s: the connection closed under the request's admission (%v): killed, or redis restarting? send it again", fe.where, err)
	case outOfMemory(err) && fe.fullError() != nil:
		return fe.fullError()
	case permissionRefused(err):
		fe.refuseAdmissions(err)
		return admissionRefused(fe.where, err.Error())
	case authError(err):
		// The check that follows says so too, and takes Redis for down.
		return unavailablef("redis at %s refuses this front end's authentication (the password or user changed on Redis, or the user is gone?): %v", fe.where, err)
	case failing(err):
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		return admissionFailing(fe.where, fe.failAdmissions(ctx, err))
	}
	return unavailablef("redis at %s: %v", fe.where, err)
}

// failing says whether err, an admission's failure, is an error Redis
// answered that says neither that it refuses the front end (a permission,
// the password) nor that it does not serve for now (down, loading, a
// replica, out of memory), nor one the admission mends by itself (a
// script missing, an epoch past): a key the admission reads that holds
// another type, a Redis that refuses writes as its disk fails
// (MISCONF), and the like.
func failing(err error) bool {
	if !errors.As(err, new(redis.Error)) || notServing(err) || outOfMemory(err) || permissionRefused(err) {
		return false
	}
	for _, prefix := range []string{"NOSCRIPT", "EPOCH"} {
		if redis.HasErrorPrefix(err, prefix) {
			return false
		}
	}
	return !authError(err)
}

// failAdmissions notes err, Redis's failure of an admission (see
// failing): the front end is not ready until a probe of the admission
// goes through (see probeAdmission), which its checks try meanwhile. It
// logs it as an error, at once and then at most every repeats.Every (see
// repeats.Lines), and returns what to tell the callers: Redis's error, and,
// for a WRONGTYPE, which key holds another type (Redis names none). Before,
// such failures were logged nowhere, and the front end stayed ready while
// every request got 503.
func (fe *FrontEnd) failAdmissions(ctx context.Context, err error) string {
	kind := repeatKind("admit", err)
	log, held := fe.repeats.Note(kind, time.Now())
	fault := &admitFault{kind: kind, msg: err.Error()}
	if prev := fe.admitFailing.Load(); !log && prev != nil && prev.kind == kind {
		fault = prev // the key named already: no look at the keys' types for each admission
	} else if redis.HasErrorPrefix(err, "WRONGTYPE") {
		if which := wrongTypes(ctx, fe.rdb, fe.admitKeyTypes()...); which != "" {
			fault.msg = which + ": " + fault.msg
		}
	}
	fe.admitFailing.Store(fault)
	msg := fault.msg
	args := []any{"redis", fe.where, "err", msg}
	if !log {
		fe.cfg.Logger.Debug("redis fails an admission", args...)
		return msg
	}
	if held > 0 {
		args = append(args, "repeated", held)
	}
	fe.cfg.Logger.Error("redis fails this front end's admissions of requests: it is not ready, and the requests whose admission meets the fault get 503, until an admission goes through", args...)
	return msg
}

// admitFault is why Redis fails admissions (see failAdmissions): its
// kind, for repeats, and what to tell the callers.
type admitFault struct{ kind, msg string }

// admissionFailing is the error of a request whose admission Redis at
// where failed for msg (see failing).
func admissionFailing(where, msg string) error {
	return unavailablef("redis at %s fails this front end's admissions of requests: %s", where, msg)
}

// errComeBack is takeVerdict's word that a call has room kept for it in
// the backlog, and comes back for it (see resubmit): no verdict yet.
var errComeBack = errors.New("room is kept for the request: it comes back for it")

// roomRetry is how soon a request that has room kept for it in the backlog
// comes back for it; roomWaitMax, for how long at most: after that it is
// refused, and its caller told to come back later. Room is kept in the
// backlog for roomKeep after each try.
const (
	roomRetry   = 5 * time.Millisecond
	roomWaitMax = 5 * time.Second
)

// resubmit sends c, which has room kept for it, to the writer again; or
// refuses it, once the writer has stopped. Under fe.mu, so that the
// writer's stop, which takes what waits on submits, sees it or is seen.
func (fe *FrontEnd) resubmit(c *call) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if fe.writerStopped {
		fe.decideLocked(c, false)
		c.admitted <- supervisor.ErrShuttingDown // its one verdict: room for it
		return
	}
	select {
	case fe.submits <- c:
	default: // full: a little later
		time.AfterFunc(roomRetry, func() { fe.resubmit(c) })
	}
}

// roomKeep is how long the shared backlog keeps room for a request after
// each of its tries (see admitScript): long past the retries of one that
// waits for it, and not so long that room kept for a caller who gave up
// holds back the others for long.
const roomKeep = time.Second

// releaseScript deletes the room kept in the backlog (KEYS[1]) if it is
// kept for the request of token ARGV[1].
var releaseScript = redis.NewScript(`
local kept = redis.call('GET', KEYS[1])
if kept and string.match(kept, '^%d+ (.*)$') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// releaseRoom gives back the room the backlog may keep for c, which no
// longer comes for it (its caller left, or it waited its longest): the
// others need not wait for it to lapse. Called by the writer.
func (fe *FrontEnd) releaseRoom(c *call) {
	if !c.requeued {
		return // it kept no room
	}
	fe.done.Add(1)
	go func() {
		defer fe.done.Done()
		ctx, cancel := context.WithTimeout(context.Background(), admitTimeout)
		defer cancel()
		_ = releaseScript.Run(ctx, fe.rdb, []string{fe.k.room}, c.roomToken).Err() // else it lapses
	}()
}

// admitKeys are the keys admitScript touches.
func (fe *FrontEnd) admitKeys() []string {
	return []string{fe.k.items, fe.k.nodes, fe.k.streams, fe.k.epoch, fe.k.room, fe.k.sizes}
}

// admitKeyTypes are admitKeys with the types streamer keeps there.
func (fe *FrontEnd) admitKeyTypes() []keyType {
	return []keyType{
		{fe.k.items, typeStream}, {fe.k.nodes, typeZSet}, {fe.k.streams, typeSet},
		{fe.k.epoch, typeString}, {fe.k.room, typeString}, {fe.k.sizes, typeString},
	}
}

// takeVerdict takes in the admission script's verdict v on c, run in epoch:
// its stream and its items' ids when admitted; -2 (room is kept for it)
// or -3 (it fits: send the items), when it comes back (errComeBack); or
// when refused -1 (the backlog is full) or the room kept for a larger
// request (then it returns ErrOverloaded).
func (fe *FrontEnd) takeVerdict(c *call, v any, epoch string) error {
	admitted, ok := v.([]any)
	if v, _ := v.(int64); !ok && v == -3 {
		// It fits, and its room is kept: it sends its items now.
		c.asks = false
		fe.resubmit(c)
		return errComeBack
	}
	if v, _ := v.(int64); !ok && v == -2 {
		if time.Since(c.roomSince) < roomWaitMax {
			// Room is kept for it: it comes back for it, asking first.
			c.requeued, c.asks = true, true
			time.AfterFunc(roomRetry, func() { fe.resubmit(c) })
			return errComeBack
		}
		fe.releaseRoom(c)
		fe.mu.Lock()
		fe.decideLocked(c, false)
		fe.mu.Unlock()
		return fmt.Errorf("%w: no room for %d items in the shared backlog within %s, limit %d", supervisor.ErrOverloaded, len(c.items), roomWaitMax, fe.cfg.MaxBacklog)
	}
	if !ok {
		fe.mu.Lock()
		fe.decideLocked(c, false)
		fe.mu.Unlock()
		// A request no larger than most refused: those like it would be
		// refused too (see Full).
		if len(c.items) == 1 || !fe.largerThanMost(len(c.items)) {
			fe.seenFull()
		}
		if kept, _ := v.(int64); kept > 0 {
			return fmt.Errorf("%w: the shared backlog, limit %d items, keeps room for %d for a request that waits for it", supervisor.ErrOverloaded, fe.cfg.MaxBacklog, kept)
		}
		// The backlog is past its limit less this request's items.
		if least := int64(fe.cfg.MaxBacklog - len(c.items) + 1); fe.backlog.Load() < least {
			fe.backlog.Store(least)
		}
		return fmt.Errorf("%w: the shared backlog is at its limit of %d items", supervisor.ErrOverloaded, fe.cfg.MaxBacklog)
	}
	var stream string
	if len(admitted) > 0 {
		stream, _ = admitted[0].(string)
		admitted = admitted[1:]
	}
	ids := make([]string, len(admitted))
	for j, id := range admitted {
		ids[j], _ = id.(string)
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	c.stream, c.ids, c.epoch = stream, ids, epoch
	answered := c.left == 0 && c.failure == nil
	switch {
	case epoch != fe.epoch && !answered:
		// Redis lost its data since: the items are gone, but for those
		// answered already.
		fe.decideLocked(c, c.left < len(c.items))
		fe.failLocked(c, fe.lostError())
	case c.gaveUp, fe.calls[c.seq] != c && !answered:
		// Its caller left meanwhile, or was told no (an outage): counted
		// as admitted, as they may well run.
		fe.decideLocked(c, true)
		fe.withdraw(stream, ids)
	default:
		// Waiting for its answers, or answered already: a node may
		// answer before the writer reads the verdict.
		fe.decideLocked(c, true)
	}
	return nil
}

// withdraw deletes from stream the items ids, of a call that ended
// unanswered, that no node has read yet (see withdrawScript), in the
// background (see withdrawLoop): the caller, who gave up on them, is not
// kept waiting. While the front end closes, Close withdraws them. Not
// deleted (Redis down), they are run and their answers dropped. It
// requires that fe.mu is held.
func (fe *FrontEnd) withdraw(stream string, ids []string) {
	if len(ids) == 0 {
		return
	}
	if fe.closed.Load() {
		fe.toWithdraw[stream] = append(fe.toWithdraw[stream], ids...)
		return
	}
	fe.withdrawQ[stream] = append(fe.withdrawQ[stream], ids...)
	select {
	case fe.withdrawNow <- struct{}{}:
	default:
	}
}

// withdrawLoop runs the withdrawals that withdraw queues, all those queued
// meanwhile in one go: calls that end together (callers who all leave at
// once) take one connection and a round trip for every withdrawChunk
// items, where a withdrawal each at once would take every connection of
// the pool, and hold up the checks and admissions that wait for one.
// Those not done by the end go to Close (see takeToWithdraw).
func (fe *FrontEnd) withdrawLoop() {
	defer fe.withdrawing.Done()
	for {
		select {
		case <-fe.withdrawNow:
		case <-fe.closing:
			return
		}
		fe.mu.Lock()
		items := fe.withdrawQ
		fe.withdrawQ = map[string][]string{}
		fe.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fe.requeue(fe.withdrawAll(ctx, items))
		cancel()
	}
}

// requeue queues again, for the next check that finds Redis up, the items
// that a withdrawal could not reach Redis for. A stream keeps the last
// MaxBacklog queued: it never holds more items than that, and those queued
// long ago have most likely been read, and answered, since.
func (fe *FrontEnd) requeue(items map[string][]string) {
	if len(items) == 0 {
		return
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	for stream, ids := range items {
		ids = append(fe.toWithdraw[stream], ids...)
		fe.toWithdraw[stream] = ids[max(len(ids)-fe.cfg.MaxBacklog, 0):]
	}
}

// withdrawLaterLocked queues the unanswered items of the calls waiting
// for a later withdrawal (see toWithdraw). It requires that fe.mu is held.
func (fe *FrontEnd) withdrawLaterLocked() {
	for stream, ids := range fe.unansweredLocked() {
		fe.toWithdraw[stream] = append(fe.toWithdraw[stream], ids...)
	}
}

// hasUnanswered says whether admissions that got no answer wait for
// withdrawUnanswered.
func (fe *FrontEnd) hasUnanswered() bool {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	return len(fe.unanswered) > 0
}

// takeToWithdraw returns the items queued for withdrawal, the
// withdrawer's with them, and forgets them.
func (fe *FrontEnd) takeToWithdraw() map[string][]string {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	items := fe.toWithdraw
	for stream, ids := range fe.withdrawQ {
		items[stream] = append(items[stream], ids...)
	}
	fe.toWithdraw, fe.withdrawQ = map[string][]string{}, map[string][]string{}
	return items
}

// withdrawAll deletes the items named, by stream, that no node has read
// yet (see withdrawScript): a run of the script for every withdrawChunk
// items of a stream. It returns those it could not reach Redis for, or
// that Redis could not serve for now, to try again.
func (fe *FrontEnd) withdrawAll(ctx context.Context, items map[string][]string) (unreached map[string][]string) {
	for stream, all := range items {
		for chunk := range slices.Chunk(all, withdrawChunk) {
			args := make([]any, 0, 1+len(chunk))
			args = append(args, nodeGroup)
			for _, id := range chunk {
				args = append(args, id)
			}
			n, err := withdrawScript.Run(ctx, fe.rdb, []string{stream}, args...).Int64()
			if err != nil {
				fe.cfg.Logger.Debug("withdraw the items of requests no longer waiting", "items", len(chunk), "err", err)
				if !errors.As(err, new(redis.Error)) || notServing(err) {
					if unreached == nil {
						unreached = map[string][]string{}
					}
					unreached[stream] = append(unreached[stream], chunk...)
				}
				continue
			}
			fe.stats.withdrawn.Add(uint64(n))
		}
	}
	return unreached
}

// withdrawChunk bounds the items of one run of the withdrawal script:
// Redis serves nobody else while it runs.
const withdrawChunk = 512

// unansweredLocked returns the items of the waiting calls that are not
// answered yet, by stream. It requires that fe.mu is held.
func (fe *FrontEnd) unansweredLocked() map[string][]string {
	items := map[string][]string{}
	for _, c := range fe.calls {
		for i, id := range c.ids {
			if !c.got[i] {
				items[c.stream] = append(items[c.stream], id)
			}
		}
	}
	return items
}

func (fe *FrontEnd) admitArgs(batch []*call, epoch string) []any {
	n := 6
	for _, c := range batch {
		n += 4
		if !c.asks {
			n += 2*len(c.items) + len(c.keys)
		}
	}
	args := make([]any, 0, n)
	args = append(args, fe.cfg.MaxBacklog, fe.clock.now().UnixMilli(), nodeSilence.Milliseconds(), fe.k.items+":", epoch, fe.roomLapse.Milliseconds())
	ttl := fe.cfg.ReplyTTL.Milliseconds()
	var header []byte
	for _, c := range batch {
		deadline := int64(0)
		if !c.deadline.IsZero() {
			deadline = fe.clock.shared(c.deadline).UnixMicro()
		}
		keyed := "0"
		if c.keys != nil {
			keyed = "1"
		}
		if !c.tried {
			c.tried = true
			fe.noteSent(len(c.items))
			if len(c.items) >= 2 { // the admission judges whether it is larger than most
				c.roomToken, c.roomSince = fe.id+" "+strconv.FormatUint(c.seq, 10), time.Now()
			}
		}
		if c.asks {
			args = append(args, "ask", c.route, len(c.items), c.roomToken)
			continue
		}
		args = append(args, keyed, c.route, len(c.items), c.roomToken)
		// The header (see fieldHeader), the item's place in its request
		// aside, is the same for the request's items.
		header = append(append(header[:0], fe.id...), ' ')
		header = append(strconv.AppendUint(header, c.seq, 10), ' ')
		at := len(header)
		for i, item := range c.items {
			h := strconv.AppendInt(header[:at], int64(i), 10)
			h = append(strconv.AppendInt(append(h, ' '), deadline, 10), ' ')
			header = strconv.AppendInt(h, ttl, 10)
			args = append(args, string(header))
			if c.keys != nil {
				args = append(args, c.keys[i])
			}
			args = append(args, item)
		}
	}
	return args
}

// trimBytes is how many bytes of answers the reader reads before it trims
// them from the reply stream, at the latest.
const trimBytes = 1 << 20

// readLoop reads the answers on the front end's reply stream and hands
// them to their calls, trimming what it has read.
func (fe *FrontEnd) readLoop() {
	defer fe.reader.Done()
	last := "0-0"
	var read, readBytes int
	lastTrim := time.Now()
	trimRefused := false
	retry := newBackoff()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-fe.closing; cancel() }()
	// It reads until Close has the answers it waits for: until closing.
	count, patience := readCount, readTimeout
	for ctx.Err() == nil {
		// An entry holds up to answerChunk bytes of answers, or one
		// larger answer. A read is bounded, so that a connection gone
		// silent (its peer gone without a reset) is dropped within
		// seconds, not the client's own bound of the block and 10 s;
		// a read of large answers that runs out of time is made again
		// for half the entries, down to one, and with twice the time, up
		// to readPatienceMax, as one answer may be too large to come
		// within the bound on this link. Each is made on a new
		// connection (the client drops one whose read ran out of time),
		// so that a silent one costs a single bound. (Close, which
		// cannot cut a read short, closes the client under it.)
		rctx, cancel := context.WithTimeout(ctx, blockFor+patience)
		streams, err := fe.rdb.XRead(rctx, &redis.XReadArgs{Streams: []string{fe.replyKey, last}, Count: int64(count), Block: blockFor}).Result()
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return
			}
			// A connection closed under the read is taken as one that
			// ran out of time: Redis closes a client whose answer is
			// over its client-output-buffer-limit. It may be a failover's
			// too, after which the new master may lack the last writes:
			// the waiting calls' items are looked for (see noteDown).
			if brokenConn(err) {
				fe.lookAll.Store(true)
			}
			if (timedOut(err) || brokenConn(err)) && (count > 1 || patience < readPatienceMax) {
				count, patience = max(count/2, 1), min(2*patience, readPatienceMax)
				fe.cfg.Logger.Debug("a read of answers ran out of time; it is made again for fewer, with more time", "redis", fe.where, "entries", count, "time", blockFor+patience)
				continue
			}
			if refusal(err) {
				fe.refuseReads(err)
			} else {
				fe.noteDown(err)
			}
			retry.wait(fe.closing)
			continue
		}
		retry.reset()
		count, patience = readCount, readTimeout
		if fe.readRefused.Load() != nil && fe.readRefused.Swap(nil) != nil {
			fe.cfg.Logger.Info("redis lets this front end read its answers again; it takes requests again", "redis", fe.where)
		}
		for _, st := range streams {
			if len(st.Messages) == 0 {
				continue
			}
			fe.deliver(st.Messages)
			last = st.Messages[len(st.Messages)-1].ID
			fe.noteRead(last)
			read += len(st.Messages)
			for _, m := range st.Messages {
				readBytes += answerBytes(m.Values)
			}
		}
		// Answers read are trimmed away within a second, or once they
		// are many, or large: a second of large answers (100 KB each)
		// held most of Redis's memory after their callers had them.
		if read > 0 && (read >= 1024 || readBytes >= trimBytes || time.Since(lastTrim) > time.Second) {
			trimRefused = fe.trim(ctx, last, trimRefused)
			read, readBytes, lastTrim = 0, 0, time.Now()
		}
	}
}

// refusal says whether err, the failure of a read, is an error Redis
// answered that a quick retry does not mend (NOPERM: the user may not
// read the stream; NOAUTH or WRONGPASS: its password changed), rather
// than a Redis that does not serve for now (loading, a replica, a
// blocked read ended as Redis became one: UNBLOCKED).
func refusal(err error) bool {
	return errors.As(err, new(redis.Error)) && !notServing(err)
}

// refuseReads notes that Redis refuses the reader's reads for err, and
// logs it once, by its cause: until a read goes through, no caller could
// be answered, so the front end is not ready, takes no request, and fails
// those waiting once it lasts past Outage (see checkLoop).
func (fe *FrontEnd) refuseReads(err error) {
	msg := err.Error()
	if fe.readRefused.Swap(&msg) != nil {
		return
	}
	what := "redis fails this front end's reads of its answers: it takes no requests until a read goes through"
	switch {
	case authRefusal(msg):
		what = "redis refuses this front end's authentication (the password or user changed on Redis?): it takes no requests until a read goes through"
	case permissionRefused(err):
		what = "redis refuses this front end's reads of its answers: its user lacks a permission; it takes no requests until a read goes through"
	}
	fe.cfg.Logger.Error(what, "redis", fe.where, "stream", fe.replyKey, "err", err)
}

// trim deletes the answers read, up to last and with it, from the reply
// stream, and
// refreshes the stream's TTL. It is best effort, as the nodes bound the
// stream too, but a refusal (the user may not XTRIM) is logged, once
// until a trim goes through: refused says whether the last one was
// refused, and trim returns whether this one was.
func (fe *FrontEnd) trim(ctx context.Context, last string, refused bool) bool {
	// MINID keeps the entry it names: the one after last goes, so that
	// last, with the answers it holds, does not stay until the next.
	minID := last
	if id, err := parseStreamID(last); err == nil {
		minID = streamID{id.ms, id.seq + 1}.String()
	}
	pipe := fe.rdb.Pipeline()
	pipe.XTrimMinID(ctx, fe.replyKey, minID)
	pipe.Expire(ctx, fe.replyKey, fe.cfg.ReplyTTL)
	_, err := pipe.Exec(ctx)
	switch {
	case err == nil:
		if refused {
			fe.cfg.Logger.Info("redis trims this front end's reply stream again", "redis", fe.where)
		}
		return false
	case refusal(err):
		if !refused {
			fe.cfg.Logger.Warn("redis refuses to trim this front end's reply stream: the answers read stay there, up to the nodes' bound on the stream, until a trim goes through",
				"redis", fe.where, "stream", fe.replyKey, "err", err)
		}
		return true
	}
	return refused // no answer: the checks say why
}

// readPatienceMax bounds the time a read of one entry of answers is given
// (see readLoop), past the block: enough for an answer of 64 MiB at 8
// MiB/s. The client library bounds a blocking read to its block and 10 s
// whatever the context allows.
const readPatienceMax = 8 * time.Second

// readCount is how many entries of answers a read asks for at most: a
// write's answers to one front end each (up to answerChunk bytes), so up
// to 4 MiB a read.
const readCount = 16

// deliver hands answers to their calls.
func (fe *FrontEnd) deliver(msgs []redis.XMessage) {
	fe.mu.Lock()
	defer fe.mu.Unlock()
	now := time.Now()
	type answers struct {
		calls, workers int
		flight         time.Duration
	}
	closed := map[answerer]answers{}
	for _, m := range msgs {
		from := answerer{node: str(m.Values, fieldNode), busy: str(m.Values, fieldBusy) == "1"}
		workers, _ := strconv.Atoi(str(m.Values, fieldWorkers))
		err := answersOf(m.Values, func(a packedAnswer) {
			seq, err1 := strconv.ParseUint(a.seq, 10, 64)
			idx, err2 := strconv.ParseUint(a.index, 10, 64)
			if err1 != nil || err2 != nil {
				fe.repeats.Log(fe.cfg.Logger, slog.LevelWarn, "malformed answer", "malformed answer on the reply stream", "id", m.ID, "err", errors.Join(err1, err2))
				return
			}
			c := fe.calls[seq]
			if c == nil || idx >= uint64(len(c.got)) || c.got[idx] {
				fe.stats.duplicates.Add(1)
				return
			}
			c.got[idx] = true
			fe.answeredLocked(c)
			if a.failed {
				if c.errs == nil {
					c.errs = make([]error, len(c.got))
				}
				c.errs[idx] = errorOf(a.code, a.msg)
				fe.countFailed(c.errs[idx], 1)
			} else {
				c.outputs[idx] = []byte(a.output)
				fe.stats.ok.Add(1)
			}
			if !a.failed || !errors.Is(c.errs[idx], supervisor.ErrDeadline) {
				// Run by a node, as a local server counts the items it
				// ran: the expired never ran.
				fe.endToEnd.Observe(now.Sub(c.sent), 1)
			}
			fe.held--
			if c.left--; c.left == 0 {
				delete(fe.calls, seq)
				close(c.over)
				fe.back.settled(c)
				by := closed[from]
				by.calls++
				by.flight += now.Sub(c.sent)
				by.workers = workers
				closed[from] = by
				fe.noteIdleLocked()
			}
		})
		if err != nil {
			fe.repeats.Log(fe.cfg.Logger, slog.LevelWarn, "malformed answer", "malformed answers on the reply stream", "id", m.ID, "err", err)
		}
	}
	for from, by := range closed {
		fe.back.answered(from, by.workers, by.calls, by.flight/time.Duration(by.calls), now)
	}
}

// checkLoop checks Redis and the nodes every quarter second, and fails the
// waiting calls once either has been gone for Outage, or Redis has refused
// the reader's reads of the answers for as long. A node leaving, which
// finishes the items it holds, counts: the callers whose items it holds
// wait for its answers, though no new request is admitted for it alone,
// and those whose items no node holds fail (see failUntaken). It has
// Redis looked at for lost items after each outage and every
// lostLookEvery.
func (fe *FrontEnd) checkLoop() {
	defer fe.done.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	looks := newLostLooks()
	defer looks.stop()
	var goneSince, untakenSince time.Time
	for {
		select {
		case <-tick.C:
		case <-fe.closing:
			return
		}
		began := time.Now()
		err := fe.check(context.Background())
		if err == nil || outOfMemory(err) {
			fe.withdrawLeftovers()
		}
		if err != nil || fe.unrefreshed.Load() != nil || fe.lookAll.Swap(false) {
			// Redis was down, or a command found it so or its connection
			// closed (a failover, after which the new master may lack
			// the last writes), or the front end went without refreshing
			// its reply stream past its TTL: look at every call.
			looks.all.Store(true)
		}
		if err == nil {
			looks.maybeStart(fe)
		}
		goneSince = fe.failWhenGone(err == nil, goneSince, began)
		untakenSince = fe.failUntaken(err == nil, untakenSince, began)
	}
}

// withdrawLeftovers withdraws from Redis the items of calls failed while Redis
// was down, or while no node was alive, which must not run when a node
// comes, and those of admissions whose verdict was lost. It runs while
// Redis refuses writes for want of memory too: the items of the calls
// failed for that, which nodes may hold, are what frees it, as the nodes
// cannot write the answers that would let them go (see withdrawScript).
func (fe *FrontEnd) withdrawLeftovers() {
	if items := fe.takeToWithdraw(); len(items) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fe.requeue(fe.withdrawAll(ctx, items))
		cancel()
	}
	if fe.hasUnanswered() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fe.withdrawUnanswered(ctx)
		cancel()
	}
}

// failWhenGone fails the calls waiting for answers once Redis or the
// nodes have been gone for Outage (up: the check begun at began found
// Redis serving); goneSince is when they went, zero while they serve, and
// it returns the next value. They went when the first check that found
// them gone began: a Redis that hangs is taken for down only when a
// second check runs out of time too (see check), a second after.
func (fe *FrontEnd) failWhenGone(up bool, goneSince, began time.Time) time.Time {
	if up && fe.nodes.Load()+fe.leaving.Load() > 0 && fe.readRefused.Load() == nil && fe.fullError() == nil {
		return time.Time{}
	}
	if goneSince.IsZero() {
		goneSince = began
	}
	if time.Since(goneSince) < fe.cfg.Outage {
		return goneSince
	}
	cause := fe.waitingFailure()
	if cause == nil {
		return goneSince
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	if len(fe.calls) > 0 {
		fe.cfg.Logger.Error("failing the requests waiting for answers", "requests", len(fe.calls), "err", cause)
		// Their callers are told no: the items withdrawn at the next
		// check that finds Redis up do not run later.
		fe.withdrawLaterLocked()
		fe.failAllLocked(cause)
	}
	return goneSince
}

// failUntaken fails the calls waiting for answers that no node will give,
// once no node has taken requests for Outage while some leave (finishing
// the items they hold, or none of their workers able to run; with none at
// all, failWhenGone fails every call): the calls with an item that waits
// unread, which only a node that takes requests reads, or that a node
// took and no longer keeps from claims (idle for ClaimIdle: a node that
// cannot run an item leaves it for another to claim), which only such a
// node claims. A caller then gets ErrUnavailable, as from a local server
// whose workers cannot run, rather than wait for its deadline. The calls
// whose items the nodes leaving hold, and keep, wait for their answers,
// however long those take. up says the check begun at began found Redis
// serving; since is when checks began to find no node taking requests,
// zero while one does, and it returns the next value.
func (fe *FrontEnd) failUntaken(up bool, since, began time.Time) time.Time {
	switch {
	case !up:
		return since // while Redis does not serve, failWhenGone's matter
	case fe.nodes.Load() > 0:
		return time.Time{}
	case since.IsZero():
		since = began
	}
	if time.Since(since) < fe.cfg.Outage || fe.leaving.Load() == 0 {
		return since
	}
	cause := fe.waitingFailure()
	if cause == nil {
		return since
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := fe.lookForUntaken(ctx, cause); err != nil {
		fe.repeats.Log(fe.cfg.Logger, slog.LevelWarn, repeatKind("look for untaken", err), "look for the items no node takes", "redis", fe.where, "err", err)
	}
	return since
}

// lookForUntaken fails, with cause, the calls waiting with an item that
// no node holds (see failUntaken), withdrawing their other items. An item
// pending to a node is asked about before it is looked for on its stream,
// so that one answered in between (gone from the stream as its answer is
// written) is found held, not unread. An item gone from its stream was
// answered, or lost, which lookForLost finds.
func (fe *FrontEnd) lookForUntaken(ctx context.Context, cause error) error {
	places, _ := fe.waitingItems(0)
	if len(places) == 0 {
		return nil
	}
	pending := make([]*redis.XPendingExtCmd, len(places))
	there := make([]*redis.XMessageSliceCmd, len(places))
	pipe := fe.rdb.Pipeline()
	for i, p := range places {
		id := p.c.ids[p.index]
		pending[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: p.c.stream, Group: nodeGroup, Start: id, End: id, Count: 1})
		there[i] = pipe.XRangeN(ctx, p.c.stream, id, id, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.As(err, new(redis.Error)) {
		return err // no answer: a later check looks again
	}
	fe.mu.Lock()
	defer fe.mu.Unlock()
	failed := 0
	for i, p := range places {
		if !fe.untaken(pending[i], there[i]) || fe.calls[p.c.seq] != p.c {
			continue // held or answered; or its call ended meanwhile
		}
		var open []string
		for k, id := range p.c.ids {
			if !p.c.got[k] {
				open = append(open, id)
			}
		}
		fe.withdraw(p.c.stream, open)
		fe.failLocked(p.c, cause)
		failed++
	}
	if failed > 0 {
		fe.cfg.Logger.Error("failing the requests whose items no node takes", "requests", failed, "err", cause)
	}
	return nil
}

// untaken says, from what Redis answered about an item, whether it waits
// for no node: it is on its stream, and either no node has read it (a
// stream with no group yet, which no node has joined, included), or it
// has been idle, pending to a node, for ClaimIdle.
func (fe *FrontEnd) untaken(pending *redis.XPendingExtCmd, there *redis.XMessageSliceCmd) bool {
	if err := pending.Err(); err != nil && !redis.HasErrorPrefix(err, "NOGROUP") {
		return false
	}
	if there.Err() != nil || len(there.Val()) == 0 {
		return false
	}
	p := pending.Val()
	return len(p) == 0 || p[0].Idle >= fe.cfg.ClaimIdle
}

// lostLooks runs a front end's looks for the items Redis lost (see
// lookForLost), one at a time, beside its checks.
type lostLooks struct {
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
	running chan struct{} // a token while a look runs
	all     atomic.Bool   // Redis was down: look at every call
	last    time.Time     // when the last look began
}

func newLostLooks() *lostLooks {
	ctx, cancel := context.WithCancel(context.Background())
	return &lostLooks{ctx: ctx, cancel: cancel, running: make(chan struct{}, 1)}
}

// stop ends the look under way and waits for it.
func (l *lostLooks) stop() {
	l.cancel()
	l.wg.Wait()
}

// maybeStart starts a look when every call is to be looked at, or the
// last began lostLookEvery ago, unless one runs: a later check starts the
// next.
func (l *lostLooks) maybeStart(fe *FrontEnd) {
	if !l.all.Load() && time.Since(l.last) < lostLookEvery {
		return
	}
	select {
	case l.running <- struct{}{}:
	default:
		return
	}
	l.last = time.Now()
	l.wg.Go(func() {
		defer func() { <-l.running }()
		gap := fe.unrefreshed.Load()
		all := l.all.Swap(false)
		minAge := lostLookAge
		if all {
			minAge = 0
		}
		ctx, cancel := context.WithTimeout(l.ctx, lostLookEvery)
		defer cancel()
		if err := fe.lookForLost(ctx, minAge); err != nil {
			l.all.CompareAndSwap(false, all) // look again
			if l.ctx.Err() == nil {
				fe.repeats.Log(fe.cfg.Logger, slog.LevelWarn, repeatKind("look for lost", err), "look for items redis lost", "redis", fe.where, "err", err)
			}
		} else if all {
			// Every call sent before the span's end was looked at.
			fe.unrefreshed.CompareAndSwap(gap, nil)
		}
	})
}

// nodesSince is the heartbeat, on Redis's clock as now is, after which a
// node counts as alive at a check: nodeSilence before now, or, for
// nodeSilence after an outage (the front end heard nothing from Redis
// for longer than a heartbeat), nodeSilence before the outage began. The
// nodes could not beat while Redis did not serve, nor while it froze and
// its clock went on, and they beat again at their pace, their dials of
// Redis retried at most once a second: a node alive when Redis went
// counts until it has had the time to. One that died meanwhile counts
// that long too; the items sent for it wait for another node, or fail
// once no node is left (see failWhenGone). It requires that checkMu is
// held.
func (fe *FrontEnd) nodesSince(now time.Time) time.Time {
	if gap := time.Since(fe.refreshed); !fe.refreshed.IsZero() && gap > heartbeat {
		fe.graceSince = now.Add(-gap - nodeSilence)
		fe.graceUntil = time.Now().Add(nodeSilence)
	}
	if time.Now().Before(fe.graceUntil) {
		return fe.graceSince
	}
	return now.Add(-nodeSilence)
}

// noteRefreshed records that a check refreshed the reply stream's TTL at
// now, and the span before it when that was longer than the TTL. It
// requires that checkMu is held.
func (fe *FrontEnd) noteRefreshed(now time.Time) {
	if !fe.refreshed.IsZero() && now.Sub(fe.refreshed) > fe.cfg.ReplyTTL {
		gap := &span{from: fe.refreshed, to: now}
		fe.lastGap.Store(gap)
		fe.unrefreshed.Store(gap)
	}
	fe.refreshed = now
	fe.refreshedAt.Store(now.UnixNano())
}

// check asks Redis for the nodes alive and the backlog, and fails the
// calls waiting for answers when Redis has lost its data since the last
// check.
func (fe *FrontEnd) check(ctx context.Context) error {
	fe.checkMu.Lock()
	defer fe.checkMu.Unlock()
	began := time.Now()
	err := fe.checkOnce(ctx, began, false)
	defer func() {
		if err != nil && !fe.noNodeLogged {
			// A spell without a node is timed from checks that found
			// Redis serving (see noteNodesTaking).
			fe.noNodeSince = time.Time{}
		}
	}()
	stall, stalled := fe.stalls.through(err, began)
	switch {
	case ctx.Err() != nil:
	case stalled:
		// The front end, not Redis, did not run: its answer waits unread
		// on a connection whose time ran out meanwhile. Redis is asked
		// again before it is taken for down.
		fe.cfg.Logger.Warn("this front end did not run for a while (stopped, or starved of CPU); checking redis again", "for", stall.Round(time.Millisecond), "redis", fe.where)
		err = fe.checkOnce(ctx, time.Now(), true)
	case timedOut(err):
		// One answer late, on a loaded machine or a slow link, is not an
		// outage: taking Redis for down turns every new request away
		// until the next check. A Redis that hangs is late again.
		fe.cfg.Logger.Debug("a check of redis ran out of time; checking again", "redis", fe.where, "err", err)
		err = fe.checkOnce(ctx, time.Now(), true)
	}
	return err
}

// checkOnce is one check, begun at began. A check that ran out of time as
// the front end stalled does not take Redis for down, nor a first one
// that ran out of time, unless final (see check) or its caller's ctx
// ended, which leaves no time to check again. It requires that checkMu is
// held.
func (fe *FrontEnd) checkOnce(ctx context.Context, began time.Time, final bool) error {
	parent := ctx
	// Its time runs once it has its turn.
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := fe.probe.check(ctx, fe.rdb, fe.where); err != nil {
		if _, stalled := fe.stalls.through(err, began); !stalled {
			fe.markDown(err)
		}
		return err
	}
	fe.clock.ensure(ctx, fe.rdb)
	pipe := fe.rdb.Pipeline()
	timeCmd, sent := fe.clock.timeCmd(ctx, pipe)
	heardAfter := fe.nodesSince(fe.clock.now())
	since := "(" + unixMs(heardAfter)
	nodes := pipe.ZCount(ctx, fe.k.nodes, since, "+inf")
	leaving := pipe.ZCount(ctx, fe.k.leaving, since, "+inf")
	backlog := pipe.XLen(ctx, fe.k.items)
	room := pipe.MGet(ctx, fe.k.room, fe.k.sizes) // no error when they are not there, or of another type
	model := pipe.HMGet(ctx, fe.k.model, modelFields...)
	versions := pipe.HGetAll(ctx, fe.k.versions)
	pipe.Expire(ctx, fe.replyKey, fe.cfg.ReplyTTL)
	pipe.SetNX(ctx, fe.k.epoch, randomHex(8), 0)
	epoch := pipe.Get(ctx, fe.k.epoch)
	cmds, err := pipe.Exec(ctx)
	if brokenConn(err) && ctx.Err() == nil {
		// A connection closed under the check (CLIENT KILL, a proxy's
		// reset) says nothing of Redis: once more, on another. Its
		// commands may run twice, which does no harm.
		again := fe.rdb.Pipeline()
		for _, cmd := range cmds {
			_ = again.Process(ctx, cmd)
		}
		cmds, err = again.Exec(ctx)
	}
	if redis.HasErrorPrefix(model.Err(), "NOPERM") {
		// A user whose ACL leaves out the model's key: the check goes on
		// without it (see modelRefused).
		cmds = slices.DeleteFunc(cmds, func(c redis.Cmder) bool { return c == redis.Cmder(model) })
		if err != nil && !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			err = nil
		}
	}
	versionsRefused := versionsErr([]redis.Cmder{versions})
	if versionsRefused != nil {
		// Refused (a permission, or its key of another type): the check
		// goes on without the versions, which are not counted.
		if !fe.versionsLogged.Swap(true) {
			fe.cfg.Logger.Warn("redis refuses this front end's read of the model's versions: the versions the nodes run are not counted (let the user read "+fe.k.versions+")", "redis", fe.where, "err", versionsRefused)
		}
		cmds = slices.DeleteFunc(cmds, func(c redis.Cmder) bool { return c == redis.Cmder(versions) })
		if err != nil && !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Err() != nil }) {
			err = nil
		}
	}
	if err = fe.clock.pipelineError(cmds, timeCmd, err); err != nil {
		// These commands are never wrong: an error Redis sent back is a
		// refusal to serve (a wrong password, no permission), as bad as
		// no answer.
		switch {
		case timedOut(err):
			err = fmt.Errorf("no answer within %s%s: %w", checkTimeout, connHint(fe.rdb, err), err)
		case brokenConn(err):
			err = fmt.Errorf("the connection closed at once (%w)%s", err, connHint(fe.rdb, err))
		case notRedis(err) != nil:
			err = fmt.Errorf("the server there %w", notRedis(err))
		case authError(err):
			// Once serving, an outage that an operator mends (see Refusal).
			err = fmt.Errorf("it refuses this front end's authentication (the password or user changed on Redis, or the user is gone?): %w", err)
		case permissionRefused(err):
			err = fmt.Errorf("it refuses this front end a permission its checks need (the README's \"Many machines\" lists what the user needs): %w", err)
		case redis.HasErrorPrefix(err, "WRONGTYPE"):
			// Written by hand, or by another program: Redis names no key.
			if which := wrongTypes(ctx, fe.rdb, fe.checkedKeys()...); which != "" {
				err = fmt.Errorf("%s (delete it, or give streamer a --stream-prefix of its own): %w", which, err)
			}
		}
		if _, stalled := fe.stalls.through(err, began); !stalled && (final || !timedOut(err) || ended(parent)) {
			fe.markDown(err)
		}
		return fmt.Errorf("redis at %s: %w", fe.where, err)
	}
	fe.clock.observe(timeCmd, sent)
	fe.noteRefreshed(time.Now())
	// Before the check's results are taken in: a front end is found
	// ready once it has looked at what these look at (and warned).
	fe.lookAtEviction(ctx)
	if !fe.admitProbed || fe.admitRefused.Load() != nil || fe.admitFailing.Load() != nil || time.Since(fe.admitProbedAt) >= admitProbeEvery {
		fe.probeAdmission(ctx)
	}
	fe.noteCheck(model, nodes.Val(), leaving.Val(), backlog.Val(), epoch.Val())
	if versionsRefused != nil {
		fe.noteVersions(nil, heardAfter)
	} else {
		fe.noteVersions(versions.Val(), heardAfter)
	}
	kept, mean := int64(0), int64(0)
	if v := room.Val(); len(v) == 2 {
		if s, ok := v[0].(string); ok { // "N TOKEN"
			n, _, _ := strings.Cut(s, " ")
			kept, _ = strconv.ParseInt(n, 10, 64)
		}
		if s, ok := v[1].(string); ok {
			mean, _ = strconv.ParseInt(s, 10, 64)
		}
	}
	fe.room.Store(kept)
	fe.sharedMean.Store(mean)
	// Full for a request of one item: the room kept for another counts
	// as taken (see admitScript), unless it is kept by a front end of a
	// larger bound than this one's.
	if kept > int64(fe.cfg.MaxBacklog) {
		kept = 0
	}
	if backlog.Val()+kept >= int64(fe.cfg.MaxBacklog) {
		fe.seenFull()
	}
	return nil
}

// checkedKeys are the keys a check reads, with the types streamer keeps
// there.
func (fe *FrontEnd) checkedKeys() []keyType {
	return []keyType{
		{fe.k.items, typeStream}, {fe.k.nodes, typeZSet}, {fe.k.leaving, typeZSet},
		{fe.k.model, typeHash}, {fe.k.epoch, typeString}, {fe.replyKey, typeStream},
	}
}

// admitProbeEvery is how often a front end that admits makes sure it
// still may (see probeAdmission): an operator may take a permission away
// from a running front end, which then says so before a request fails.
const admitProbeEvery = 5 * time.Second

// probeAdmission runs the admission script for no request, which reads
// what an admission reads, to learn whether Redis lets the front end
// admit requests (a script run in an epoch past, refused as such, was let
// run): at the first check, so that a front end whose user lacks a
// permission is not ready before any request is refused; then every
// admitProbeEvery; and at every check while it is refused, or fails
// (see failing), so that it is ready again once an operator has mended
// it. The keys it may replace, of another type, it mends itself (see
// mendKeys). It requires that checkMu is held.
func (fe *FrontEnd) probeAdmission(ctx context.Context) {
	fe.admitProbedAt = time.Now()
	fe.mu.Lock()
	epoch := fe.epoch
	fe.mu.Unlock()
	keys := fe.admitKeys()
	args := append(fe.admitArgs(nil, epoch), "probe")
	// Through pipelines, whose connections the check's own are: a lone
	// command would dial one more.
	run := func(eval func(redis.Pipeliner) *redis.Cmd) error {
		var cmd *redis.Cmd
		_, _ = fe.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			cmd = eval(pipe)
			return nil
		})
		return cmd.Err()
	}
	probe := func() error {
		err := run(func(pipe redis.Pipeliner) *redis.Cmd { return admitScript.EvalSha(ctx, pipe, keys, args...) })
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = run(func(pipe redis.Pipeliner) *redis.Cmd { return admitScript.Eval(ctx, pipe, keys, args...) })
		}
		return err
	}
	err := probe()
	if redis.HasErrorPrefix(err, "WRONGTYPE") && fe.mendKeys(ctx) {
		err = probe()
	}
	switch {
	case err == nil:
		fe.admitProbed = true
		if fe.admitRefused.Swap(nil) != nil {
			fe.cfg.Logger.Info("redis lets this front end admit requests again", "redis", fe.where)
		}
		if fe.admitFailing.Swap(nil) != nil {
			fe.cfg.Logger.Info("redis admits this front end's requests again", "redis", fe.where)
		}
	case permissionRefused(err):
		fe.admitProbed = true
		fe.refuseAdmissions(err)
	case failing(err):
		fe.admitProbed = true
		if fe.admitFailing.Load() == nil {
			// Once: the probes, four a second while it lasts, are not
			// counted with the admissions that fail.
			fe.failAdmissions(ctx, err)
		}
	case errors.As(err, new(redis.Error)):
		fe.admitProbed = true // an outage, which the check notes
	}
	// No answer says nothing of the permissions: the next check tries
	// again.
}

// mendKeys replaces those of the keys an admission reads that the front
// end may replace, when they hold another type than streamer keeps there,
// and says whether it replaced one; it logs what each held, which is lost.
// Every admission, or every one routed to a node, failed or passed over
// them:
//   - the room kept in the backlog (a string, "N TOKEN", which expires
//     within roomKeep): deleting it loses at most the room kept for one
//     large request, which that request keeps again at its next try;
//   - the mean size of the requests admitted of late (a string): the next
//     admission sets it again from its first request's size;
//   - the list of the nodes' own streams: each node lists its stream
//     again at its next heartbeat, and requests go to the shared stream
//     meanwhile.
func (fe *FrontEnd) mendKeys(ctx context.Context) bool {
	keys := []struct{ key, typ, msg string }{
		{fe.k.room, typeString, "the key of the room kept in the backlog held another type: deleted it, and what it held (room is kept again for the next request larger than most that finds none)"},
		{fe.k.sizes, typeString, "the key of the mean size of the requests admitted of late held another type: deleted it, and what it held (the next request admitted sets it again)"},
		{fe.k.streams, typeSet, "the list of the nodes' own streams held another type: deleted it, and what it held (each node lists its stream again within a heartbeat; no caller is routed back to a node meanwhile)"},
	}
	replaced := false
	for _, k := range keys {
		m, err := mend(ctx, fe.rdb, k.key, k.typ, "")
		if err != nil || !m.replaced(k.typ) {
			continue
		}
		fe.cfg.Logger.Error(k.msg, "key", k.key, "held", m.String(), "redis", fe.where)
		replaced = true
	}
	return replaced
}

// permissionRefused says whether err is Redis's refusal of a command, or
// of a key, to the user: NOPERM, or the same raised inside a script ("ERR
// The user executing the script can't run this command", "... can't
// access at least one of the keys").
func permissionRefused(err error) bool {
	if redis.HasErrorPrefix(err, "NOPERM") {
		return true
	}
	if !errors.As(err, new(redis.Error)) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "user executing the script can't run this command") ||
		strings.Contains(msg, "user executing the script can't access at least one of the keys")
}

// refuseAdmissions notes that Redis refuses the front end's admissions
// for err, a refused permission, and logs it once until one goes through.
func (fe *FrontEnd) refuseAdmissions(err error) {
	msg := err.Error()
	if fe.admitRefused.Swap(&msg) == nil {
		fe.cfg.Logger.Error("redis refuses this front end's admissions of requests: its user lacks a permission; it takes no requests until an operator grants it",
			"redis", fe.where, "err", err)
	}
}

// admissionRefused is the error of a request that Redis at where refuses
// to admit for msg, a refused permission.
func admissionRefused(where, msg string) error {
	return permissionf("redis at %s refuses this front end's admissions of requests: %s (its user lacks a permission: it needs the commands and keys the README's \"Many machines\" lists)", where, msg)
}

// noteCheck takes in what a check read: the prefix's model, the nodes
// alive and leaving, the backlog, and Redis's epoch, which changes when
// Redis lost its data (then the calls waiting fail). It requires that
// checkMu is held.
func (fe *FrontEnd) noteCheck(model *redis.SliceCmd, nodes, leaving, backlog int64, epoch string) {
	// The model before the nodes: a node of another model is alive only
	// once its model is there, and a request must not pass between the
	// two (see unavailable).
	if err := model.Err(); err != nil {
		modelRefused(fe.cfg.Logger, &fe.modelLogged, fe.k.model, err)
	}
	fe.modelErr = fe.noteModel(model.Val())
	// The counts first: Ready reads up and then nodes, and a count left
	// from before an outage (Redis restarted without its data, and the
	// nodes not heard from since) must not make it ready.
	fe.nodes.Store(nodes)
	fe.leaving.Store(leaving)
	fe.backlog.Store(backlog)
	fe.noteNodesTaking(nodes, leaving)
	fe.mu.Lock()
	if last := fe.epoch; epoch != last {
		fe.epoch = epoch
		if last != "" {
			fe.lostDataLocked()
			fe.toWithdraw = map[string][]string{} // gone with the data
			fe.withdrawQ = map[string][]string{}
			fe.unanswered = nil
		}
	}
	fe.mu.Unlock()
	fe.noteWritesTaken()
	if !fe.up.Swap(true) && !fe.fullLogged.Load() {
		fe.cfg.Logger.Info("redis reachable", "redis", fe.where)
	}
}

// noteNodesTaking logs, from the counts a check read, that no node has
// taken requests for noNodeLogAfter (none alive; those leaving finish
// their items, or have no worker able to run), and then that one does
// again: an operator sees from the log how long requests got 503 for want
// of a node. Shorter spells (a Redis restarted without its data, until
// the nodes beat again; front ends and nodes started together) are not
// logged, nor is a Redis out of memory, which refuses the nodes'
// heartbeats too, and is logged as such. It requires that checkMu is
// held.
func (fe *FrontEnd) noteNodesTaking(nodes, leaving int64) {
	now := time.Now()
	switch {
	case nodes > 0:
		if fe.noNodeLogged {
			fe.cfg.Logger.Info("a node takes requests again", "nodes", nodes, "after", now.Sub(fe.noNodeSince).Round(time.Millisecond), "redis", fe.where)
		}
		fe.noNodeSince, fe.noNodeLogged = time.Time{}, false
	case fe.noNodeSince.IsZero():
		fe.noNodeSince = now
	case !fe.noNodeLogged && now.Sub(fe.noNodeSince) >= noNodeLogAfter && fe.fullError() == nil:
		fe.noNodeLogged = true
		fe.cfg.Logger.Warn("no node takes requests: new ones get 503 until one does", "for", now.Sub(fe.noNodeSince).Round(time.Millisecond), "leaving", leaving, "redis", fe.where)
	}
}

// noNodeLogAfter is how long no node must take requests before a front
// end logs it (see noteNodesTaking).
const noNodeLogAfter = 3 * time.Second

// connHint is what to check, for a message, when err, a command's failure
// on rdb, says no more than that Redis gave no answer (over TLS, a server
// that does not speak it waits, as the client does, for the other to go
// on) or closed the connection at once; "" otherwise. A front end's checks
// and a node's start say alike. (Not a node's outage once it served: a
// connection closed then is most often Redis restarting.)
func connHint(rdb *redis.Client, err error) string {
	var dial *net.OpError
	switch {
	case timedOut(err) && rdb.Options().TLSConfig != nil:
		return " (over TLS: does Redis speak TLS at that address?)"
	case timedOut(err) && errors.As(err, &dial) && dial.Op == "dial":
		return " (nothing accepted the connection: is the host up, and its port open to this machine?)"
	case timedOut(err):
		// A port that accepts and says nothing: a Redis frozen, or a
		// server of another protocol waiting for more of what it takes
		// for a request of its own. Retried: a Redis resumes.
		return " (the connection was accepted, and nothing answered: a Redis that hangs or is paused (DEBUG SLEEP, CLIENT PAUSE, a long script), or a server that is not Redis, waiting for more; retrying until it answers as Redis)"
	case brokenConn(err):
		return ": is redis shutting down or restarting, at its maxclients, in protected mode (no password and no bind: it turns away clients from other machines), a proxy before it without its backend, or a TLS port reached without rediss://?"
	}
	return ""
}

// checkTimeout bounds a check: Redis answers it in well under a
// millisecond, and a Redis that does not answer in time is taken for down.
const checkTimeout = 500 * time.Millisecond

// admitTimeout bounds a round trip of admissions.
const admitTimeout = 2 * time.Second

// lostDataLocked fails the calls admitted before the epoch changed and
// waiting for answers: Redis lost their items (it came back from a restart
// without its data, or was flushed), and no node will read them. An item a
// node held as it happened may still be answered; that answer is dropped.
// The calls admitted in the new epoch (Redis refuses an admission in the
// old one) and those not yet admitted go on. It requires that fe.mu is
// held.
func (fe *FrontEnd) lostDataLocked() {
	err := fe.lostError()
	var lost []*call
	for _, c := range fe.calls {
		if c.epoch != "" && c.epoch != fe.epoch {
			lost = append(lost, c)
		}
	}
	if len(lost) == 0 {
		return
	}
	fe.cfg.Logger.Error("failing the requests waiting for answers", "requests", len(lost), "err", err)
	for _, c := range lost {
		fe.failLocked(c, err)
	}
	fe.noteIdleLocked()
}

// lostError is the error of a call whose items Redis lost.
func (fe *FrontEnd) lostError() error {
	return unavailablef("redis at %s lost its data (restarted without persistence, flushed, or its keys evicted for want of memory under a maxmemory-policy that evicts): the items waiting there are gone", fe.where)
}

// noteDown marks Redis unreachable after a failed command that did not get
// an answer from it.
func (fe *FrontEnd) noteDown(err error) {
	fe.noteFull(err)
	var answered redis.Error
	if errors.As(err, &answered) && !strings.HasPrefix(answered.Error(), "LOADING") {
		return // Redis answered: it is up, the command was wrong
	}
	if brokenConn(err) {
		// One connection closed or reset (a proxy, an operator's
		// CLIENT KILL, the client's own as Sentinel names a new master)
		// says nothing of Redis: the next check, on a new one, does. A
		// new master may lack the last writes of the old: the waiting
		// calls' items are looked for.
		fe.lookAll.Store(true)
		return
	}
	fe.markDown(err)
}

// brokenConn says whether err is a connection closed or reset by its peer,
// or closed by the client itself (go-redis closes its connections to a
// master that Sentinel has replaced, those in use too), rather than no
// answer: Redis may well serve on a new one. Taken for no answer, a
// planned failover refused every request for up to a check's interval
// while the new master served.
func brokenConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// timedOut says whether err is a command that ran out of time: its
// context's, or the socket's deadline, which the client sets from it.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// fullError says that Redis refused a write for want of memory within the
// last Outage (see noteFull), or nil.
func (fe *FrontEnd) fullError() error {
	at := fe.fullAt.Load()
	if at == 0 || fe.sinceBorn()+1-at >= int64(fe.cfg.Outage) {
		return nil
	}
	return unavailablef("redis at %s is out of memory (OOM) and refuses writes (raise its maxmemory, or lower --max-queue): requests cannot be admitted, nor their answers written", fe.where)
}

// noteFull notes err, a failed command, when it is Redis's refusal of a
// write for want of memory (OOM): a Redis at its maxmemory, with nothing
// it may evict, refuses them while its memory is over the bound, and
// serves as it dips under, so that the front end's checks pass and fail
// by turns. While it lasts, the front end takes no request, and the
// requests waiting for answers, which the nodes cannot write, fail once
// it has lasted Outage, as in an outage.
func (fe *FrontEnd) noteFull(err error) {
	if !outOfMemory(err) {
		return
	}
	fe.fullAt.Store(fe.sinceBorn() + 1)
	if !fe.fullLogged.Swap(true) {
		fe.cfg.Logger.Error("redis is out of memory and refuses writes: this front end takes no requests, and fails those waiting after a second, until it takes writes again (raise its maxmemory, or lower --max-queue)", "redis", fe.where, "err", err)
	}
}

// noteWritesTaken logs, once a check finds that Redis has taken the front
// end's writes for Outage, that a spell of refusals for want of memory
// has ended. It requires that checkMu is held.
func (fe *FrontEnd) noteWritesTaken() {
	if fe.fullError() == nil && fe.fullLogged.Swap(false) {
		fe.cfg.Logger.Info("redis takes writes again", "redis", fe.where)
	}
}

// markDown marks Redis unusable, for err.
func (fe *FrontEnd) markDown(err error) {
	fe.noteFull(err)
	fe.lookAll.Store(true)
	msg := err.Error()
	fe.lastErr.Store(&msg)
	if fe.up.Swap(false) && !outOfMemory(err) {
		// A full Redis serves as its memory dips under the bound, and
		// is logged as full (see noteFull).
		fe.cfg.Logger.Error("redis does not serve", "redis", fe.where, "err", err)
	}
}

// Close stops admitting requests, waits for those admitted to be answered
// until ctx ends, then fails the rest with ErrShuttingDown and stops. A
// call that an outage fails while Close waits (Redis or every node gone
// for Outage) is told the outage's cause, as it would be without Close.
// While Redis hangs, it returns up to about 4 s after ctx ends: it waits
// for its commands under way, each bounded by its own timeout.
//
// Only the first call closes. Another call made while it runs waits for
// it to end, bounded by its own ctx, and returns nil (or its ctx's
// error); a call after it has ended returns nil at once.
//
// A Close that overtakes Start's check makes that Start return
// supervisor.ErrShuttingDown, and waits for it to end.
func (fe *FrontEnd) Close(ctx context.Context) error {
	fe.lifeMu.Lock()
	again := fe.closed.Swap(true)
	fe.lifeMu.Unlock()
	if again {
		return fe.awaitClose(ctx)
	}
	defer close(fe.closeDone)
	var err error
	fe.mu.Lock()
	waiting := len(fe.calls)
	fe.mu.Unlock()
	if waiting > 0 {
		select {
		case <-fe.idle:
		case <-ctx.Done():
			fe.mu.Lock()
			err = fmt.Errorf("broker: %d requests unanswered at close, failed with ErrShuttingDown: %w", len(fe.calls), ctx.Err())
			fe.mu.Unlock()
		}
	}
	close(fe.closing)
	fe.done.Wait()
	fe.mu.Lock()
	fe.withdrawLaterLocked()
	fe.failAllLocked(supervisor.ErrShuttingDown)
	fe.mu.Unlock()
	fe.withdrawing.Wait()
	// Nobody waits for those items now, nor for those of the calls given
	// up meanwhile: those no node has read go, and whatever nodes still
	// write for it expires with the key.
	dctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fe.withdrawAll(dctx, fe.takeToWithdraw())
	fe.withdrawUnanswered(dctx)
	fe.rdb.Del(dctx, fe.replyKey)
	err = errors.Join(err, fe.rdb.Close())
	// The reader's read in flight, if Redis hangs, ends with the client.
	fe.reader.Wait()
	return err
}

// awaitClose waits, for a Close other than the first, until the first has
// ended, or ctx ends.
func (fe *FrontEnd) awaitClose(ctx context.Context) error {
	select {
	case <-fe.closeDone:
		return nil // ended already, whatever ctx says
	default:
	}
	select {
	case <-fe.closeDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("broker: wait for the front end's first close: %w", ctx.Err())
	}
}

// backoff paces retries while Redis is down: 50ms, doubling up to 1s.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 50 * time.Millisecond} }

func (b *backoff) reset() { b.next = 50 * time.Millisecond }

// wait waits for the next retry, or until stop is closed.
func (b *backoff) wait(stop <-chan struct{}) {
	t := time.NewTimer(b.next)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	}
	b.next = min(2*b.next, time.Second)
}
