package supervisor

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// idleWorker is a worker that does nothing, for tests that drive a slot's
// handling of batches by hand.
type idleWorker struct{}

func (idleWorker) send(*batch)       {}
func (idleWorker) recall(uint64)     {}
func (idleWorker) forget(*batch)     {}
func (idleWorker) stop()             {}
func (idleWorker) kill(error)        {}
func (idleWorker) wait() error       { return nil }
func (idleWorker) pid() int          { return 1 }
func (idleWorker) device() string    { return "" }
func (idleWorker) modelName() string { return "" }

// queuedItems makes the items of one request of names, answered through
// the Future it returns.
func queuedItems(names ...string) ([]item, *Future) {
	f := newFuture(len(names))
	its := make([]item, len(names))
	for i, n := range names {
		its[i] = item{fut: f, index: int32(i), data: []byte(n)}
	}
	return its, f
}

// answerOf reports whether f's item i was answered, and its error (nil for
// an output).
func answerOf(f *Future, i int) (answered bool, err error) {
	if errs := f.errs.Load(); errs != nil && (*errs)[i] != nil {
		return true, (*errs)[i]
	}
	return f.outputs[i] != nil, nil
}

// A conviction fails every copy of the item queued, in a request not yet
// batched and in a piece of another hunt alike, and leaves their
// neighbours queued; the other hunt is over, its first death forgiven at
// once, and what is left of its piece runs as any batch.
func TestAConvictionFailsTheCopiesWaiting(t *testing.T) {
	s := unstartedEcho(t)
	sl := s.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	queued, inFifo := queuedItems("bad", "good1")
	for _, it := range queued {
		s.queue.push(it)
	}
	pieceItems, inPiece := queuedItems("good2", "bad")
	hunt := s.newHuntLocked(sl, s.newBatch(pieceItems, false))
	hunt.at = time.Now()
	sl.recent = append(sl.recent, hunt.at) // its first death, counted
	piece := s.newBatch(pieceItems, true)
	piece.crash = hunt
	s.queue.requeue([]*batch{piece})

	lone := item{data: []byte("bad")}
	if n := s.convictLocked(s.hashOf(&lone)); n != 2 {
		t.Errorf("%d copies failed; want 2", n)
	}
	for _, c := range []struct {
		f *Future
		i int
	}{{inFifo, 0}, {inPiece, 1}} {
		if ok, err := answerOf(c.f, c.i); !ok || !errors.Is(err, ErrPoison) || err.Error() != errKnownPoison.Error() {
			t.Errorf("a copy answered %v (%v); want %v", err, ok, errKnownPoison)
		}
	}
	if ok, _ := answerOf(inFifo, 1); ok {
		t.Error("the copy's neighbour in its request was answered; want it queued")
	}
	if s.queue.items() != 2 || s.queue.n != 1 || len(s.queue.ready) != 1 {
		t.Errorf("%d items queued, %d of them in fifos, %d formed batches; want good1 and the piece of good2", s.queue.items(), s.queue.n, len(s.queue.ready))
	}
	if len(piece.items) != 1 || string(piece.data[0]) != "good2" || piece.suspect || piece.crash != nil {
		t.Errorf("the piece holds %q, suspect %v, hunt %v; want good2 alone, a batch like any other", piece.data, piece.suspect, piece.crash)
	}
	if !hunt.explained || hunt.pieces != 0 || !hunt.forgiven || len(sl.recent) != 0 {
		t.Errorf("the other hunt: explained %v, %d pieces, forgiven %v, %d deaths counted; want it over, its death taken back",
			hunt.explained, hunt.pieces, hunt.forgiven, len(sl.recent))
	}
	if n := s.stats.poisoned.Load(); n != 2 {
		t.Errorf("%d items counted poisoned; want the 2 copies", n)
	}
}

