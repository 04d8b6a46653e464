package supervisor

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"time"
)

// An item that crashed a worker alone may be poison, or the model may
// crash on batches whatever they hold (it panics on everything, or at
// random). The hunt tells the two apart with the model's recent record:
// if the model crashes on a share r of the other batches it runs, an
// innocent item crashes n workers alone in a row with the chance r^n, and
// the item is poison only once that chance is below blameLevel. r is
// estimated with one crash and one answer added to what was seen (the
// rule of succession), so that a model seen on few batches is not taken
// for sound: a healthy model seen on a few batches convicts in three or
// four runs alone, one seen on thirty or more in two. When even
// maxAloneCrashes runs could not convict, the item is not to blame: it
// fails with ErrModelFailed, is not remembered, and its hunt's deaths
// count towards MaxRestarts.
const (
	// blameLevel is the highest chance, under the model's crash rate, that
	// an innocent item crashed every worker it ran on alone.
	blameLevel = 1e-3
	// maxAloneCrashes bounds the runs alone of one item, and so what a
	// model that crashes at random costs in restarts per item.
	maxAloneCrashes = 5
	// recordSize is how many recent batches the crash rate is taken over.
	recordSize = 64
	// staleCrashes is how many workers that had run other batches an
	// item must crash alone, none of them on its first batch, to be
	// judged as one that crashed a fresh worker is (see judgeLocked).
	staleCrashes = 3
	// deferAnswers is how many answers of other batches a lone item
	// judged too early (verdictWait) waits for while items are queued:
	// after as many, an item that crashes its worker alone three to five
	// times more is convicted.
	deferAnswers = 4
)

// verdict is what a lone item's crashes say of it.
type verdict int

const (
	// verdictUnsure: run it alone again.
	verdictUnsure verdict = iota
	// verdictPoison: the item crashes the model, which answers others.
	verdictPoison
	// verdictWait: the model answered too little lately to tell; run the
	// batches waiting first, and the item after them: those formed, and
	// the items queued until deferAnswers more are answered (see
	// Streamer.deferredLocked).
	verdictWait
	// verdictModel: the model crashes too often to blame the item.
	verdictModel
	// verdictProbe: the model answered nothing since the last item was
	// convicted, and no other work waits that would tell whether it
	// still answers: an item it answered before (the canary) runs
	// first, then the item after it (see Streamer.probeLocked).
	verdictProbe
)

// runRecord is the outcome of one recent batch that reached the model.
type runRecord struct {
	died bool
	hunt *firstCrash // the hunt a death was part of; nil for an answer
	// hashes are those of the items an answer ran (see Streamer.hashOf):
	// the small ones always, the others while the record held a death
	// (see Streamer.addAnswerLocked and cleared).
	hashes []uint64
}

// crashRecord holds the outcomes of the last recordSize batches. Guarded
// by Streamer.mu.
type crashRecord struct {
	runs   [recordSize]runRecord
	next   int
	n      int
	deaths int // of the runs held
	// answers counts the answers ever recorded, so that a conviction can
	// tell whether the model answered since (see convicted).
	answers uint64
	// doubted: an item was convicted and the model has answered no batch
	// since, as a model that turned to crash on everything would not.
	doubted bool
	// probed: a probe was sent since the doubt began (see
	// Streamer.probeLocked).
	probed bool
	// last is the hash of the item convicted last (see poisonList.hash):
	// that item convicted again, once its quarantine is over, is no
	// reason for doubt.
	last uint64
}

func (r *crashRecord) add(rec runRecord) {
	old := &r.runs[r.next]
	if r.n == recordSize && old.died {
		r.deaths--
	}
	if rec.hashes == nil {
		rec.hashes = old.hashes[:0] // kept for the answer that takes its place
	}
	r.runs[r.next] = rec
	r.next = (r.next + 1) % recordSize
	r.n = min(r.n+1, recordSize)
	if rec.died {
		r.deaths++
	} else {
		r.answers++
		r.doubted = false
	}
}

// addAnswerLocked records that the model answered b, but for the items at
// the indices expired (ascending), which it did not run. The items
// answered are hashed, so that an item a hunt suspects is known to have
// been answered (see cleared): those of up to alwaysHashed bytes always
// (workers that die together as they age die before any death is
// recorded, and the item they all ran was answered before), larger ones
// while the record holds a death. The canary is taken afresh from them
// while it does (see canary). It requires that s.mu is held.
func (s *Streamer) addAnswerLocked(b *batch, expired []int) {
	r := &s.record
	dying := r.deaths > 0
	hashes := r.runs[r.next].hashes[:0]
	kept := !dying && s.canary.data != nil // the canary needs no refresh
	for i := range b.items {
		if len(expired) > 0 && expired[0] == i {
			expired = expired[1:]
			continue
		}
		it := &b.items[i]
		if dying || len(it.data) <= alwaysHashed {
			hashes = append(hashes, s.hashOf(it))
		}
		if !kept && len(it.data) <= canaryMax {
			s.canary.data = append(s.canary.data[:0], it.data...)
			s.canary.key, kept = it.key, true
		}
	}
	r.add(runRecord{hashes: hashes})
}

