package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestABurstOfOneBadItemIsConvictedOnce: many copies of an item that
// crashes its worker, sent at once among good traffic, are answered as
// the item is convicted, each with ErrPoison, without a hunt of their own.
// The server keeps its slots, answers every good item, and its workers
// die a few times for the one bad item, not a few times for each copy.
// (Before, the copies admitted ahead of the conviction ran, each began a
// hunt, and their deaths, taken for the model's, had later copies failed
// with ErrModelFailed, and every slot given up.)
func TestABurstOfOneBadItemIsConvictedOnce(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) { burstOfOneBadItem(t, workers, 40, 3, false) })
	}
}

// So it is on a server that has answered nothing yet (just started, or
// reloaded): the item, judged too early to tell it from a model that
// crashes on everything, waits behind the good requests queued, whose
// answers tell. (Before, it was run again at once, ahead of them, until
// the model was blamed, every slot given up, and the server exited, the
// good requests failed with ErrUnavailable.)
func TestABurstOnAServerThatAnsweredNothingYet(t *testing.T) {
	for _, workers := range []int{1, 2} {
		t.Run(fmt.Sprint(workers, " workers"), func(t *testing.T) { burstOfOneBadItem(t, workers, 5*workers, 6, true) })
	}
}

// burstOfOneBadItem sends copies of a bad item, each followed by goodPer
// good requests, to a server of workers, fresh or seen answering first.
func burstOfOneBadItem(t *testing.T, workers, copies, goodPer int, fresh bool) {
	const (
		batchSize = 8
		depth     = 2
	)
	cfg := processConfig("chaos:crash=BAD,delay=1ms", workers, batchSize)
	cfg.PipelineDepth = depth
	cfg.BackoffMin = time.Millisecond
	// A worker slow to start on a loaded machine must not have the queued
	// items failed as unavailable: this test is about blame.
	cfg.UnavailableAfter = time.Minute
	s := start(t, cfg)
	if !fresh {
		seenWorking(t, s)
	}
	bad := chaosItem(t, "BAD")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A server that gives up ends the test at once, rather than leave the
	// items queued until ctx ends.
	fatal := make(chan error, 1)
	go func() {
		select {
		case err := <-s.Fatal():
			fatal <- err
			cancel()
		case <-ctx.Done():
		}
	}()

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		badErrs []error
	)
	sendGood := func(i int) {
		for j := range goodPer {
			name := fmt.Sprint("good", i, "-", j)
			wg.Go(func() {
				out, err := s.Predict(ctx, items(name))
				if err != nil || len(out) != 1 || string(out[0]) != name {
					t.Errorf("good request %s: %q, %v; want it answered", name, out, err)
				}
			})
		}
	}
	// On a fresh server the copies come first, and the good requests once
	// a copy has crashed a worker: none has run.
	for i := range copies {
		f, err := s.Submit(ctx, [][]byte{bad})
		switch {
		case errors.Is(err, supervisor.ErrPoison):
			badErrs = append(badErrs, err) // refused on sight: convicted already
		case err != nil:
			t.Fatalf("copy %d refused: %v", i, err)
		default:
			wg.Go(func() {
				_, err := f.Result(ctx)
				mu.Lock()
				badErrs = append(badErrs, err)
				mu.Unlock()
			})
		}
		if !fresh {
			sendGood(i)
		}
	}
	if fresh {
		waitFor(t, "a worker dead of a copy", func() bool { return s.Stats().Crashes > 0 })
		for i := range copies {
			sendGood(i)
		}
	}
	wg.Wait()
	cancel()

	select {
	case err := <-fatal:
		t.Fatalf("the server gave up: %v", err)
	default:
	}
	poisoned, blamed, unavailable := 0, 0, 0
	for _, err := range badErrs {
		switch {
		case errors.Is(err, supervisor.ErrPoison):
			poisoned++
			continue
		case errors.Is(err, supervisor.ErrModelFailed):
			blamed++
		case errors.Is(err, supervisor.ErrUnavailable):
			unavailable++
		}
		t.Errorf("a copy answered %v; want ErrPoison", err)
	}
	if poisoned != copies {
		t.Errorf("of %d copies, %d failed with ErrPoison, %d with ErrModelFailed, %d with ErrUnavailable", copies, poisoned, blamed, unavailable)
	}
	st := s.Stats()
	// The hunt that convicts dies log2(batchSize)+2 times: the whole batch,
	// the halves holding the item down to it alone, and once more alone.
	// Until then every other slot may die about as often, on batches that
	// hold other copies, or on pieces of the hunts they begin; a hunt's
	// worth more is room for restarts that do not keep pace. After the
	// verdict, each batch sent may still hold a copy. Before, each copy
	// that ran cost two deaths or more.
	// On a fresh server, each copy may crash a worker before any is
	// judged: no bound but that the server keeps its slots.
	hunt := bits.Len(batchSize-1) + 2
	bound := uint64((workers+1)*hunt + workers*depth)
	if !fresh && st.Crashes > bound {
		t.Errorf("%d deaths for one bad item sent %d times among good ones; want at most %d", st.Crashes, copies, bound)
	}
	if st.Poisoned != uint64(copies) {
		t.Errorf("%d items counted poisoned; want the %d copies", st.Poisoned, copies)
	}
	if st.Answered != st.Submitted {
		t.Errorf("%d items answered of %d submitted", st.Answered, st.Submitted)
	}
	for _, sl := range s.Slots() {
		if sl.State == supervisor.SlotFailed {
			t.Errorf("slot %d given up: %+v", sl.Slot, sl)
		}
	}
	t.Logf("%d deaths (at most %d unless fresh), %d copies poisoned, %d items answered", st.Crashes, bound, st.Poisoned, st.Answered)
}

