package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/supervisor"
)

// Report is the figures of a run's measured window. BENCHMARKS.md documents
// its JSON keys.
type Report struct {
	// Requests is the number of successful requests answered in the window.
	Requests int `json:"requests"`
	// Seconds is the window's length (shorter than asked when interrupted).
	Seconds float64 `json:"seconds"`
	// RequestsPerS is Requests over Seconds.
	RequestsPerS float64 `json:"requests_per_s"`
	// ItemsPerS is RequestsPerS times the items in each request.
	ItemsPerS float64 `json:"items_per_s"`
	// LatencyMS is the percentiles of the successful requests' latency.
	LatencyMS Latencies `json:"latency_ms"`
	// InFlightAtEnd is the requests still waiting for their answer when
	// the load ended, left out of every figure above; OldestInFlightMS is
	// how long the oldest of them had waited. A closed loop ends with about
	// one a client; a server that does not answer shows here.
	InFlightAtEnd    int     `json:"in_flight_at_end"`
	OldestInFlightMS float64 `json:"oldest_in_flight_ms"`
	// Skipped counts the sends of an open loop (Rate > 0) scheduled in the
	// window but not sent, as Concurrency requests were already out; they
	// are in no other figure. SkippedFraction is their share of the sends
	// scheduled in the window. Both are 0 for a closed loop.
	Skipped         int     `json:"skipped"`
	SkippedFraction float64 `json:"skipped_fraction"`
	// openLoop says the load was an open loop (Rate > 0), whose clients
	// do not pause after a refusal.
	openLoop bool
	// Errors counts the failed requests by kind: "http 429", "connection",
	// "timeout", "overloaded" and the like.
	Errors map[string]uint64 `json:"errors"`
	// FirstErrors is the text of the first failure of each kind of Errors
	// that said more than its kind: "dial tcp 127.0.0.1:1: connect:
	// connection refused" of a "connection", so that a refused connection,
	// a TLS failure and the like tell themselves apart.
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	// LimitItemsPerS is the physical limit workers × batch / cost(batch),
	// when the model's cost is known.
	LimitItemsPerS float64 `json:"limit_items_per_s,omitempty"`
	// OfLimit is ItemsPerS over LimitItemsPerS, set whenever that is,
	// 0 included (a run that answered nothing).
	OfLimit *float64 `json:"of_limit,omitempty"`
	// BatchFigures are the batches the server formed in the window. They
	// are nil, and their keys absent from the JSON, when the server's
	// counters could not be read (BatchesUnavailable says why), and for a
	// front end behind Redis (FrontEnd).
	*BatchFigures
	// BatchesUnavailable says why BatchFigures is nil, when it is for want
	// of the server's counters.
	BatchesUnavailable string `json:"batches_unavailable,omitempty"`
	// FrontEnd says that the target is a front end behind Redis: its
	// nodes form the batches, so BatchFigures is nil here, and each node's
	// /v1/stats has them.
	FrontEnd bool `json:"front_end,omitempty"`
	// Interrupted says that the run was interrupted before the window
	// ended: the figures cover the part measured, in Seconds.
	Interrupted bool `json:"interrupted"`
}

// BatchFigures are the batches a server formed in a window, from its
// counters (its /v1/stats, or the supervisor's Stats) at the window's
// start and end.
type BatchFigures struct {
	// MeanBatchSize is the mean of BatchSizes.
	MeanBatchSize float64 `json:"mean_batch_size"`
	// BatchSizes counts the batches by their number of items.
	BatchSizes map[int]uint64 `json:"batch_sizes"`
	// Dispatch counts the batches by why they were sent, and the wait for
	// arrivals that the server added.
	Dispatch supervisor.DispatchStats `json:"dispatch"`
	// Cost is the batch cost the server measured, at the window's end.
	Cost supervisor.CostStats `json:"cost"`
	// Returns is how the callers came back once answered, as the server
	// measured it at the window's end.
	Returns supervisor.ReturnStats `json:"returns"`
}

// Latencies are latency percentiles in milliseconds, by the nearest rank:
// the pth percentile of n values is the ⌈p/100·n⌉th smallest, so that p99 of
// 100 requests is the 99th, not the slowest.
type Latencies struct {
	// P50 is the median.
	P50 float64 `json:"p50"`
	// P90 is the 90th percentile.
	P90 float64 `json:"p90"`
	// P99 is the 99th percentile.
	P99 float64 `json:"p99"`
	// Max is the slowest.
	Max float64 `json:"max"`
}