// alwaysHashed is the size of the items hashed in every answer (see
// addAnswerLocked): a few tens of nanoseconds each.
const alwaysHashed = 1 << 10

// canaryMax is the largest item kept as the canary.
const canaryMax = 64 << 10

// canary is an item the model answered lately, kept to ask the model
// whether it still answers (see probeLocked): the first answered, then,
// while the record holds a death, one of each batch answered. Guarded by
// Streamer.mu.
type canary struct {
	data  []byte // nil: none
	key   string
	probe *batch // the probe queued or running; nil while none is
}

// probeLocked queues, ahead of every other batch, a batch of a copy of the
// canary, whose answer nobody waits for: when
// the record doubts the model (an item was convicted, and the model has
// answered nothing since) and no other work waits, a second bad item
// could not be told from a model that turned to crash on everything, and
// was blamed on the model, its deaths counted (a client sending two
// different bad items to a quiet server of one worker had it give up and
// exit). The probe's answer lifts the doubt; its death counts, as the
// model's. The items deferred behind it wait for its end (see
// deferredLocked). Once a doubt at most. It requires that s.mu is held.
func (s *Streamer) probeLocked() {
	c := &s.canary
	if s.record.probed {
		return
	}
	s.record.probed = true // tried, whatever comes of it
	if c.data == nil || c.probe != nil || s.poison.has(c.key, c.data) {
		return
	}
	c.probe = s.newBatch([]item{{fut: newFuture(1), data: bytes.Clone(c.data), key: c.key, probe: true}}, false)
	s.queue.requeue([]*batch{c.probe})
	s.log.Info("asking the model to answer an item it answered before: an item crashed workers alone after another was convicted, and nothing else runs to tell a second bad item from a model that crashes on everything")
}

// probeEndedLocked notes that b, if it is the probe, ended: answered,
// dropped, or its worker died. It requires that s.mu is held.
func (s *Streamer) probeEndedLocked(b *batch) {
	if b == s.canary.probe {
		s.canary.probe = nil
	}
}

// cleared says whether the model answered an item of hash h among the
// batches held: an item answered is none that crashes every worker it
// runs on, whatever its runs alone say. Without it, an item sent again and
// again (the same request from many clients) to a model that crashes at
// random was convicted: every batch that died held a copy of it, their
// deaths were all left out of the model's record as the item's (see
// others), and the model seemed to answer everything else.
func (r *crashRecord) cleared(h uint64) bool {
	for _, rec := range r.runs[:r.n] {
		if !rec.died && slices.Contains(rec.hashes, h) {
			return true
		}
	}
	return false
}

// convicted notes that hunt found poison. Its deaths are put down to the
// item only once the model has answered a batch since: until then, the
// model may have turned to crash on everything, and a verdict that hid its
// own evidence would let the next innocent item be convicted too.
func (r *crashRecord) convicted(hunt *firstCrash) {
	hunt.explained = true
	hunt.explainedAt = r.answers
	r.doubted, r.probed = true, false
}

// reset forgets every batch recorded: they tell of a model no longer
// served.
func (r *crashRecord) reset() {
	clear(r.runs[:])
	r.next, r.n, r.deaths = 0, 0, 0
	r.doubted = false
}

// others counts the recent batches and the deaths among them, leaving out
// those the suspect, of hash h, may explain: the deaths of hunt, its own,
// and of the other hunts whose batch held a copy of it (a burst of one bad
// item sent many times begins as many hunts at once, each of which would
// take the others' deaths for the model's, and blame it); and those of
// hunts that found poison, which the poison explains once the model
// answered a batch after the verdict (see convicted). Leaving out the
// deaths of batches that held a copy, and not the answers, can only
// mislead where a copy was answered, which a poison item never is: a
// model crashing at random on an item sent again and again. Such an item
// is not judged by this count (see cleared).
func (r *crashRecord) others(hunt *firstCrash, h uint64) (deaths, runs int) {
	for _, rec := range r.runs[:r.n] {
		if rec.died && (rec.hunt == hunt || rec.hunt != nil && (rec.hunt.held(h) || rec.hunt.explained && r.answers > rec.hunt.explainedAt)) {
			continue
		}
		runs++
		if rec.died {
			deaths++
		}
	}
	return deaths, runs
}

