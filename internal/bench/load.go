package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sample is one successful request. It holds no pointers, so that the
// garbage collector need not scan the millions of them a long run keeps.
type sample struct {
	at      time.Duration // since the measurement started, at send (open loop: scheduled send)
	latency time.Duration
}

// The kinds of failure of a request that got no answer.
const (
	// kindConnection: the connection was refused, reset or closed, or its
	// TLS handshake failed.
	kindConnection = "connection"
	// kindTimeout: no answer came within Config.RequestTimeout.
	kindTimeout = "timeout"
)

// overloadKinds are the answers of a server that has no room for the
// request for now (a full queue, no worker able to run), over each API:
// refusals sent back at once, after which a closed-loop client pauses as
// after a connection error (see backoff), as a client of a real service
// does; else it sends again at once, and the load client's own loop takes
// the CPU the server's workers run on.
var overloadKinds = []string{"http 429", "http 503", "overloaded", "unavailable", "grpc Unavailable"}

// errorKinds numbers the kinds of failure the loads count, and keeps the
// text of the first failure of each.
type errorKinds struct {
	mu    sync.Mutex
	kinds []failureKind // kinds[0] is "", success
	ids   map[string]uint16
}

// failureKind is one kind of failure: its name ("connection", "http 429") and
// the text of its first failure that said more than the name.
type failureKind struct {
	name  string
	first string
}

func newErrorKinds() *errorKinds {
	return &errorKinds{kinds: []failureKind{{}}, ids: map[string]uint16{"": 0}}
}

// idsOf numbers each of names.
func (k *errorKinds) idsOf(names []string) []uint16 {
	ids := make([]uint16, len(names))
	for i, name := range names {
		ids[i] = k.id(name, nil)
	}
	return ids
}

