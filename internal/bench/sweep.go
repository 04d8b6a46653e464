package bench

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/streamer-dev/streamer/model/builtin"
)

// SweepRow is one run of a sweep: a batching policy at a number of clients,
// with the best any batcher could do there when the model's cost is known.
type SweepRow struct {
	Batching string `json:"batching"`
	Clients  int    `json:"clients"`
	// ItemsPerRequest is the items each client's request carries; 0 is
	// taken for 1.
	ItemsPerRequest int    `json:"items_per_request"`
	Report          Report `json:"report"`
	// BestItemsPerS and BestP50MS are the best possible throughput and
	// median latency for the sleep model (see SleepBest); 0 when unknown.
	BestItemsPerS float64 `json:"best_items_per_s,omitempty"`
	BestP50MS     float64 `json:"best_p50_ms,omitempty"`
	// ReturnMS is how long a round's callers took to be all back after
	// their answer, as the server measured it (see supervisor.ReturnStats), and
	// BestWithReturnItemsPerS the best throughput once that time is
	// counted in each round; both 0 beyond a batch per worker, and when the
	// server did not measure the returns.
	ReturnMS                float64 `json:"return_ms,omitempty"`
	BestWithReturnItemsPerS float64 `json:"best_with_return_items_per_s,omitempty"`
}

// WithReturn fills in r.ReturnMS and r.BestWithReturnItemsPerS for a closed
// loop on workers, from the best figures and the callers' return the server
// measured. The best counts no time between an answer and the next request;
// on a small machine whose cores the clients share with the server, turning
// a batch of answers into new requests takes milliseconds, which a closed
// loop cannot avoid.
func (r *SweepRow) WithReturn(workers int) {
	if r.BestP50MS <= 0 || r.BestItemsPerS <= 0 || r.Report.BatchFigures == nil || r.Report.Returns.Share == 0 {
		return // nothing measured: greedy batching does not follow the returns
	}
	// The returns are the callers', one a request; the round's items are
	// all of theirs.
	perWorker := math.Ceil(float64(r.Clients) / float64(workers))
	ret := r.Report.Returns
	r.ReturnMS = ret.FirstMs + (perWorker-1)*ret.GapMs
	items := float64(r.Clients * max(r.ItemsPerRequest, 1))
	round := items / r.BestItemsPerS // seconds
	r.BestWithReturnItemsPerS = items / (round + r.ReturnMS/1000)
}

// SleepBest is the best a batcher can do for a closed loop of clients, each
// request of itemsPerRequest items, on workers running the sleep model spec
// names (batch cost F + p·n) with batches of at most batchSize. A round
// carries n = clients × itemsPerRequest items, which a batcher may spread
// over the workers as it likes (it queues items, not requests): while they
// fit in one batch per worker, every round runs them all at once,
// n / (F + p·⌈n/w⌉) items a second, each request answered after
// F + p·⌈n/w⌉; beyond that the workers run full batches back to back,
// w·B / (F + p·B), and the median latency is not given (0). It returns
// zeros for a model whose cost is not known.
func SleepBest(spec string, workers, batchSize, clients, itemsPerRequest int) (itemsPerS, p50ms float64) {
	name, args, _ := strings.Cut(spec, ":")
	if name != "sleep" || workers < 1 || clients < 1 || itemsPerRequest < 1 {
		return 0, 0
	}
	cost, err := builtin.ParseSleep(args)
	if err != nil {
		return 0, 0
	}
	items := clients * itemsPerRequest
	if items > workers*batchSize {
		return float64(workers*batchSize) / cost.Cost(batchSize).Seconds(), 0
	}
	perWorker := int(math.Ceil(float64(items) / float64(workers)))
	round := cost.Cost(perWorker)
	if round <= 0 {
		return 0, 0
	}
	return float64(items) / round.Seconds(), float64(round.Microseconds()) / 1000
}

// PrintSweep writes the rows as one table, each figure beside the best
// possible: items/s as a fraction of it, p50 as a multiple of it; the last
// column counts the failed requests of each run, listed by kind below the
// table.
func PrintSweep(w io.Writer, workers int, rows []SweepRow) {
	fmt.Fprintf(w, "%7s %8s %9s %10s %10s %8s %6s %9s %9s %7s %9s %8s %9s %9s %8s\n",
		"workers", "clients", "batching", "items/s", "best", "fraction", "batch", "p50 ms", "best p50", "× best", "p99 ms", "waited",
		"return ms", "of best+r", "errors")
	for _, r := range rows {
		fraction, overBest := "—", "—"
		best, bestP50 := "—", "—"
		ret, ofReturn := "—", "—"
		batch, waited := "—", "—"
		if b := r.Report.BatchFigures; b != nil {
			batch, waited = fmt.Sprintf("%.1f", b.MeanBatchSize), fmt.Sprintf("%d", b.Dispatch.Waited)
		}
		if r.BestItemsPerS > 0 {
			best = fmt.Sprintf("%.0f", r.BestItemsPerS)
			fraction = fmt.Sprintf("%.3f", r.Report.ItemsPerS/r.BestItemsPerS)
		}
		if r.BestWithReturnItemsPerS > 0 {
			ret = fmt.Sprintf("%.2f", r.ReturnMS)
			ofReturn = fmt.Sprintf("%.3f", r.Report.ItemsPerS/r.BestWithReturnItemsPerS)
		}
		if r.BestP50MS > 0 {
			bestP50 = fmt.Sprintf("%.2f", r.BestP50MS)
			overBest = fmt.Sprintf("%.2f", r.Report.LatencyMS.P50/r.BestP50MS)
		}
		fmt.Fprintf(w, "%7d %8d %9s %10.0f %10s %8s %6s %9.2f %9s %7s %9.2f %8s %9s %9s %8d\n",
			workers, r.Clients, r.Batching, r.Report.ItemsPerS, best, fraction, batch,
			r.Report.LatencyMS.P50, bestP50, overBest, r.Report.LatencyMS.P99, waited, ret, ofReturn, r.Report.failed())
	}
	for _, r := range rows {
		if len(r.Report.Errors) > 0 {
			fmt.Fprintf(w, "errors of %d clients, %s:\n", r.Clients, r.Batching)
			r.Report.printErrorKinds(w)
			r.Report.printOverload(w)
		}
	}
}
