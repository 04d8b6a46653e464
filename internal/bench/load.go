package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sample is one request's outcome. It holds no pointers, so that the
// garbage collector need not scan the millions of them a long run keeps.
type sample struct {
	at      time.Duration // since the measurement started, at send (open loop: scheduled send)
	latency time.Duration
	errKind uint16 // an errorKinds number; 0 for success
}

// errorKinds numbers the kinds of failure the samples record.
type errorKinds struct {
	mu    sync.Mutex
	names []string // names[0] is "", success
	ids   map[string]uint16
}

func newErrorKinds() *errorKinds {
	return &errorKinds{names: []string{""}, ids: map[string]uint16{"": 0}}
}

// id numbers kind, "" being 0; past 65535 distinct kinds, the rest share
// the last number.
func (k *errorKinds) id(kind string) uint16 {
	if kind == "" {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	id, ok := k.ids[kind]
	if !ok {
		if len(k.names) > math.MaxUint16 {
			return math.MaxUint16
		}
		id = uint16(len(k.names))
		k.names = append(k.names, kind)
		k.ids[kind] = id
	}
	return id
}

// name is the kind numbered id.
func (k *errorKinds) name(id uint16) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.names[id]
}

// loadRun is what the load loops share.
type loadRun struct {
	send  func(context.Context) uint16 // the sender, its outcome numbered
	kinds *errorKinds
	start time.Time
	done  *atomic.Int64 // counts answers for the progress bar; nil without one
}

// load sends requests for the warm-up and the measured window and returns
// what happened to each.
func (cfg *Config) load(ctx context.Context, send sender) ([]sample, *errorKinds) {
	d := cfg.Warmup + cfg.Duration
	// The end of the load cancels the requests still out; it is not their
	// deadline, which the supervisor would enforce on its own clock and count
	// as a failure.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopLoad := time.AfterFunc(d, cancel)
	defer stopLoad.Stop()
	// Answers are counted only for the bar: a counter that every client
	// bumps costs a contended cache line per request.
	done, stopBar := cfg.startProgress(d)
	kinds := newErrorKinds()
	run := loadRun{
		send:  func(ctx context.Context) uint16 { return kinds.id(send(ctx)) },
		kinds: kinds,
		start: time.Now(),
		done:  done,
	}
	var samples []sample
	if cfg.Rate > 0 {
		samples = openLoop(ctx, run, cfg.Rate, cfg.Concurrency, d)
	} else {
		samples = closedLoop(ctx, run, cfg.Concurrency)
	}
	stopBar()
	return samples, kinds
}

// closedLoop runs clients that each send their next request when the last
// one is answered. Requests cut short by the end of the load are not counted.
func closedLoop(ctx context.Context, run loadRun, clients int) []sample {
	results := make([][]sample, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { results[c] = client(ctx, run) })
	}
	wg.Wait()
	return slices.Concat(results...)
}

// client is one closed-loop client. It keeps its samples to itself until
// the end, and sends under a context of its own: what each request does
// with its context then stays off the one context all clients share, whose
// cache line would otherwise bounce between the cores at every request.
func client(ctx context.Context, run loadRun) []sample {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var samples []sample
	for ctx.Err() == nil {
		// time.Since reads only the monotonic clock; time.Now reads both.
		sent := time.Since(run.start)
		kind := run.send(ctx)
		if ctx.Err() != nil {
			break
		}
		samples = append(samples, sample{at: sent, latency: time.Since(run.start) - sent, errKind: kind})
		if run.done != nil {
			run.done.Add(1)
		}
	}
	return samples
}

// openLoop sends rate requests per second on a fixed schedule; latency counts
// from the scheduled time, so a sender that falls behind shows as latency
// rather than as a lower rate. At most maxInFlight are outstanding: beyond
// that a request is counted as a client-side overload instead of being sent.
// No send is scheduled at or past end, the end of the load, so that the
// schedule never overflows a duration.
func openLoop(ctx context.Context, run loadRun, rate float64, maxInFlight int, end time.Duration) []sample {
	var mu sync.Mutex
	var samples []sample
	record := func(s sample) {
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
		if run.done != nil {
			run.done.Add(1)
		}
	}
	refused := run.kinds.id("client in-flight limit")
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
		select {
		case slots <- struct{}{}:
		default:
			record(sample{at: at, errKind: refused})
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			kind := run.send(ctx)
			if ctx.Err() != nil {
				return
			}
			record(sample{at: at, latency: time.Since(run.start.Add(at)), errKind: kind})
		})
	}
	wg.Wait()
	return samples
}