// A client that sends an item that crashes its worker with a deadline too
// short for the hunt (each copy's caller gone before the pieces of its
// batch run) has it found out as any other: the pieces of a hunt run
// whatever became of their callers, so that the item is convicted and
// then refused on sight, and the deaths it caused, forgiven. (Before,
// every such hunt was cut short, counted its first death, and found
// nothing: the restarts of every slot were used up among good traffic,
// and the server gave up.)
func TestABadItemWithAShortDeadlineIsConvicted(t *testing.T) {
	cfg := processConfig("chaos:crash=BAD,delay=3ms", 3, 8)
	cfg.MaxRestarts = 3
	cfg.BackoffMin = time.Millisecond
	cfg.UnavailableAfter = time.Minute
	s := start(t, cfg)
	seenWorking(t, s)
	bad := chaosItem(t, "BAD")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var good sync.WaitGroup
	for c := range 4 {
		good.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprint("good", c, "-", i)
				out, err := s.Predict(ctx, items(name))
				if ctx.Err() == nil && (err != nil || len(out) != 1 || string(out[0]) != name) {
					t.Errorf("good request %s: %q, %v; want it answered", name, out, err)
				}
			}
		})
	}
	defer good.Wait()
	defer cancel()
	const tries = 40
	for i := range tries {
		select {
		case err := <-s.Fatal():
			t.Fatalf("the server gave up after %d copies: %v", i, err)
		default:
		}
		short, stop := context.WithTimeout(ctx, 5*time.Millisecond)
		_, err := s.Predict(short, [][]byte{bad})
		stop()
		if errors.Is(err, supervisor.ErrPoison) && i > 0 {
			if st := s.Stats(); st.Poisoned == 0 {
				t.Errorf("refused as poison, yet none counted: %+v", st)
			}
			return
		}
		<-time.After(50 * time.Millisecond) // the client's pace
	}
	t.Fatalf("after %d copies with a deadline of 5ms, the item is not refused on sight: stats %+v", tries, s.Stats())
}

// A Shutdown begun while a hunt for an item that hangs the model goes on
// for callers who all had their answer already does not wait for the
// hunt: its piece running is abandoned (its worker killed) and the pieces
// queued are dropped, so that the drain ends at once rather than after a
// worker timeout for each piece. (Before, it waited, up to its grace.)
func TestADrainDoesNotWaitForAHuntNobodyWaitsFor(t *testing.T) {
	const workerTimeout = 2 * time.Second
	cfg := processConfig("chaos:hang=HANG", 1, 8)
	cfg.WorkerTimeout = workerTimeout
	cfg.BackoffMin = time.Millisecond
	var logs syncbuf.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := start(t, cfg)
	seenWorking(t, s)
	hang := chaosItem(t, "HANG")
	// Past its deadline before the worker is killed, but not before the
	// batch is sent, which a loaded machine may take tens of ms to do.
	short, cancel := context.WithTimeout(context.Background(), workerTimeout/2)
	defer cancel()
	if _, err := s.Predict(short, [][]byte{[]byte("a"), hang, []byte("b")}); !errors.Is(err, supervisor.ErrDeadline) {
		t.Fatalf("the request that hangs the model: %v; want ErrDeadline", err)
	}
	// Its batch was killed at the worker timeout, and the hunt began.
	waitFor(t, "the hanging batch killed", func() bool { return s.Stats().Crashes >= 1 })
	// Its first half, a alone, answered, and the second, HANG and b,
	// running: hung.
	st := s.Stats()
	crashes := st.Crashes
	waitFor(t, "the piece that hangs running", func() bool {
		return s.Stats().Batches > st.Batches && s.Slots()[0].InFlight == 1
	})
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	began := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v; want the drain done", err)
	}
	if took := time.Since(began); took > workerTimeout {
		t.Errorf("Shutdown took %s; want it to end at once, not wait for the pieces of a hunt nobody waits for (%s each)", took, workerTimeout)
	}
	// The worker the drain killed for it is no crash of its own.
	if n := s.Stats().Crashes; n != crashes {
		t.Errorf("%d crashes after the drain, %d before; want the worker the drain killed not counted", n, crashes)
	}
	drained := logs.String()
	if i := strings.Index(drained, "no caller waits for any more"); i < 0 {
		t.Errorf("no worker killed for the hunt as the server drained:\n%s", drained)
	} else if strings.Contains(drained[i:], `msg="worker died"`) {
		t.Errorf("the worker the drain killed is logged as dead of its own:\n%s", drained[i:])
	}
}