// newHuntLocked begins the hunt for a bad item in b, whose worker in sl
// died running it. It requires that s.mu is held.
func (s *Streamer) newHuntLocked(sl *slot, b *batch) *firstCrash {
	hunt := &firstCrash{slot: sl, returned: s.returned, pieces: 1, hashes: make([]uint64, len(b.items))}
	for i := range b.items {
		hunt.hashes[i] = s.hashOf(&b.items[i])
	}
	return hunt
}

// held reports whether the batch that began the hunt held an item of hash h.
func (c *firstCrash) held(h uint64) bool { return slices.Contains(c.hashes, h) }

// judgeLocked says what it means that it, alone in its batch, crashed a
// worker again: it has now done so it.aloneCrashes times, in hunt.
// waiting says that other batches wait to run. While the last item
// convicted has not been followed by an answer, no other is convicted:
// two items in a row that crash every worker they run on, with nothing
// answered between them, tell of the model (the same item again, its
// quarantine over, tells of the item). It requires that s.mu is held.
func (s *Streamer) judgeLocked(it *item, hunt *firstCrash, waiting bool) (verdict, error) {
	h := s.hashOf(it)
	deaths, runs := s.record.others(hunt, h)
	rate := float64(deaths+1) / float64(runs+2)
	n := int(it.aloneCrashes)
	doubted := s.record.doubted && h != s.record.last
	switch {
	case n < 2:
		// Once proves nothing: an operator's kill -9 looks the same.
		return verdictUnsure, nil
	case s.record.cleared(h) && n < maxAloneCrashes:
		// The model answered it, or a copy: it crashes at random, and
		// the item runs alone again, to be answered in its turn.
		return verdictUnsure, nil
	case s.record.cleared(h):
		return verdictModel, fmt.Errorf("%w: this item crashed the worker alone %d times, but the model answered a copy of it lately: it crashes at random, not on this item",
			ErrModelFailed, n)
	case !it.crashedFresh && n < staleCrashes:
		// Every worker it crashed alone had run other batches first:
		// two workers that come to fail as they age (a leak, a count
		// of batches, kill -9 of the old ones) would look the same. A
		// bad item crashes a fresh one too, which takes it first when
		// one is idle (see wantsFresh), or a third old one.
		return verdictUnsure, nil
	case !doubted && math.Pow(rate, float64(n)) <= blameLevel:
		s.record.last = h
		return verdictPoison, fmt.Errorf("%w: it crashed the worker alone %d times, while the model answered %d of its last %d other batches",
			ErrPoison, n, runs-deaths, runs)
	case !doubted && n < maxAloneCrashes && math.Pow(rate, maxAloneCrashes) <= blameLevel:
		return verdictUnsure, nil
	case !it.deferred && waiting:
		return verdictWait, nil
	case doubted && !s.record.probed && s.canary.data != nil:
		return verdictProbe, nil
	case runs == deaths:
		return verdictModel, fmt.Errorf("%w: the model crashes on every batch (this item crashed the worker alone %d times, and no other batch was answered lately); the item is not to blame",
			ErrModelFailed, n)
	case doubted:
		return verdictModel, fmt.Errorf("%w: this item crashed the worker alone %d times, as did the item taken for poison before it, and the model answered no batch between them; the item is not to blame",
			ErrModelFailed, n)
	}
	return verdictModel, fmt.Errorf("%w: this item crashed the worker alone %d times, but the model crashed on %d of its last %d other batches too: too often, or seen on too few, to blame the item",
		ErrModelFailed, n, deaths, runs)
}

// pendingDeath is a death in a hunt, counted towards its slot's
// MaxRestarts unless the hunt finds poison (see huntOverLocked).
type pendingDeath struct {
	slot *slot
	at   time.Time
}

// huntOverLocked settles the deaths of hunt once it has found poison
// (blameModel false): the item explains them, and none counts, the first
// included when the model answered batches since (see forgiveLocked); or
// once it blamed the model, or ended without a verdict (see
// pieceEndedLocked): every one counts. A slot that this puts over
// MaxRestarts is given up at its next death (see backoff): the deaths
// counted may be those of a slot running and answering now. It requires
// that s.mu is held.
func (s *Streamer) huntOverLocked(hunt *firstCrash, blameModel bool) {
	if hunt == nil {
		return
	}
	if !blameModel {
		s.record.convicted(hunt)
		hunt.pending = nil
		s.forgiveLocked(hunt)
		return
	}
	hunt.blamed = true
	for _, d := range hunt.pending {
		d.slot.recent = append(d.slot.recent, d.at)
	}
	hunt.pending = nil
}

