package supervisor

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// The latency histograms have fixed buckets whose upper bounds double from
// latencyBase: 100µs, 200µs, … up to about 52s, then one for longer waits.
// Powers of two let an observation find its bucket with one division and
// one bit count, and fixed buckets let a batch's observations be summed
// on the stack before they touch the counters that every core shares.
const (
	latencyBase    = 100 * time.Microsecond
	latencyBuckets = 20 // finite buckets; one more counts the rest
)

// latencyBucket returns the bucket of a duration of d nanoseconds.
func latencyBucket(d int64) int {
	if d < 0 {
		d = 0
	}
	return min(bits.Len64(uint64(d/int64(latencyBase))), latencyBuckets)
}

// latencyTally gathers one batch's observations, to be added to a shared
// latencyHistogram at once: a batch then costs a few atomic additions
// rather than one per item.
type latencyTally struct {
	counts [latencyBuckets + 1]uint32
	sumNs  int64
}

func (t *latencyTally) observe(d int64) {
	t.counts[latencyBucket(d)]++
	t.sumNs += d
}

// latencyHistogram counts durations, safe for concurrent use.
type latencyHistogram struct {
	counts [latencyBuckets + 1]atomic.Uint64
	sumNs  atomic.Int64
}

// add counts what t gathered.
func (h *latencyHistogram) add(t *latencyTally) {
	for i, c := range t.counts {
		if c != 0 {
			h.counts[i].Add(uint64(c))
		}
	}
	h.sumNs.Add(t.sumNs)
}

// addN counts n observations of d nanoseconds.
func (h *latencyHistogram) addN(d int64, n int) {
	h.counts[latencyBucket(d)].Add(uint64(n))
	h.sumNs.Add(d * int64(n))
}

func (h *latencyHistogram) snapshot() Histogram {
	out := Histogram{
		BoundsSeconds: make([]float64, latencyBuckets),
		Counts:        make([]uint64, latencyBuckets+1),
		SumSeconds:    float64(h.sumNs.Load()) / 1e9,
	}
	for i := range out.BoundsSeconds {
		// Nanoseconds over 1e9 rounds once, to the bound's shortest
		// decimal: Duration.Seconds adds two parts, and gives 1.6383999…
		// for 1.6384 s, which becomes the le label.
		out.BoundsSeconds[i] = float64(latencyBase<<i) / 1e9
	}
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
	}
	return out
}

// LatencyHistogram counts durations in the buckets of LatencyStats, safe
// for concurrent use: for a Backend other than a Streamer (a front end
// that sends its items through Redis) to report its own.
type LatencyHistogram struct{ h latencyHistogram }

// Observe counts n durations of d.
func (h *LatencyHistogram) Observe(d time.Duration, n int) { h.h.addN(int64(d), n) }

// Snapshot returns what h has counted.
func (h *LatencyHistogram) Snapshot() Histogram { return h.h.snapshot() }

// latencies are the three histograms of Stats.Latency.
type latencies struct {
	queueWait, compute, endToEnd latencyHistogram
}

// observe counts the latencies of the items of b that ran, b having reached
// the head of its worker at started and been answered at answered. expired
// lists, in order, the indexes of the items the worker did not run.
func (s *Streamer) observeLatency(b *batch, expired []int, started, answered time.Time) {
	startNs, answerNs := int64(started.Sub(s.epoch)), int64(answered.Sub(s.epoch))
	var wait, total latencyTally
	ran := 0
	for i := range b.items {
		if len(expired) > 0 && expired[0] == i {
			expired = expired[1:]
			continue
		}
		enqueued := b.items[i].fut.enqueued
		wait.observe(max(startNs-enqueued, 0))
		total.observe(answerNs - enqueued)
		ran++
	}
	if ran == 0 {
		return
	}
	s.stats.latency.queueWait.add(&wait)
	s.stats.latency.endToEnd.add(&total)
	s.stats.latency.compute.addN(answerNs-startNs, ran)
}

// LatencyStats are histograms of how long the items a worker ran took, in
// seconds. Each item is counted once in each: QueueWait + Compute is about
// EndToEnd.
type LatencyStats struct {
	// QueueWait runs from Submit to the moment the item's batch reached the
	// head of its worker's pipeline (it includes the wait for batch-mates
	// and for the batches ahead of it on that worker).
	QueueWait Histogram `json:"queue_wait"`
	// Compute is the time the item's batch took on its worker; every item
	// of a batch counts it once.
	Compute Histogram `json:"compute"`
	// EndToEnd runs from Submit to the answer.
	EndToEnd Histogram `json:"end_to_end"`
}

// Histogram counts durations in buckets.
type Histogram struct {
	// BoundsSeconds are the buckets' upper bounds, in seconds, ascending.
	BoundsSeconds []float64 `json:"bounds_s"`
	// Counts[i] counts the durations below BoundsSeconds[i] and not below
	// the bound before it; the last, Counts[len(BoundsSeconds)], counts the
	// longer ones. They are not cumulative.
	Counts []uint64 `json:"counts"`
	// SumSeconds is the sum of the durations counted.
	SumSeconds float64 `json:"sum_s"`
}

// Count is the number of durations counted.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}