// id numbers kind, "" being 0, and keeps err's text if it is the first of
// its kind to bring one; past 65535 distinct kinds, the rest share the last
// number.
func (k *errorKinds) id(kind string, err error) uint16 {
	if kind == "" {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	id, ok := k.ids[kind]
	if !ok {
		if len(k.kinds) > math.MaxUint16 {
			return math.MaxUint16
		}
		id = uint16(len(k.kinds))
		k.kinds = append(k.kinds, failureKind{name: kind})
		k.ids[kind] = id
	}
	if err != nil && k.kinds[id].first == "" {
		k.kinds[id].first = err.Error()
	}
	return id
}

// kind is the kind numbered id.
func (k *errorKinds) kind(id uint16) failureKind {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kinds[id]
}

// loadRun is what the load loops share.
type loadRun struct {
	// send is the sender, its outcome numbered; refused says that this
	// outcome is the refusal that ends the load (see refusalWatch).
	send func(context.Context) (kind uint16, refused bool)
	// stop ends the load for the refusal of kind. A loop calls it once it
	// has counted that refusal, answered: called from send, it would end
	// the context the request was sent under, and the loop would count
	// the request cut short.
	stop  func(kind uint16)
	start time.Time
	// warmup is when the window opens, from start: failures answered
	// before it are not counted.
	warmup time.Duration
	// backOffAfter are the kinds of failure after which a closed-loop
	// client pauses (see backoff).
	backOffAfter []uint16
	done         *atomic.Int64 // counts answers for the progress bar; nil without one
}

// tally is what a load counted: the successful requests, the failures
// answered inside the window by kind, and the requests that the end of the
// load cut short. One failure is a count, not a sample: a server that
// refuses connections fails requests by the million.
type tally struct {
	samples  []sample
	failures map[uint16]uint64
	cutShort int
	// oldest is the longest that a request cut short had waited.
	oldest time.Duration
	// scheduled counts an open loop's sends scheduled in the window, and
	// skipped those it did not send as too many requests were out.
	scheduled, skipped int
}

// cut counts a request sent at sent and cut short at end.
func (t *tally) cut(sent, end time.Duration) {
	t.cutShort++
	t.oldest = max(t.oldest, end-sent)
}

// record counts a request sent and answered at these times since the start.
func (t *tally) record(run loadRun, sent, answered time.Duration, kind uint16) {
	if run.done != nil {
		run.done.Add(1)
	}
	if kind == 0 {
		t.samples = append(t.samples, sample{at: sent, latency: answered - sent})
		return
	}
	if answered < run.warmup {
		return
	}
	if t.failures == nil {
		t.failures = map[uint16]uint64{}
	}
	t.failures[kind]++
}

// add adds o's counts to t's.
func (t *tally) add(o tally) {
	t.samples = append(t.samples, o.samples...)
	t.cutShort += o.cutShort
	t.oldest = max(t.oldest, o.oldest)
	for kind, n := range o.failures {
		if t.failures == nil {
			t.failures = map[uint16]uint64{}
		}
		t.failures[kind] += n
	}
}

// load sends requests for the warm-up and the measured window and counts
// what happened to them. It stops early, with the reason as refused, when
// the server refuses every request alike (see refusalWatch).
func (cfg *Config) load(ctx context.Context, send sender) (counted tally, kinds *errorKinds, refused error) {
	d := cfg.Warmup + cfg.Duration
	// The end of the load cancels the requests still out; it is not their
	// deadline, which the supervisor would enforce on its own clock and count
	// as a failure.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopLoad := time.AfterFunc(d, func() { cancel(nil) })
	defer stopLoad.Stop()
	// Answers are counted only for the bar: a counter that every client
	// bumps costs a contended cache line per request.
	done, stopBar := cfg.startProgress(d)
	kinds = newErrorKinds()
	var watch refusalWatch
	run := loadRun{
		send: func(ctx context.Context) (uint16, bool) {
			kind, err := send(ctx)
			id := kinds.id(kind, err)
			return id, watch.refused(kind, id)
		},
		stop:         func(id uint16) { cancel(refusal(kinds.kind(id))) },
		start:        time.Now(),
		warmup:       cfg.Warmup,
		backOffAfter: kinds.idsOf(append([]string{kindConnection}, overloadKinds...)),
		done:         done,
	}
	if cfg.Rate > 0 {
		counted = openLoop(ctx, run, cfg.Rate, cfg.Concurrency, d)
	} else {
		counted = closedLoop(ctx, run, cfg.Concurrency)
	}
	stopBar()
	if cause := context.Cause(ctx); errors.Is(cause, errRefused) {
		refused = cause
	}
	return counted, kinds, refused
}

// errRefused means that the server refused every request alike.
var errRefused = errors.New("the server refuses the requests as they are")

// maxRefusals is how many refusals in a row, and no success, stop a load.
const maxRefusals = 100

// refusal is the error of a load stopped by maxRefusals of kind.
func refusal(kind failureKind) error {
	said := ""
	if kind.first != "" {
		said = ", the server saying " + kind.first
	}
	return fmt.Errorf("%w: the first %d requests were all answered %s%s, and none succeeded; stopped early rather than load for the whole --duration",
		errRefused, maxRefusals, kind.name, said)
}

// refusalWatch watches a load for a server that refuses every request
// alike: an --items-per-request above its --max-items (413, or over gRPC
// RESOURCE_EXHAUSTED), a missing token (401), an --input it cannot read
// (400) (see clientError). While no request has
// succeeded, maxRefusals answers in a row of one client error stop the
// load: it can only fail, for as long as it is asked to run. 408 and 429,
// which a busy server gives, are not refusals, and nor is any other
// failure; once a request gets anything but the first refusal's answer,
// the watch is over, and costs a load of a flag per request.
type refusalWatch struct {
	over  atomic.Bool
	first atomic.Uint32 // the kind of the first refusal; 0 before it
	count atomic.Int64
}

// refused counts a request's outcome, of this kind numbered id, and says
// whether it is the refusal that ends the load.
func (w *refusalWatch) refused(kind string, id uint16) bool {
	if w.over.Load() {
		return false
	}
	if !clientError(kind) {
		w.over.Store(true)
		return false
	}
	if w.first.CompareAndSwap(0, uint32(id)); w.first.Load() != uint32(id) {
		w.over.Store(true)
		return false
	}
	return w.count.Add(1) == maxRefusals
}

// clientError says whether a failure of kind says the request is wrong for
// the server: an http 4xx but 408 and 429, which a busy server gives, or
// the gRPC codes of those (see the gRPC service's codes in the README).
func clientError(kind string) bool {
	switch kind {
	case "http 408", "http 429":
		return false
	case "grpc InvalidArgument", "grpc NotFound", "grpc ResourceExhausted", "grpc Unauthenticated", "grpc PermissionDenied", "grpc Unimplemented":
		return true
	}
	return strings.HasPrefix(kind, "http 4")
}

// closedLoop runs clients that each send their next request when the last
// one is answered. Requests cut short by the end of the load are counted
// apart.
func closedLoop(ctx context.Context, run loadRun, clients int) tally {
	results := make([]tally, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { results[c] = client(ctx, run) })
	}
	wg.Wait()
	var t tally
	for _, r := range results {
		t.add(r)
	}
	return t
}