// sentThenConvicted sends a batch of "good" and "bad" to an unstarted
// streamer's slot, whose Future is f, then convicts "bad".
func sentThenConvicted(t *testing.T) (s *Streamer, sl *slot, b *batch, f *Future) {
	t.Helper()
	s = unstartedEcho(t)
	sl = s.slots[0]
	its, f := queuedItems("good", "bad")
	s.mu.Lock()
	b = s.newBatch(its, false)
	sl.w = idleWorker{}
	sl.sendLocked(b, time.Now())
	lone := item{data: []byte("bad")}
	s.convictLocked(s.hashOf(&lone))
	s.mu.Unlock()
	return s, sl, b, f
}

// A batch formed before a conviction, sent after it, goes to its worker
// without the copies of the item it held: they are answered at once.
func TestACopySentAfterItsConvictionDoesNotRun(t *testing.T) {
	_, sl, b, f := sentThenConvicted(t)
	if _, check := sl.pruneForRun(idleWorker{}, b, b.sendSeq, nil); check != takeIt {
		t.Fatal("the batch was not the worker's to run")
	}
	if len(b.items) != 1 || len(b.data) != 1 || string(b.data[0]) != "good" {
		t.Errorf("the batch sent holds %q; want good alone", b.data)
	}
	if ok, err := answerOf(f, 1); !ok || !errors.Is(err, ErrPoison) {
		t.Errorf("the copy answered %v (%v); want ErrPoison", err, ok)
	}
}

// A worker that dies running a copy of an item convicted after its batch
// was sent died of the item: the copy fails, its batch-mates go back to
// run as any batch, and the death counts neither towards MaxRestarts nor
// against the model.
func TestADeathOnACopyOfAConvictedItemIsNotCounted(t *testing.T) {
	s, sl, _, f := sentThenConvicted(t)

	sl.onExit(idleWorker{}, errors.New("exit status 3"), time.Now())
	if ok, err := answerOf(f, 1); !ok || !errors.Is(err, ErrPoison) {
		t.Errorf("the copy answered %v (%v); want ErrPoison", err, ok)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(sl.recent) != 0 {
		t.Errorf("%d deaths counted towards MaxRestarts; want none", len(sl.recent))
	}
	if s.record.n != 0 {
		t.Errorf("%d batches in the crash record; want the death left out", s.record.n)
	}
	if len(s.queue.ready) != 1 || len(s.queue.ready[0].items) != 1 || s.queue.ready[0].suspect || s.queue.ready[0].crash != nil {
		t.Errorf("requeued %d batches; want good back alone, in no hunt", len(s.queue.ready))
	}
}

// A request let in as an item was convicted, its items looked at against
// the list before the verdict and queued after it, has its copy failed as
// it is queued.
func TestACopyAdmittedAsItsItemIsConvictedIsFailed(t *testing.T) {
	s := unstartedEcho(t)
	f := newFuture(1)
	f.poisonGen = s.poison.gen.Load() // admit found nothing
	s.mu.Lock()
	defer s.mu.Unlock()
	lone := item{data: []byte("bad")}
	s.convictLocked(s.hashOf(&lone))
	if !s.pushLocked(Request{Items: [][]byte{[]byte("bad")}}, f) {
		t.Fatal("pushLocked did not see the conviction since admission")
	}
	s.purgeLocked()
	if ok, err := answerOf(f, 0); !ok || !errors.Is(err, ErrPoison) {
		t.Errorf("the copy answered %v (%v); want ErrPoison", err, ok)
	}
	if s.queue.items() != 0 {
		t.Errorf("%d items queued; want none", s.queue.items())
	}
}

// The deaths of other hunts whose batches held a copy of the suspect are
// not the model's: a burst of one bad item has many hunts at once, and an
// item that crashed two workers alone, the model answering the rest, is
// poison, whatever the copies did. Deaths of batches without a copy are
// the model's, as before.
func TestTheDeathsOfCopiesDoNotCloudTheVerdict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		others string
		want   verdict
	}{
		{"deaths on copies", "bad", verdictPoison},
		{"deaths on other items", "other", verdictModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := unstartedEcho(t)
			s.mu.Lock()
			defer s.mu.Unlock()
			for range 30 {
				s.record.add(runRecord{})
			}
			for range 30 {
				other := item{data: []byte(tc.others)}
				s.record.add(runRecord{died: true, hunt: &firstCrash{hashes: []uint64{s.hashOf(&other)}}})
			}
			suspect := item{data: []byte("bad"), aloneCrashes: 2, crashedFresh: true}
			own := &firstCrash{hashes: []uint64{s.hashOf(&suspect)}}
			s.record.add(runRecord{died: true, hunt: own})
			suspect.deferred = true // no waiting for other batches
			if got, err := s.judgeLocked(&suspect, own, false); got != tc.want {
				t.Errorf("verdict %d (%v); want %d", got, err, tc.want)
			}
		})
	}
}

