package supervisor

import (
	"container/heap"
	"slices"
	"sync/atomic"
	"time"
)

// item is one queued sample: a reference to its request's Future (which
// holds when it was queued) and its place there, its bytes and batch key,
// and what happened to it so far.
type item struct {
	fut   *Future
	data  []byte
	key   string
	index int32
	// crashes counts the batches containing this item whose worker died;
	// aloneCrashes those in which it was the only item.
	crashes      uint8
	aloneCrashes uint8
	// crashedFresh says that one of its crashes alone was of a worker's
	// first batch (see judgeLocked).
	crashedFresh bool
	// probe: it is a copy of the canary, whose answer nobody waits for
	// and no count tells (see Streamer.probeLocked).
	probe bool
	// deferred says that its hunt once sent it behind the batches waiting,
	// for want of batches the model answered (see verdictWait).
	deferred bool
	// hashed says that hash is its hash on the poison list (see
	// Streamer.hashOf): an item is hashed only where the list is looked at,
	// and once.
	hashed bool
	hash   uint64
}

// batch is a group of items sent to one worker as one message.
type batch struct {
	id    uint64
	items []item
	data  [][]byte // items[i].data, as sent on the wire
	// suspect batches were formed by splitting a batch whose worker died:
	// they run as they are, alone on an idle worker.
	suspect bool
	// deferredAt is the crash record's answers when its lone item was
	// judged too early and sent behind the other work (see verdictWait).
	deferredAt uint64
	// crash is the first death of the batch that a suspect one was split
	// from (nil for others), which a bad item found in it may explain.
	crash *firstCrash
	// cleanGen is the poison list's generation (poisonList.gen) when the
	// batch was formed or last looked at: it holds no item convicted by
	// then, and is looked at again only once another item is (see
	// Streamer.cleanLocked).
	cleanGen uint64
	// sendSeq numbers the batch's latest send to a worker (Streamer.sends),
	// so that a worker's goroutine that finds it given back since (see
	// recallLocked) passes it by: 0 while it is sent to none.
	sendSeq uint64
	// onWire: its worker took it, written to the worker process or taken
	// by the in-process model, since its latest send.
	onWire bool
	// recalling: its worker was asked to give it back since its latest send.
	recalling bool
	// recalled: it was given back unrun, and waits to be sent again.
	recalled bool
	// wantReruns counts the deaths of its workers, running it, for want
	// of the machine's resources (see slot.onExit): past maxWantReruns, an
	// item of it may be what takes them, and it is hunted as after any
	// crash.
	wantReruns uint8
}

// firstCrash is a worker's death running a batch that had not killed one
// before, and the hunt for a bad item it begins. The first death counts
// towards MaxRestarts at once (see noteCrash), unless the hunt finds a bad
// item in the batch while the model answers others (see forgiveLocked);
// the deaths of the hunt after it wait for its verdict, or for its end
// without one (see huntOverLocked and pieceEndedLocked). Guarded by
// Streamer.mu.
type firstCrash struct {
	slot     *slot
	at       time.Time // its entry in the slot's recent restarts; zero until counted
	returned uint64    // batches returned by workers (Streamer.returned) as it died
	forgiven bool
	// pending are the hunt's later deaths, not counted yet.
	pending []pendingDeath
	// pieces counts the hunt's batches not yet ended: the batch that died
	// first, then the suspect ones split from it, wherever they are
	// (queued, running, or back from a death to be judged or split again).
	// The hunt is over when it drops to 0 (see pieceEndedLocked).
	pieces int
	// unrun: a piece ended without the model running any of its items.
	unrun bool
	// explained: the hunt found poison, which its deaths are put down to.
	explained bool
	// explainedAt is crashRecord.answers at the verdict.
	explainedAt uint64
	// byCopy: what explains it is a copy of an item convicted already (see
	// explainLocked).
	byCopy bool
	// blamed: the hunt put a death down to the model, or ended without a
	// verdict; its deaths count, those after it at once (see noteCrash).
	blamed bool
	// hashes are those of the items of the batch that died first (see
	// Streamer.hashOf), hashed as it died: which items its deaths may be
	// put down to (see crashRecord.others).
	hashes []uint64
}