// chaosItem is item as the chaos model reads its triggers: msgpack.
func chaosItem(t *testing.T, item string) []byte {
	t.Helper()
	b, err := msgpack.Marshal(item)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTwoBadItemsOnAQuietServerAreBothConvicted: two different bad items
// sent together to a server of one worker that nothing else keeps busy
// are both convicted. After the first, the model answers nothing (nothing
// else runs), so the second could not be told from a model that turned
// to crash on everything; an item the model answered before is run to
// ask it, and its answer lets the second be convicted. (Before, the
// second's copies failed with ErrModelFailed, their deaths counted, and a
// client sending the two again and again had the server give up.)
func TestTwoBadItemsOnAQuietServerAreBothConvicted(t *testing.T) {
	cfg := processConfig("chaos:crash=X,panic=Y,delay=1ms", 1, 8)
	cfg.BackoffMin = time.Millisecond
	cfg.UnavailableAfter = time.Minute // this test is about blame, not a slow start
	s := start(t, cfg)
	seenWorking(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs = map[string][]error{}
	)
	for round := range 3 {
		for _, name := range []string{"X", "Y"} {
			f, err := s.Submit(ctx, [][]byte{chaosItem(t, name)})
			if err != nil && !errors.Is(err, supervisor.ErrPoison) {
				t.Fatalf("round %d, %s refused: %v", round, name, err)
			}
			wg.Go(func() {
				if err == nil {
					_, err = f.Result(ctx)
				}
				mu.Lock()
				errs[name] = append(errs[name], err)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	select {
	case err := <-s.Fatal():
		t.Fatalf("the server gave up: %v", err)
	default:
	}
	for name, got := range errs {
		for i, err := range got {
			if !errors.Is(err, supervisor.ErrPoison) {
				t.Errorf("%s, copy %d: %v; want ErrPoison", name, i, err)
			}
		}
	}
	if _, err := s.Predict(ctx, items("good")); err != nil {
		t.Errorf("a good item after them: %v", err)
	}
	t.Logf("%d deaths", s.Stats().Crashes)
}

// TestABadItemOnALargeServerIsConvictedPromptly: a bad item among good
// traffic on a server of eight workers, whose model takes a while to
// load, is convicted in three runs alone at most: the busy workers, idle
// again in milliseconds where the one it killed takes the load time to
// come back, take it, and three old workers crashed alone convict it as
// a fresh one would. (Before, a fresh worker's crash was needed, and it
// ran alone five times and failed with ErrModelFailed.)
func TestABadItemOnALargeServerIsConvictedPromptly(t *testing.T) {
	cfg := processConfig("chaos:crash=X,init-delay=300ms,delay=2ms", 8, 8)
	cfg.BackoffMin = time.Millisecond
	s := start(t, cfg)
	seenWorking(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := load(t, s, 16)
	_, err := s.Predict(ctx, [][]byte{chaosItem(t, "X")})
	checkNoFailures(t, stop)
	if !errors.Is(err, supervisor.ErrPoison) {
		t.Fatalf("the bad item: %v; want ErrPoison", err)
	}
	// The batch, the halves holding it down to it alone, and three times
	// alone at most.
	if n, most := s.Stats().Crashes, uint64(bits.Len(8-1)+3); n > most {
		t.Errorf("%d deaths for one bad item; want at most %d", n, most)
	}
}
