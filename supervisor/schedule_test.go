package supervisor_test

import (
	"context"
	"fmt"
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