// fifo holds the items of one batch key in arrival order. It belongs to
// the queue: its methods, too, require that the Streamer's mu is held.
type fifo struct {
	items []item
	head  int
	key   string
	at    int // its index in the queue's live heap; -1 when empty
}

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) push(it item) { f.items = append(f.items, it) }

func (f *fifo) front() *item { return &f.items[f.head] }

func (f *fifo) pop() item {
	it := f.items[f.head]
	f.discard(1)
	return it
}

// discard forgets the first n items.
func (f *fifo) discard(n int) {
	clear(f.items[f.head : f.head+n])
	f.head += n
	if f.head == len(f.items) {
		f.items = f.items[:0]
		f.head = 0
	} else if f.head > 1024 && f.head*2 > len(f.items) {
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items = f.items[:n]
		f.head = 0
	}
}

// queue is the bounded waiting room: one fifo per batch key, plus batches
// that were formed already and must run before anything new (retries).
// It has no lock of its own: every method requires that the Streamer's mu
// is held, and only size may be read without it.
type queue struct {
	byKey map[string]*fifo
	// live holds the non-empty fifos, a heap by the time their first item
	// was queued: the next batch is the oldest key's, found at once and
	// kept in order in O(log keys). Scanned, as before, the keys cost each
	// batch a look at every one, so that requests of many shapes (an
	// ONNX input without a batch axis, a sequence length) made draining
	// the queue quadratic, under the lock that admission takes too.
	live   fifoHeap
	n      int      // items in the fifos
	ready  []*batch // formed batches waiting for a worker, oldest first
	readyN int      // items in ready
	// size is n + readyN, stored by every change (made under the
	// Streamer's lock) and read without it: admission refuses a full
	// queue without taking the lock.
	size atomic.Int64
	// last is the fifo of the key pushed last: requests mostly share one
	// key, and this saves a map look-up per item.
	last    *fifo
	lastKey string
}

func newQueue() *queue {
	return &queue{byKey: make(map[string]*fifo)}
}

// items is the number of queued items, formed batches included.
// It requires that the Streamer's mu is held.
func (q *queue) items() int { return q.n + q.readyN }

// resize publishes the number of queued items; call it after every change.
// It requires that the Streamer's mu is held.
func (q *queue) resize() { q.size.Store(int64(q.n + q.readyN)) }

// takeReady removes and returns the i-th formed batch.
// It requires that the Streamer's mu is held.
func (q *queue) takeReady(i int) *batch {
	b := q.ready[i]
	q.ready = append(q.ready[:i], q.ready[i+1:]...)
	q.readyN -= len(b.items)
	q.resize()
	return b
}

// requeue puts formed batches in front of the others.
// It requires that the Streamer's mu is held.
func (q *queue) requeue(batches []*batch) {
	for _, b := range batches {
		q.readyN += len(b.items)
	}
	q.ready = append(batches, q.ready...)
	q.resize()
}

// requeueLast puts b back behind the formed batches waiting, but before
// the items not yet in a batch. It requires that the Streamer's mu is held.
func (q *queue) requeueLast(b *batch) {
	q.readyN += len(b.items)
	q.ready = append(q.ready, b)
	q.resize()
}

// push queues it; the caller calls resize once the request's items are in.
// It requires that the Streamer's mu is held.
func (q *queue) push(it item) {
	f := q.last
	if f == nil || it.key != q.lastKey {
		f = q.byKey[it.key]
		if f == nil {
			f = &fifo{key: it.key, at: -1}
			q.byKey[it.key] = f
		}
		q.last, q.lastKey = f, it.key
	}
	f.push(it)
	if f.at < 0 {
		heap.Push(&q.live, f)
	}
	q.n++
}

// oldest returns the fifo whose first item has waited longest, or nil.
// It requires that the Streamer's mu is held.
func (q *queue) oldest() *fifo {
	if len(q.live) == 0 {
		return nil
	}
	return q.live[0]
}

// fronted notes that the first item of f, in the live heap, changed: it
// moves in the heap, or leaves it if f is empty.
// It requires that the Streamer's mu is held.
func (q *queue) fronted(f *fifo) {
	if f.len() == 0 {
		q.removeKey(f)
		return
	}
	heap.Fix(&q.live, f.at)
}

