package supervisor_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// These tests run the in-process streamer in a synctest bubble: the model
// "runs" by sleeping its cost on the bubble's fake clock, and the clients
// think on it too, so every figure is exact and the tests take no time.

// sleepModel costs fixed + perItem·n per batch, on the bubble's clock.
func sleepModel(fixed, perItem time.Duration) model.Model {
	return model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		time.Sleep(fixed + time.Duration(len(items))*perItem)
		return items, nil
	})
}

// returningClients runs clients that each send one item, wait for the answer,
// think, and send again, until stop is closed; it returns the latencies.
func returningClients(t *testing.T, s *supervisor.Streamer, clients int, think time.Duration, stop <-chan struct{}) func() []time.Duration {
	var mu sync.Mutex
	var latencies []time.Duration
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				latencies = append(latencies, time.Since(start))
				mu.Unlock()
				time.Sleep(think)
			}
		})
	}
	return func() []time.Duration {
		wg.Wait()
		return latencies
	}
}

func startBubble(t *testing.T, cfg supervisor.Config) *supervisor.Streamer {
	t.Helper()
	s, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// run loads s with clients for d of fake time and returns the latencies.
func run(t *testing.T, s *supervisor.Streamer, clients int, think, d time.Duration) []time.Duration {
	stop := make(chan struct{})
	wait := returningClients(t, s, clients, think, stop)
	time.Sleep(d)
	close(stop)
	return wait()
}

// A lone caller on an idle server never waits: each answer takes exactly
// the batch's cost.
func TestAdaptiveLoneCallerNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubble(t, supervisor.Config{InProcess: sleepModel(10*time.Millisecond, 100*time.Microsecond)})
		for i, took := range run(t, s, 1, 200*time.Microsecond, 2*time.Second) {
			if took != 10100*time.Microsecond {
				t.Fatalf("request %d took %s, want the batch's cost of 10.1ms", i, took)
			}
		}
		if st := s.Stats(); st.Dispatch.Waited != 0 || st.Dispatch.Idle == 0 {
			t.Fatalf("dispatch %+v: a lone caller must never be waited for", st.Dispatch)
		}
	})
}

// Eight clients that come back 200µs after their answer: greedy splits
// them into batches that alternate, adaptive waits for them and runs them
// together, once it has learnt the cost and their return.
func TestAdaptiveWaitsForReturningClients(t *testing.T) {
	mean := map[supervisor.Batching]float64{}
	for _, policy := range []supervisor.Batching{supervisor.BatchingGreedy, supervisor.BatchingAdaptive} {
		synctest.Test(t, func(t *testing.T) {
			s := startBubble(t, supervisor.Config{Batching: policy, InProcess: sleepModel(10*time.Millisecond, 100*time.Microsecond)})
			run(t, s, 8, 200*time.Microsecond, time.Second) // learning
			before := s.Stats()
			latencies := run(t, s, 8, 200*time.Microsecond, 2*time.Second)
			after := s.Stats()
			mean[policy] = meanBatch(before, after)
			if policy == supervisor.BatchingAdaptive {
				if after.Dispatch.Waited == 0 || !after.Cost.Fitted {
					t.Fatalf("dispatch %+v, cost %+v: want waits and a fitted cost", after.Dispatch, after.Cost)
				}
				if f, p := after.Cost.FixedMs, after.Cost.PerItemMs; f < 9.9 || f > 10.1 || p < 0.09 || p > 0.11 {
					t.Errorf("fitted cost %.3f ms + %.4f ms per item, want 10 + 0.1", f, p)
				}
				// One batch of 8 (10.8ms) plus the wait for the last client back.
				if p50 := median(latencies); p50 > 11100*time.Microsecond {
					t.Errorf("p50 %s, want about one batch of 8 (10.8ms)", p50)
				}
			}
		})
	}
	if mean[supervisor.BatchingAdaptive] < 7.5 || mean[supervisor.BatchingGreedy] > 6 {
		t.Fatalf("mean batch: greedy %.2f, adaptive %.2f; want greedy split and adaptive nearly all 8", mean[supervisor.BatchingGreedy], mean[supervisor.BatchingAdaptive])
	}
}