// newReport counts the successful requests of the window and its failures
// by kind; the server's figures are added apart.
func newReport(samples []sample, counted tally, kinds *errorKinds, elapsed time.Duration, itemsPerRequest int) Report {
	r := Report{Seconds: elapsed.Seconds(), Errors: map[string]uint64{}}
	r.InFlightAtEnd, r.OldestInFlightMS = counted.cutShort, ms(counted.oldest)
	if counted.scheduled > 0 {
		r.openLoop = true
		r.Skipped, r.SkippedFraction = counted.skipped, float64(counted.skipped)/float64(counted.scheduled)
	}
	for id, n := range counted.failures {
		kind := kinds.kind(id)
		r.Errors[kind.name] += n
		if kind.first != "" {
			if r.FirstErrors == nil {
				r.FirstErrors = map[string]string{}
			}
			r.FirstErrors[kind.name] = kind.first
		}
	}
	ok := make([]time.Duration, len(samples))
	for i, s := range samples {
		ok[i] = s.latency
	}
	r.Requests = len(ok)
	r.RequestsPerS = float64(len(ok)) / elapsed.Seconds()
	r.ItemsPerS = r.RequestsPerS * float64(itemsPerRequest)
	slices.Sort(ok)
	percentile := func(perTenThousand int) float64 {
		if len(ok) == 0 {
			return 0
		}
		return ms(ok[nearestRank(perTenThousand, len(ok))])
	}
	r.LatencyMS = Latencies{P50: percentile(5000), P90: percentile(9000), P99: percentile(9900), Max: percentile(10000)}
	return r
}

