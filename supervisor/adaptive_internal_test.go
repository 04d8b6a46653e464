package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/model"
)

// trained starts an in-process streamer on the bubble's clock whose policy
// has learnt a 10ms + 0.1ms/item model and eight callers who all come back
// 200µs after their answer, and that has just answered eight of them.
func trained(t *testing.T, maxLatency time.Duration) *Streamer {
	t.Helper()
	return trainedOn(t, 1, maxLatency)
}

// trainedOn is trained with workers workers.
func trainedOn(t *testing.T, workers int, maxLatency time.Duration) *Streamer {
	t.Helper()
	m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		time.Sleep(10*time.Millisecond + time.Duration(len(items))*100*time.Microsecond)
		return items, nil
	})
	s, err := New(Config{MaxLatency: maxLatency, InProcess: m, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	// Start returns once one worker is ready; the tests want them all.
	synctest.Wait()
	s.mu.Lock()
	for n := range 16 {
		s.cost.observe(n+1, 10*time.Millisecond+time.Duration(n+1)*100*time.Microsecond)
	}
	s.returns.ratio, s.returns.delay, s.returns.gap = 1, 200*time.Microsecond, 0
	s.returns.answered(time.Now(), 8)
	s.mu.Unlock()
	return s
}

// One of the eight comes back and the other seven never do: the policy
// waits for them, but never past MaxLatency.
func TestHoldEndsByMaxLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxLatency = 300 * time.Microsecond
		s := trained(t, maxLatency)
		time.Sleep(200 * time.Microsecond)
		start := time.Now()
		if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		cost := 10100 * time.Microsecond
		if took <= cost || took > cost+maxLatency {
			t.Fatalf("the lone returner took %s; want a wait of at most MaxLatency (%s) before its batch (%s)", took, maxLatency, cost)
		}
		if d := s.Stats().Dispatch; d.Waited+d.MaxLatency != 1 || d.WaitAddedMs > maxLatency.Seconds()*1000 {
			t.Fatalf("dispatch %+v: want one wait, of at most MaxLatency", d)
		}
	})
}

// The same wait would cost an item its deadline: it goes at once.
func TestHoldHonoursDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trained(t, time.Second)
		time.Sleep(200 * time.Microsecond)
		cost := 10100 * time.Microsecond
		start := time.Now()
		_, err := s.PredictRequest(context.Background(), Request{Items: [][]byte{{1}}, Deadline: start.Add(cost + 50*time.Microsecond)})
		if errors.Is(err, ErrDeadline) || err != nil {
			t.Fatalf("the lone returner failed with %v: the wait cost it its deadline", err)
		}
		if took := time.Since(start); took != cost {
			t.Fatalf("it took %s, want its batch's cost %s: no wait", took, cost)
		}
		if d := s.Stats().Dispatch; d.Deadline != 1 || d.Waited != 0 {
			t.Fatalf("dispatch %+v: want the deadline counted as why the batch went", d)
		}
	})
}

// Without the deadline, the same returner is waited for: the two tests
// above show the bounds, not a policy that never waits.
func TestHoldWaitsForTheExpected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trained(t, time.Second)
		time.Sleep(200 * time.Microsecond)
		done := make(chan time.Duration)
		for range 8 {
			go func() {
				start := time.Now()
				if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
					t.Error(err)
				}
				done <- time.Since(start)
			}()
			time.Sleep(10 * time.Microsecond) // the eight come back one after the other
		}
		for range 8 {
			<-done
		}
		if st := s.Stats(); st.Batches != 1 || st.Dispatch.Waited != 1 {
			t.Fatalf("batches %d, dispatch %+v: want the eight in one batch after one wait", st.Batches, st.Dispatch)
		}
	})
}

// The same with a second worker idle: the callers come back in a closed
// loop, so a batch that the first of them started alone would take that
// worker for a whole fixed cost, while the others waited for the second.
// The policy waits until half of them are back, the first worker's share,
// and the second worker takes the other half as they come: two batches of
// four, each started as its last item came.
func TestHoldWaitsForTheExpectedWhileAnotherWorkerIdles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trainedOn(t, 2, time.Second)
		time.Sleep(200 * time.Microsecond)
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		answered := map[time.Duration]int{}
		for range 8 {
			wg.Go(func() {
				if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
					t.Error(err)
				}
				mu.Lock()
				answered[time.Since(start)]++
				mu.Unlock()
			})
			time.Sleep(10 * time.Microsecond)
		}
		wg.Wait()
		// The fourth came at 30µs and the eighth at 70µs; a batch of four
		// runs 10.4ms.
		want := map[time.Duration]int{10430 * time.Microsecond: 4, 10470 * time.Microsecond: 4}
		if st := s.Stats(); !maps.Equal(answered, want) || st.BatchSizes[4] != 2 {
			t.Fatalf("answers at %v, batch sizes %v: want %v, two batches of four", answered, st.BatchSizes, want)
		}
	})
}

