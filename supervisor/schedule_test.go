package supervisor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// callersInALoop has callers callers send one item each, again as soon as
// they are answered, until d has passed, and returns the longest any of
// them waited for an answer.
func callersInALoop(t *testing.T, s *supervisor.Streamer, callers int, d time.Duration) time.Duration {
	t.Helper()
	var mu sync.Mutex
	var worst time.Duration
	var wg sync.WaitGroup
	begin := time.Now()
	for c := range callers {
		wg.Go(func() {
			for i := 0; time.Since(begin) < d; i++ {
				sent := time.Now()
				if _, err := s.Predict(context.Background(), items(fmt.Sprintf("c%d-%d", c, i))); err != nil {
					t.Errorf("caller %d, request %d: %v", c, i, err)
					return
				}
				mu.Lock()
				worst = max(worst, time.Since(sent))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return worst
}

// The only worker dies once under a steady load, and its batch is split
// in halves, each to run alone on an idle worker. The worker is given no
// batch ahead while one waits, so the second half runs as soon as the
// first is answered. Before, the worker always had its next batch ahead
// of the load, was never idle, and the second half waited until the load
// stopped, seconds later.
func TestAPieceOfAHuntRunsPromptlyUnderASteadyLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var kill atomic.Bool
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			if kill.CompareAndSwap(true, false) {
				panic("killed by the test")
			}
			time.Sleep(20*time.Millisecond + time.Duration(len(items))*time.Millisecond)
			return items, nil
		})
		s := start(t, supervisor.Config{InProcess: m, Workers: 1, BatchSize: 8})
		go func() {
			time.Sleep(200 * time.Millisecond)
			kill.Store(true)
		}()
		// 32 callers on batches of 8 that take 28ms: about 112ms each.
		worst := callersInALoop(t, s, 32, 2*time.Second)
		if st := s.Stats(); st.Crashes != 1 || st.Dispatch.Retry < 2 {
			t.Fatalf("crashes %d, batches retried %d: want one death, its batch run again in two halves", st.Crashes, st.Dispatch.Retry)
		}
		if limit := 500 * time.Millisecond; worst > limit {
			t.Errorf("a caller waited %s; want less than %s: the halves of the dead worker's batch should run one after the other, not wait for the load to stop", worst, limit)
		}
	})
}

// One of two workers takes a batch that runs 4s, where batches were
// measured at about 10ms. Under a steady load that keeps the other busy,
// no batch is sent ahead to the slow worker, to wait behind its batch:
// the other, on time, takes them all. Before, every full batch that found
// the other worker's pipeline full went to the slow one, and its callers
// waited until its batch ended.
func TestNoBatchGoesAheadToAWorkerRunningLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			cost := 10*time.Millisecond + time.Duration(len(items))*100*time.Microsecond
			if slices.ContainsFunc(items, func(it []byte) bool { return string(it) == "slow" }) {
				cost = 4 * time.Second
			}
			time.Sleep(cost)
			return items, nil
		})
		s := start(t, supervisor.Config{InProcess: m, Workers: 2, BatchSize: 8})
		// Start returns once one worker is ready; the test wants both, and
		// the cost of a batch learnt.
		synctest.Wait()
		for i := range 8 {
			if _, err := s.Predict(context.Background(), items(fmt.Sprint("warm", i))); err != nil {
				t.Fatal(err)
			}
		}
		slow, err := s.Submit(context.Background(), items("slow"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		// 32 callers on one worker, batches of 8 that take 10.8ms: about
		// 43ms each.
		worst := callersInALoop(t, s, 32, time.Second)
		if limit := 500 * time.Millisecond; worst > limit {
			t.Errorf("a caller waited %s; want less than %s: a batch went ahead to the worker stuck on its 4s batch", worst, limit)
		}
		if out, err := slow.Result(context.Background()); err != nil || string(out[0]) != "slow" {
			t.Fatalf("the slow item: %q, %v", out, err)
		}
	})
}

// Under a steady load that keeps both workers' pipelines full, one batch
// runs 4s where batches were measured at about 10ms. The batch sent ahead
// to its worker before it ran late is given back and run by the other
// worker, rather than wait 4s behind it: no caller but those of the slow
// batch waits long.
func TestABatchSentAheadToAWorkerThatRunsLateIsGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			slow     atomic.Bool
			mu       sync.Mutex
			slowOnes = map[string]bool{} // the items of the slow batch
		)
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			cost := 10*time.Millisecond + time.Duration(len(items))*100*time.Microsecond
			if slow.CompareAndSwap(true, false) {
				cost = 4 * time.Second
				mu.Lock()
				for _, it := range items {
					slowOnes[string(it)] = true
				}
				mu.Unlock()
			}
			time.Sleep(cost)
			return items, nil
		})
		s := start(t, supervisor.Config{InProcess: m, Workers: 2, BatchSize: 8})
		synctest.Wait()
		go func() {
			time.Sleep(300 * time.Millisecond)
			slow.Store(true)
		}()
		// 32 callers on batches of 8 that take 10.8ms: both workers hold a
		// batch ahead all along.
		waits := map[string]time.Duration{}
		var wg sync.WaitGroup
		begin := time.Now()
		for c := range 32 {
			wg.Go(func() {
				for i := 0; time.Since(begin) < time.Second; i++ {
					name, sent := fmt.Sprintf("c%d-%d", c, i), time.Now()
					if _, err := s.Predict(context.Background(), items(name)); err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					mu.Lock()
					waits[name] = time.Since(sent)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(slowOnes) == 0 {
			t.Fatal("no batch ran slow: the test tested nothing")
		}
		var worst time.Duration
		for name, d := range waits {
			if !slowOnes[name] {
				worst = max(worst, d)
			}
		}
		if limit := 500 * time.Millisecond; worst > limit {
			t.Errorf("a caller whose item was not in the slow batch waited %s; want less than %s: the batch sent ahead to the worker stuck on its 4s batch should have been given back", worst, limit)
		}
		if st := s.Stats(); st.Dispatch.Recalled == 0 {
			t.Errorf("no batch recalled (dispatch %+v)", st.Dispatch)
		}
	})
}

// A feeder (a broker node) is told of no room ahead for a worker running
// late while another is on time: the items it took would wait for the
// other anyway, where a peer might have run them.
func TestRoomCountsNothingAheadOfAWorkerRunningLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			cost := 10 * time.Millisecond
			if string(items[0]) == "slow" {
				cost = 4 * time.Second
			}
			time.Sleep(cost)
			return items, nil
		})
		s := start(t, supervisor.Config{InProcess: m, Workers: 2, BatchSize: 8, Batching: supervisor.BatchingGreedy})
		synctest.Wait()
		for range 8 {
			if _, err := s.Predict(context.Background(), items("warm")); err != nil {
				t.Fatal(err)
			}
		}
		slow, err := s.Submit(context.Background(), items("slow"))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, ahead := s.Room(); now != 8 || ahead != 16 {
			t.Fatalf("one worker starting a batch: Room() = %d, %d; want 8 now and 16 ahead", now, ahead)
		}
		time.Sleep(100 * time.Millisecond)
		fast, err := s.Submit(context.Background(), items("fast"))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if now, ahead := s.Room(); now != 0 || ahead != 8 {
			t.Errorf("one worker 100ms into a batch measured at 10ms, the other starting one: Room() = %d, %d; want 0 now and 8 ahead, for the second", now, ahead)
		}
		for _, f := range []*supervisor.Future{fast, slow} {
			if _, err := f.Result(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	})
}