// A model with no fixed cost gains nothing from a fuller batch: once its
// cost is measured, it is never waited for. (Before the fit, while the
// batches seen are all alike, one wait in eight may be made to tell the
// fixed cost from the per-item cost.)
func TestAdaptiveNeverWaitsWithoutFixedCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startBubble(t, supervisor.Config{InProcess: sleepModel(0, 300*time.Microsecond)})
		run(t, s, 8, 200*time.Microsecond, 500*time.Millisecond) // learning
		before := s.Stats()
		if !before.Cost.Fitted || before.Cost.FixedMs > 0.01 {
			t.Fatalf("cost %+v after learning: want fitted, with no fixed cost", before.Cost)
		}
		run(t, s, 8, 200*time.Microsecond, 2*time.Second)
		if after := s.Stats(); after.Dispatch.Waited != before.Dispatch.Waited {
			t.Fatalf("dispatch %+v, cost %+v: waited %d times for a model without fixed cost", after.Dispatch, after.Cost, after.Dispatch.Waited-before.Dispatch.Waited)
		}
	})
}

func meanBatch(before, after supervisor.Stats) float64 {
	var items, batches uint64
	for n := range after.BatchSizes {
		c := after.BatchSizes[n] - before.BatchSizes[n]
		items += uint64(n) * c
		batches += c
	}
	return float64(items) / float64(max(batches, 1))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), ds...)
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	return sorted[len(sorted)/2]
}

// Callers who come back too late for their answer to be told apart (12 to
// 15ms after it, spread out, as through a broker, where a node cannot see
// whose return an item is): an idle worker that took whatever was queued
// would start batches of one or two and hold its worker for a whole fixed
// cost while the rest queue behind it. The rate at which items arrive says
// how large a batch the load allows (here about 6.5 per worker), and the
// adaptive policy waits for half of it: as many items answered, in batches
// that are almost never of one or two.
func TestAdaptiveWaitsForTheBatchTheRateAllows(t *testing.T) {
	small, answered := map[supervisor.Batching]float64{}, map[supervisor.Batching]uint64{}
	for _, policy := range []supervisor.Batching{supervisor.BatchingGreedy, supervisor.BatchingAdaptive} {
		synctest.Test(t, func(t *testing.T) {
			s := startBubble(t, supervisor.Config{Batching: policy, Workers: 4, InProcess: sleepModel(10*time.Millisecond, 100*time.Microsecond)})
			lateClients(t, s, 64, time.Second) // learning
			before := s.Stats()
			lateClients(t, s, 64, 2*time.Second)
			after := s.Stats()
			var batches, fewer uint64
			for n := range after.BatchSizes {
				c := after.BatchSizes[n] - before.BatchSizes[n]
				batches += c
				if n <= 2 {
					fewer += c
				}
			}
			small[policy] = float64(fewer) / float64(max(batches, 1))
			answered[policy] = after.Answered - before.Answered
		})
	}
	g, a := supervisor.BatchingGreedy, supervisor.BatchingAdaptive
	t.Logf("items answered: greedy %d, adaptive %d; batches of 1 or 2: greedy %.2f, adaptive %.2f", answered[g], answered[a], small[g], small[a])
	if small[g] < 0.3 || small[a] > 0.05 || float64(answered[a]) < 0.97*float64(answered[g]) {
		t.Fatalf("items answered: greedy %d, adaptive %d; batches of 1 or 2: greedy %.2f, adaptive %.2f of all; want greedy's mostly of 1 or 2 (the load this test makes), adaptive's almost never, and as many answered",
			answered[g], answered[a], small[g], small[a])
	}
}

// lateClients runs clients that come back 12 to 15ms after each answer, each
// after its own delay, for d of fake time.
func lateClients(t *testing.T, s *supervisor.Streamer, clients int, d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(12*time.Millisecond + time.Duration((i*7+round*13)%31)*100*time.Microsecond)
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
}