// pieceEndedLocked notes that b will not run again as it is: it was
// answered, its items were dropped or failed, or it was judged or split
// after a death; ran says whether the model ran some of its items (it was
// answered, or judged or split), rather than none (they were dropped,
// expired, or drained at a stop). When b was the last batch of its hunt,
// and the hunt found no poison and blamed nothing, its deaths count as a
// blamed hunt's do if the model ran every piece and answered them, as a
// model that crashes at random answers them: nothing will explain them
// any more. A hunt one of whose pieces never ran (its worker stopped with
// the streamer; pieces run though their callers left, see pruneLocked)
// may have held a bad item there: its deaths but the first are forgiven,
// as before the hunt could count them. It requires that s.mu is held.
func (s *Streamer) pieceEndedLocked(b *batch, ran bool) {
	hunt := b.crash
	if hunt == nil {
		return
	}
	b.crash = nil // ends once, whatever becomes of b
	hunt.pieces--
	if !ran {
		hunt.unrun = true
	}
	if hunt.pieces > 0 || hunt.explained || hunt.blamed {
		return
	}
	if hunt.unrun {
		hunt.pending = nil
		return
	}
	if len(hunt.pending) > 0 {
		s.log.Warn("the hunt for a bad item ended without finding one; the deaths it held back count towards the restarts now",
			"slot", hunt.slot.id, "deaths", len(hunt.pending))
	}
	s.huntOverLocked(hunt, true)
}

// convictLocked puts the item of hash h on the poison list, and fails every
// copy of it admitted already, wherever it waits (see purgeLocked), saying
// how many: each would crash a worker in turn and begin a hunt of its own,
// whose deaths would cloud the judgement of the others and use up the
// restarts. It requires that s.mu is held.
func (s *Streamer) convictLocked(h uint64) (copies int) {
	s.poison.add(h)
	return s.purgeLocked()
}

// purgeLocked fails, with errKnownPoison, the items on the poison list
// that wait in the queue, formed batches and the pieces of hunts included
// (see cleanLocked), and reports how many. The copies of an item convicted
// are found in one walk of the queue as they are convicted, or as they
// are queued when their request was let in as the item was convicted (see
// pushLocked): the queue holds none of the items on the list, so that a
// batch formed of its items need not be looked at before it runs. It
// requires that s.mu is held.
func (s *Streamer) purgeLocked() int {
	n := 0
	s.queue.remove(func(it *item) bool { return s.poison.hasHash(s.hashOf(it)) }, func(it item) {
		s.complete(it, nil, errKnownPoison)
		n++
	})
	s.queue.trimReady(func(b *batch) { n += s.cleanLocked(b) })
	return n
}

// cleanLocked fails, with errKnownPoison, the items of b on the poison
// list, unless b was looked at since the last conviction, and reports how
// many there were. A hunt whose piece held one is over: the item explains
// its deaths (see explainLocked), and what is left of the piece runs as any
// other batch. It requires that s.mu is held.
func (s *Streamer) cleanLocked(b *batch) int {
	gen := s.poison.gen.Load()
	if b.cleanGen == gen {
		return 0
	}
	b.cleanGen = gen
	kept := b.items[:0]
	for i := range b.items {
		it := &b.items[i]
		if s.poison.hasHash(s.hashOf(it)) {
			s.complete(*it, nil, errKnownPoison)
			continue
		}
		kept = append(kept, *it)
	}
	copies := len(b.items) - len(kept)
	if copies == 0 {
		return 0
	}
	if len(kept) == 0 {
		s.probeEndedLocked(b) // the canary itself, convicted since
	}
	clear(b.items[len(kept):])
	b.items = kept
	b.data = b.data[:len(kept)]
	for i := range kept {
		b.data[i] = kept[i].data
	}
	if hunt := b.crash; hunt != nil {
		s.explainLocked(hunt)
		s.pieceEndedLocked(b, false)
		b.suspect = false
	}
	return copies
}

// explainLocked puts the deaths of hunt down to an item convicted
// already, a copy of which its batch held: none of them counts towards
// MaxRestarts, the first included, whatever the workers returned since
// (its conviction asked of the model that it answer other batches), and
// none counts against the model once it has answered a batch since (see
// crashRecord.others). It leaves the record's doubt alone: the item was
// convicted once, and a copy of it found is no new verdict. A hunt that
// blamed the model already has counted its deaths. It requires that s.mu
// is held.
func (s *Streamer) explainLocked(hunt *firstCrash) {
	if hunt.explained || hunt.blamed {
		return
	}
	hunt.explained, hunt.explainedAt = true, s.record.answers
	hunt.byCopy = true
	hunt.pending = nil
	s.forgiveLocked(hunt)
}