// fifoHeap is the queue's live fifos, by the time their first item was
// queued (see container/heap).
type fifoHeap []*fifo

func (h fifoHeap) Len() int { return len(h) }

func (h fifoHeap) Less(i, j int) bool {
	return h[i].front().fut.enqueued < h[j].front().fut.enqueued
}

func (h fifoHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}

func (h *fifoHeap) Push(x any) {
	f := x.(*fifo)
	f.at = len(*h)
	*h = append(*h, f)
}

func (h *fifoHeap) Pop() any {
	old := *h
	f := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	f.at = -1
	return f
}

// take moves up to max items (and at most maxBytes, but always one) from f
// to the end of out, which it returns. drop is called for items that must
// not run (deadline passed, caller gone); they are removed too. Items are
// moved in runs, not one by one.
// It requires that the Streamer's mu is held.
func (q *queue) take(out []item, f *fifo, max, maxBytes int, now time.Time, drop func(item, time.Time)) []item {
	size := 0
	full := false
	for !full && f.len() > 0 && len(out) < max {
		// The run of items at the front that can go, up to the first one
		// that must not run or would not fit.
		run := f.items[f.head:]
		n := 0
		for ; n < len(run) && len(out)+n < max; n++ {
			it := &run[n]
			if it.fut.gone() || it.fut.expired(now) {
				break
			}
			if len(out)+n > 0 && size+len(it.data) > maxBytes {
				full = true
				break
			}
			size += len(it.data)
		}
		if n == 0 {
			if !full {
				drop(f.pop(), now)
				q.n--
			}
			continue
		}
		out = append(out, run[:n]...)
		f.discard(n)
		q.n -= n
	}
	q.fronted(f)
	q.resize()
	return out
}

// removeKey forgets f, which is empty, as a key with items.
// It requires that the Streamer's mu is held.
func (q *queue) removeKey(f *fifo) {
	if f.at >= 0 {
		heap.Remove(&q.live, f.at)
	}
	if len(q.byKey) > 64 && q.byKey[f.key] == f {
		// Keys come from request shapes; forget idle ones so the map
		// cannot grow without bound.
		delete(q.byKey, f.key)
		if q.last == f {
			q.last = nil
		}
	}
}

// sweep removes every item that must not run, calling drop for each. It
// walks the whole queue: the dispatcher runs it at most every sweepInterval,
// never once per request.
// It requires that the Streamer's mu is held.
func (q *queue) sweep(now time.Time, drop func(item, time.Time)) {
	q.remove(func(it *item) bool { return it.fut.gone() || it.fut.expired(now) }, func(it item) { drop(it, now) })
}

// remove takes every item that bad picks out of the fifos, in one walk of
// them all, and hands each to out. bad may change the item (to cache what
// it learns of it).
// It requires that the Streamer's mu is held.
func (q *queue) remove(bad func(*item) bool, out func(item)) {
	for _, f := range slices.Clone(q.live) {
		kept := f.items[:0]
		for i := f.head; i < len(f.items); i++ {
			it := &f.items[i]
			if bad(it) {
				out(*it)
				q.n--
				continue
			}
			kept = append(kept, *it)
		}
		clear(f.items[len(kept):])
		f.items, f.head = kept, 0
		q.fronted(f)
	}
	q.resize()
}

// trimReady has trim take items out of every formed batch, and forgets
// the batches it leaves empty.
// It requires that the Streamer's mu is held.
func (q *queue) trimReady(trim func(*batch)) {
	kept := q.ready[:0]
	for _, b := range q.ready {
		n := len(b.items)
		trim(b)
		q.readyN -= n - len(b.items)
		if len(b.items) > 0 {
			kept = append(kept, b)
		}
	}
	clear(q.ready[len(kept):])
	q.ready = kept
	q.resize()
}

// drain removes everything queued, formed batches included.
// It requires that the Streamer's mu is held.
func (q *queue) drain() []item {
	var out []item
	for _, b := range q.ready {
		out = append(out, b.items...)
	}
	q.ready = nil
	for _, f := range q.live {
		out = append(out, f.items[f.head:]...)
		f.items, f.head, f.at = nil, 0, -1
	}
	clear(q.live)
	q.live = q.live[:0]
	q.n, q.readyN = 0, 0
	q.resize()
	return out
}