// batchFigures are the batches formed between the before and after counters.
func batchFigures(before, after serverStats) *BatchFigures {
	b := &BatchFigures{
		Dispatch: dispatchBetween(before.Dispatch, after.Dispatch),
		Cost:     after.Cost,
		Returns:  after.Returns,
	}
	b.BatchSizes, b.MeanBatchSize = batchesBetween(before.Stats, after.Stats)
	return b
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nearestRank is the index, in n sorted values, of the percentile given in
// hundredths of a percent: the smallest value with at least that share of
// the values at or below it, index ⌈q·n⌉-1. Integers keep q·n exact: in
// floating point 0.9 × 100 is a hair above 90, and its ceiling one rank
// too high.
func nearestRank(perTenThousand, n int) int {
	rank := (perTenThousand*n + 9999) / 10000
	return min(max(rank, 1), n) - 1
}

// wentBack reports whether a counter after is below its count before:
// they were not read from one run of one server, and the differences
// would wrap to nonsense.
func wentBack(before, after supervisor.Stats) bool {
	b, a := before.Dispatch, after.Dispatch
	if after.Answered < before.Answered || after.Batches < before.Batches ||
		a.Full < b.Full || a.Idle < b.Idle || a.Waited < b.Waited || a.MaxLatency < b.MaxLatency ||
		a.Deadline < b.Deadline || a.Retry < b.Retry || a.Recalled < b.Recalled || a.WaitAddedMs < b.WaitAddedMs {
		return true
	}
	for n, c := range before.BatchSizes {
		if n >= len(after.BatchSizes) && c > 0 || n < len(after.BatchSizes) && after.BatchSizes[n] < c {
			return true
		}
	}
	return false
}

// dispatchBetween counts the dispatches between two reads of the counters.
func dispatchBetween(before, after supervisor.DispatchStats) supervisor.DispatchStats {
	return supervisor.DispatchStats{
		Full: after.Full - before.Full, Idle: after.Idle - before.Idle, Waited: after.Waited - before.Waited,
		MaxLatency: after.MaxLatency - before.MaxLatency, Deadline: after.Deadline - before.Deadline,
		Retry: after.Retry - before.Retry, Recalled: after.Recalled - before.Recalled, WaitAddedMs: after.WaitAddedMs - before.WaitAddedMs,
	}
}

// batchesBetween counts the batches formed between two reads of the
// counters, by size, and their mean size.
func batchesBetween(before, after supervisor.Stats) (sizes map[int]uint64, mean float64) {
	sizes = map[int]uint64{}
	var items, batches uint64
	for n := range after.BatchSizes {
		c := after.BatchSizes[n]
		if n < len(before.BatchSizes) {
			c -= before.BatchSizes[n]
		}
		if c > 0 {
			sizes[n] = c
			items += uint64(n) * c
			batches += c
		}
	}
	if batches > 0 {
		mean = float64(items) / float64(batches)
	}
	return sizes, mean
}

// setLimit fills in the physical limit, when it is known (above 0).
func (r *Report) setLimit(limitItemsPerS float64) {
	if limitItemsPerS <= 0 {
		return
	}
	r.LimitItemsPerS = limitItemsPerS
	of := r.ItemsPerS / r.LimitItemsPerS
	r.OfLimit = &of
}

// SleepLimit is the physical limit workers × batch / cost(batch) in items/s
// of the model spec names (a --model value), or 0 when spec is not the sleep
// model, whose cost is the only one known in advance.
func SleepLimit(spec string, workers, batchSize int) float64 {
	name, args, _ := strings.Cut(spec, ":")
	if name != "sleep" {
		return 0
	}
	cost, err := builtin.ParseSleep(args)
	if err != nil || cost.Cost(batchSize) <= 0 {
		return 0
	}
	return float64(workers) * float64(batchSize) / cost.Cost(batchSize).Seconds()
}

// Print writes r as a table.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "requests      %d in %.1fs\n", r.Requests, r.Seconds)
	fmt.Fprintf(w, "requests/s    %.0f\n", r.RequestsPerS)
	fmt.Fprintf(w, "items/s       %.0f\n", r.ItemsPerS)
	if r.LimitItemsPerS > 0 {
		fmt.Fprintf(w, "limit items/s %.0f (workers × batch / cost(batch)); reached %.3f of it\n", r.LimitItemsPerS, *r.OfLimit)
	}
	fmt.Fprintf(w, "latency ms    p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.LatencyMS.P50, r.LatencyMS.P90, r.LatencyMS.P99, r.LatencyMS.Max)
	if r.InFlightAtEnd > 0 {
		fmt.Fprintf(w, "in flight     %d at the end, waiting up to %.2f ms: not counted above\n", r.InFlightAtEnd, r.OldestInFlightMS)
	}
	if r.Skipped > 0 {
		warning := ""
		if r.SkippedFraction > maxSkippedFraction {
			warning = "  !! the server did not keep up with the rate"
		}
		fmt.Fprintf(w, "skipped       %d sends (%.1f%% of the schedule) with --concurrency requests out: not counted above%s\n",
			r.Skipped, 100*r.SkippedFraction, warning)
	}
	switch {
	case r.FrontEnd:
		fmt.Fprintln(w, "batches       formed by the nodes behind this front end: see each node's /v1/stats (or streamer status)")
	case r.BatchFigures == nil:
		fmt.Fprintf(w, "batch figures unavailable: %s\n", r.BatchesUnavailable)
	default:
		r.BatchFigures.print(w)
	}
	r.printErrors(w)
}

// print writes the batch figures as rows of the report's table.
func (b *BatchFigures) print(w io.Writer) {
	fmt.Fprintf(w, "mean batch    %.2f\n", b.MeanBatchSize)
	d := b.Dispatch
	fmt.Fprintf(w, "dispatched    full %d  idle %d  waited %d (%.2f ms each)  max-latency %d  deadline %d  retry %d  recalled %d\n",
		d.Full, d.Idle, d.Waited, d.WaitAddedMs/float64(max(d.Waited, 1)), d.MaxLatency, d.Deadline, d.Retry, d.Recalled)
	if b.Cost.Fitted {
		fmt.Fprintf(w, "batch cost    %.3f ms + %.4f ms per item (fitted on the server)\n", b.Cost.FixedMs, b.Cost.PerItemMs)
	}
	b.printBatchSizes(w)
}

// printBatchSizes draws the histogram of batch sizes with #s.
func (b *BatchFigures) printBatchSizes(w io.Writer) {
	fmt.Fprintln(w, "batch sizes")
	sizes := make([]int, 0, len(b.BatchSizes))
	var most uint64
	for n, c := range b.BatchSizes {
		sizes = append(sizes, n)
		most = max(most, c)
	}
	slices.Sort(sizes)
	for _, n := range sizes {
		c := b.BatchSizes[n]
		fmt.Fprintf(w, "  %4d  %8d  %s\n", n, c, strings.Repeat("#", int(1+39*c/max(most, 1))))
	}
}

// failed counts the failed requests.
func (r Report) failed() uint64 {
	var n uint64
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// printErrors lists the failed requests by kind.
func (r Report) printErrors(w io.Writer) {
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors        none")
		return
	}
	fmt.Fprintln(w, "errors")
	r.printErrorKinds(w)
	r.printOverload(w)
}

// printOverload warns when more than maxOverloadedFraction of the requests
// were refused for want of room.
func (r Report) printOverload(w io.Writer) {
	n, all := r.overloaded(), uint64(r.Requests)+r.failed()
	if float64(n) <= maxOverloadedFraction*float64(all) {
		return
	}
	how := "each client paused 1 to 100 ms after each refusal"
	if r.openLoop {
		how = "the schedule sent on regardless"
	}
	fmt.Fprintf(w, "  !! %.1f%% of the requests were refused for want of room (429, 503, or their gRPC and Go API forms): the server was past what it takes, and its figures are those of a server overloaded (%s)\n",
		100*float64(n)/float64(all), how)
}

// maxOverloadedFraction is the share of requests refused for want of room
// past which the report warns that the server was overloaded.
const maxOverloadedFraction = 0.01

// overloaded counts the requests refused for want of room (see
// overloadKinds).
func (r Report) overloaded() uint64 {
	var n uint64
	for _, kind := range overloadKinds {
		n += r.Errors[kind]
	}
	return n
}

// printErrorKinds writes a line for each kind of failed request.
func (r Report) printErrorKinds(w io.Writer) {
	kinds := make([]string, 0, len(r.Errors))
	for kind := range r.Errors {
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	for _, kind := range kinds {
		if first := r.FirstErrors[kind]; first != "" {
			fmt.Fprintf(w, "  %-24s %8d  first: %s\n", kind, r.Errors[kind], first)
			continue
		}
		fmt.Fprintf(w, "  %-24s %8d\n", kind, r.Errors[kind])
	}
}