// client is one closed-loop client. It keeps its counts to itself until
// the end, and sends under a context of its own: what each request does
// with its context then stays off the one context all clients share, whose
// cache line would otherwise bounce between the cores at every request.
func client(ctx context.Context, run loadRun) tally {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var t tally
	var pause backoff
	defer pause.stop()
	for ctx.Err() == nil {
		// time.Since reads only the monotonic clock; time.Now reads both.
		sent := time.Since(run.start)
		kind, refused := run.send(ctx)
		if ctx.Err() != nil {
			t.cut(sent, time.Since(run.start))
			break
		}
		t.record(run, sent, time.Since(run.start), kind)
		if refused {
			run.stop(kind)
			break
		}
		if kind != 0 && slices.Contains(run.backOffAfter, kind) {
			pause.wait(ctx)
		} else {
			pause.reset()
		}
	}
	return t
}

// Bounds of a closed-loop client's pause after a connection error.
const (
	minBackoff = time.Millisecond
	maxBackoff = 100 * time.Millisecond
)

// backoff is a closed-loop client's pause after a connection error or an
// overload's refusal (see overloadKinds): from
// minBackoff, doubling at each error in a row up to maxBackoff, and none
// again once a request is answered. A server that is down fails each
// request at once: without the pause a few clients sent it a million
// requests in three seconds, and the pause costs a server that closed one
// connection a millisecond of one client.
type backoff struct {
	pause time.Duration
	timer *time.Timer
}

// wait pauses for the next pause, or until ctx ends.
func (b *backoff) wait(ctx context.Context) {
	b.pause = min(max(2*b.pause, minBackoff), maxBackoff)
	if b.timer == nil {
		b.timer = time.NewTimer(b.pause)
	} else {
		b.timer.Reset(b.pause)
	}
	select {
	case <-b.timer.C:
	case <-ctx.Done():
	}
}

// reset makes the next pause the shortest.
func (b *backoff) reset() { b.pause = 0 }

// stop releases the timer.
func (b *backoff) stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// openLoop sends rate requests per second on a fixed schedule; latency counts
// from the scheduled time, so a sender that falls behind shows as latency
// rather than as a lower rate. At most maxInFlight are outstanding: beyond
// that a send is skipped, and counted as such.
// No send is scheduled at or past end, the end of the load, so that the
// schedule never overflows a duration.
func openLoop(ctx context.Context, run loadRun, rate float64, maxInFlight int, end time.Duration) tally {
	var mu sync.Mutex
	var t tally
	scheduled, skipped := 0, 0
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxInFlight)
	interval := float64(time.Second) / rate
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		if float64(i)*interval >= float64(end) {
			<-ctx.Done()
			break
		}
		at := time.Duration(float64(i) * interval)
		if wait := time.Until(run.start.Add(at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		inWindow := at >= run.warmup
		if inWindow {
			scheduled++
		}
		select {
		case slots <- struct{}{}:
		default:
			if inWindow {
				skipped++
			}
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			kind, refused := run.send(ctx)
			answered := time.Since(run.start)
			mu.Lock()
			defer mu.Unlock()
			if ctx.Err() != nil {
				t.cut(at, answered)
				return
			}
			t.record(run, at, answered, kind)
			if refused {
				run.stop(kind)
			}
		})
	}
	wg.Wait()
	t.scheduled, t.skipped = scheduled, skipped
	return t
}