// An item that crashed workers alone, the model answering every other
// batch, is convicted once one of those workers was fresh (the batch was
// its first), or once it crashed three, and never once the model answered
// a copy of it lately: workers failing as they age, or a model crashing at
// random on an item sent again and again, look alike otherwise.
func TestAnItemIsConvictedByAFreshWorkerOrThreeAndNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		alone    uint8
		fresh    bool
		answered bool // a copy among the answers since the record held a death
		want     verdict
	}{
		{"twice, once on a fresh worker", 2, true, false, verdictPoison},
		{"twice, on workers that had run batches", 2, false, false, verdictUnsure},
		{"three times, never on a fresh worker", 3, false, false, verdictPoison},
		{"twice, a copy answered lately", 2, true, true, verdictUnsure},
		{"five times, a copy answered lately", maxAloneCrashes, true, true, verdictModel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := unstartedEcho(t)
			s.mu.Lock()
			defer s.mu.Unlock()
			suspect := item{data: []byte("bad"), aloneCrashes: tc.alone, crashedFresh: tc.fresh}
			own := &firstCrash{hashes: []uint64{s.hashOf(&suspect)}}
			s.record.add(runRecord{died: true, hunt: own})
			for i := range 40 {
				b := s.newBatch([]item{{data: fmt.Appendf(nil, "good%d", i)}}, false)
				if tc.answered && i == 20 {
					b.items = append(b.items, item{data: []byte("bad")})
				}
				s.addAnswerLocked(b, nil)
			}
			suspect.deferred = true // no waiting for other batches
			got, err := s.judgeLocked(&suspect, own, false)
			if got != tc.want {
				t.Errorf("verdict %d (%v); want %d", got, err, tc.want)
			}
			if got == verdictModel && !errors.Is(err, ErrModelFailed) {
				t.Errorf("blamed on the model with %v; want ErrModelFailed", err)
			}
		})
	}
}

// A lone item that crashed only old workers goes to a fresh worker that
// is idle before anything queued ahead of it; an old worker takes the
// batches in their order, the piece included: nothing waits for a fresh
// worker, which may take its model's load time to come, or never.
func TestAFreshWorkerTakesThePieceThatWantsOneFirst(t *testing.T) {
	s := unstartedEcho(t)
	sl := s.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	other := s.newBatch([]item{{fut: newFuture(1), data: []byte("other")}}, false)
	piece := s.newBatch([]item{{fut: newFuture(1), data: []byte("bad"), aloneCrashes: 1}}, true)
	now := time.Now()
	for _, tc := range []struct {
		name string
		ran  int
		want *batch
	}{
		{"a fresh worker", 0, piece},
		{"an old worker", 3, other},
	} {
		s.queue.requeue([]*batch{other, piece})
		sl.state, sl.ran = SlotReady, tc.ran
		if b := s.nextBatch(sl, now, func(time.Time) {}); b != tc.want {
			t.Errorf("%s took %q; want %q", tc.name, b.data, tc.want.data)
		}
		for len(s.queue.ready) > 0 {
			s.queue.takeReady(0)
		}
	}
}