// Two workers answered eight callers each, who come back through a broker
// as two groups, a millisecond apart. The first group is the first idle
// worker's share already: it starts at once, and the second idle worker
// takes the second group as it comes. Before, the first waited for the
// second, a millisecond for nothing. The answers are watched for half the
// fixed cost, as they are once a batch has run (callers through a broker
// take milliseconds to come back).
func TestAGroupThatIsAWorkersShareStartsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trainedOn(t, 2, time.Second)
		s.mu.Lock()
		s.returns.reach = 5 * time.Millisecond
		s.returns.answered(time.Now(), 8) // the second worker's callers
		s.mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		group := func() (took chan time.Duration) {
			took = make(chan time.Duration, 1)
			reqs := make([]Request, 8)
			for i := range reqs {
				reqs[i] = Request{Items: [][]byte{{byte(i)}}}
			}
			start := time.Now()
			futs, errs := s.SubmitRequests(context.Background(), reqs)
			go func() {
				for i, f := range futs {
					if errs[i] != nil {
						t.Error(errs[i])
					} else if _, err := f.Result(context.Background()); err != nil {
						t.Error(err)
					}
				}
				took <- time.Since(start)
			}()
			return took
		}
		first := group()
		time.Sleep(time.Millisecond)
		second := group()
		cost := 10800 * time.Microsecond // a batch of eight
		if got := <-first; got != cost {
			t.Errorf("the first group took %s; want %s, its batch's run time alone", got, cost)
		}
		if got := <-second; got != cost {
			t.Errorf("the second group took %s; want %s", got, cost)
		}
		if st := s.Stats(); st.Batches != 2 || st.Dispatch.Waited != 0 {
			t.Fatalf("batches %d, dispatch %+v: want two batches of eight, none after a wait", st.Batches, st.Dispatch)
		}
	})
}

// A full batch's worth queued at once while four workers idle is shared
// by the four, so that it is answered in the run time of a quarter of it,
// where one worker took it all before (through a broker, a node reads the
// callers of several batches in one read).
func TestAFullQueueIsSharedByIdleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trainedOn(t, 4, time.Second)
		reqs := make([]Request, 64)
		for i := range reqs {
			reqs[i] = Request{Items: [][]byte{{byte(i)}}}
		}
		start := time.Now()
		futs, errs := s.SubmitRequests(context.Background(), reqs)
		for i, f := range futs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if _, err := f.Result(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if took, want := time.Since(start), 11600*time.Microsecond; took != want {
			t.Errorf("the 64 took %s; want %s, the run time of 16", took, want)
		}
		if st := s.Stats(); st.Batches != 4 {
			t.Fatalf("%d batches; want 4 of 16", st.Batches)
		}
	})
}

// Callers across a network (or behind a broker) come back milliseconds
// after their answer, later than the window drawn from a sub-millisecond
// delay would watch: the policy still learns how many come back and when,
// as the window reaches half the batch's fixed cost.
func TestReturnsFromCallersFarAwayAreLearnt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := trained(t, 20*time.Millisecond)
		const away = 3 * time.Millisecond
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 60 {
					if _, err := s.Predict(context.Background(), [][]byte{{1}}); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(away) // the way back to the caller and here again
				}
			})
		}
		wg.Wait()
		if r := s.Stats().Returns; r.Share < 0.9 || r.FirstMs < 2.8 || r.FirstMs > 3.2 {
			t.Fatalf("returns %+v; want a share near 1 and the first back after about %s", r, away)
		}
	})
}

// An item canceled while its batch waited for a busy worker is dropped as
// the batch goes to the worker, which then answers a batch of none. The
// return share must stay a number: it went NaN (0/0), and /v1/stats failed
// with 500 from then on, as it could not encode it.
func TestABatchEmptiedBeforeItRunsLeavesTheStatsEncodable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			if len(items) > 0 && string(items[0]) == "hold" {
				<-release
			}
			return items, nil
		})
		s, err := New(Config{InProcess: m, Workers: 1, MaxLatency: time.Millisecond, Batching: BatchingAdaptive})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
		held := make(chan error, 1)
		go func() {
			_, err := s.Predict(context.Background(), [][]byte{[]byte("hold")})
			held <- err
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := s.Submit(ctx, [][]byte{[]byte("gone")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // past MaxLatency: its batch goes ahead to the busy worker
		synctest.Wait()
		cancel()
		close(release)
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past every answer's return window
		if _, err := s.Predict(context.Background(), [][]byte{[]byte("next")}); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if _, err := json.Marshal(st); err != nil {
			t.Fatalf("stats %+v: %v", st.Returns, err)
		}
	})
}
