package supervisor_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/supervisor"
)

// BenchmarkOverload offers ten times the capacity of one worker running the
// sleep model (10ms + 100us per item, batch 64) as an open loop of
// single-item requests, through real worker processes. The queue fills and
// most requests are refused; what matters is that refusing costs so little
// that the worker stays fed: served items/s as a fraction of the capacity,
// and the p99 latency of the admitted requests against the bound that the
// queue's length sets (MaxQueue / capacity). Each b.N is a second of
// measured load, after two seconds in which the queue fills; run it with
// -benchtime 4x.
func BenchmarkOverload(b *testing.B) {
	const batch, overload = 64, 10
	cost := builtin.NewSleep(10*time.Millisecond, 100*time.Microsecond)
	capacity := batch / cost.Cost(batch).Seconds()
	cfg := processConfig("sleep:10ms,100us", 1, batch)
	s := startBench(b, cfg)
	maxQueue := 100 * batch // the default for one worker
	item, _ := msgpack.Marshal("overload")

	var mu sync.Mutex
	var latencies []time.Duration
	measuring := false
	var waiting sync.WaitGroup
	offer := func() {
		t0 := time.Now()
		f, err := s.Submit(context.Background(), [][]byte{item})
		if errors.Is(err, supervisor.ErrOverloaded) {
			return
		}
		if err != nil {
			b.Error(err)
			return
		}
		waiting.Go(func() {
			if _, err := f.Result(context.Background()); err != nil {
				b.Error(err)
				return
			}
			took := time.Since(t0)
			mu.Lock()
			if measuring {
				latencies = append(latencies, took)
			}
			mu.Unlock()
		})
	}
	// An open loop: requests on a fixed schedule, whatever became of the
	// earlier ones, from many clients at once, as many connections would
	// be: a refusal that holds the lock is paid by all of them.
	const generators = 8
	rate := overload * capacity / generators // per generator, per second
	var offered atomic.Int64
	run := func(d time.Duration) {
		var gens sync.WaitGroup
		start := time.Now()
		end := start.Add(d)
		for range generators {
			gens.Go(func() {
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				// Catch up on late ticks: the schedule, not the ticker,
				// sets the rate.
				sent := 0
				for now := start; now.Before(end); now = <-tick.C {
					due := int(rate * now.Sub(start).Seconds())
					for ; sent < due; sent++ {
						offer()
					}
				}
				offered.Add(int64(sent))
			})
		}
		gens.Wait()
	}
	run(2 * time.Second)
	mu.Lock()
	measuring = true
	mu.Unlock()
	answered0, failed0 := s.Stats().Answered, s.Stats().Failed
	offered.Store(0)
	cpu0 := cpuTime(b)
	b.ResetTimer()
	start := time.Now()
	run(time.Duration(b.N) * time.Second)
	elapsed := time.Since(start)
	st := s.Stats()
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	mu.Lock()
	measuring = false
	mu.Unlock()
	waiting.Wait()

	served := float64((st.Answered-answered0)-(st.Failed-failed0)) / elapsed.Seconds()
	b.ReportMetric(float64(offered.Load())/elapsed.Seconds()/capacity, "offered-x")
	b.ReportMetric(served, "served/s")
	b.ReportMetric(served/capacity, "of-capacity")
	b.ReportMetric(float64(cpu)/elapsed.Seconds()/float64(time.Second), "cpu-cores")
	if len(latencies) > 0 {
		slices.Sort(latencies)
		p99 := latencies[len(latencies)*99/100]
		bound := time.Duration(float64(maxQueue) / capacity * float64(time.Second))
		b.ReportMetric(p99.Seconds()*1000, "p99-ms")
		b.ReportMetric(p99.Seconds()/bound.Seconds(), "p99-of-bound")
	}
}

// BenchmarkLargeAmongSmall runs the sleep model (10ms + 100us per item,
// batch 64, one worker process) under a closed-loop flood of small
// requests (300 clients of 2 items, each retrying 10 ms after a refusal)
// beside 1 client of large requests (150 items, retrying after the
// Retry-After of a second, as HTTP clients are told), against a queue of
// 200. A large request needs 150 places free at once, which the small
// ones fill first. Each b.N is 10 s of load; run it with -benchtime 1x.
// It reports the large requests answered a second, their mean latency
// from their first try, and the items answered a second as a fraction of
// the worker's capacity.
func BenchmarkLargeAmongSmall(b *testing.B) {
	const batch, small, large, smalls, maxQueue = 64, 2, 150, 300, 200
	cost := builtin.NewSleep(10*time.Millisecond, 100*time.Microsecond)
	capacity := batch / cost.Cost(batch).Seconds()
	cfg := processConfig("sleep:10ms,100us", 1, batch)
	cfg.MaxQueue = maxQueue
	s := startBench(b, cfg)
	item, _ := msgpack.Marshal("x")
	items := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = item
		}
		return out
	}
	var answered, larges atomic.Int64
	var largeTime atomic.Int64 // summed, in nanoseconds
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var clients sync.WaitGroup
		client := func(n int, retry time.Duration, done func(took time.Duration)) {
			for ctx.Err() == nil {
				began := time.Now()
				for {
					_, err := s.Predict(ctx, items(n))
					if err == nil {
						answered.Add(int64(n))
						done(time.Since(began))
						break
					}
					if !errors.Is(err, supervisor.ErrOverloaded) {
						// The end of the run, which the streamer may see
						// a moment before ctx says so.
						if !errors.Is(err, supervisor.ErrDeadline) && !errors.Is(err, supervisor.ErrCanceled) {
							b.Error(err)
						}
						return
					}
					select {
					case <-time.After(retry):
					case <-ctx.Done():
						return
					}
				}
			}
		}
		for range smalls {
			clients.Go(func() { client(small, 10*time.Millisecond, func(time.Duration) {}) })
		}
		clients.Go(func() {
			client(large, time.Second, func(took time.Duration) {
				larges.Add(1)
				largeTime.Add(int64(took))
			})
		})
		clients.Wait()
		cancel()
	}
	elapsed := b.Elapsed().Seconds()
	b.ReportMetric(float64(larges.Load())/elapsed, "large/s")
	if n := larges.Load(); n > 0 {
		b.ReportMetric(float64(largeTime.Load())/float64(n)/1e6, "large-ms")
	}
	b.ReportMetric(float64(answered.Load())/elapsed/capacity, "of-capacity")
}
