package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/streamer-dev/streamer/supervisor"
)

// The outcomes requests and items are counted by, as the label outcome.
const (
	outcomeOK       = "ok"        // answered with outputs
	outcomeRejected = "rejected"  // refused before running: bad, too large, overloaded, unavailable
	outcomeTimedOut = "timed_out" // its deadline passed
	outcomeFailed   = "failed"    // the model refused it or failed
	outcomePoisoned = "poisoned"  // it crashes the model
	outcomeCanceled = "canceled"  // its client went away
)

var requestOutcomes = [...]string{outcomeOK, outcomeRejected, outcomeTimedOut, outcomeFailed, outcomePoisoned, outcomeCanceled}

// requestCounts counts /predict requests by outcome: one atomic addition
// per request, the only cost metrics add to the HTTP path. Everything else
// is read from the backend when /metrics is scraped.
type requestCounts struct {
	byOutcome [len(requestOutcomes)]atomic.Uint64
	// lastOK is when the last request answered with outputs was counted,
	// in Unix milliseconds (0 before the first): the v2 statistics'
	// last_inference.
	lastOK atomic.Int64
}

// count counts a request answered with status, err being its error if any.
func (c *requestCounts) count(status int, err error) {
	i := 1 // rejected
	switch {
	case status == http.StatusOK:
		i = 0
		c.lastOK.Store(time.Now().UnixMilli())
	case status == http.StatusGatewayTimeout:
		i = 2
	case status == StatusClientClosedRequest:
		i = 5
	case errors.Is(err, supervisor.ErrPoison):
		i = 4
	case status == http.StatusUnprocessableEntity || status >= 500 && status != http.StatusServiceUnavailable:
		i = 3
	}
	c.byOutcome[i].Add(1)
}

// metricsHandler serves GET /metrics: the collector's metrics, Go's runtime
// metrics and the process's, and more's (nil: none), in Prometheus's text
// format.
func metricsHandler(backend Backend, requests *requestCounts, more prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newCollector(backend, requests),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if m, ok := backend.(metricser); ok {
		reg.MustRegister(m.Metrics())
	}
	if more != nil {
		reg.MustRegister(more)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Collector returns the metrics /metrics serves of backend (a
// supervisor.Streamer, or a broker.FrontEnd), read from it when scraped,
// for an embedder that runs it without this package's HTTP API and
// registers them on a registry of its own: every streamer_ metric but
// streamer_requests_total, which counts HTTP requests. A broker front
// end's own, streamer_broker_, are its Metrics (or broker.Collector), and
// Go's and the process's are the client library's collectors. Two
// backends of one process (a node's Streamer and a front end) have the
// same names: register each under a label of its own, through
// prometheus.WrapRegistererWith. A nil backend panics, as in New.
func Collector(backend Backend) prometheus.Collector {
	if backend == nil {
		panic("httpapi: Collector of a nil Backend")
	}
	return newCollector(backend, nil)
}

// metricser is a Backend with metrics of its own beyond Stats and Slots:
// one that goes through a broker counts its traffic there.
type metricser interface{ Metrics() prometheus.Collector }

// collector turns the backend's Stats and Slots into metrics when scraped,
// so that the hot path pays nothing for them. A backend that lacks a field
// (a front end with no slots of its own) reports it as zero.
type collector struct {
	backend  Backend
	requests *requestCounts

	requestsTotal, itemsTotal, batchesTotal, batchSize *prometheus.Desc
	queueWait, compute, endToEnd                       *prometheus.Desc
	queued, roomKept, inFlight, ready                  *prometheus.Desc
	restarts, crashes, slotBatches, workerState, initS *prometheus.Desc
	dispatches, waitAdded                              *prometheus.Desc
	costFitted, costFixed, costPerItem                 *prometheus.Desc
	returnShare, returnFirst, returnGap                *prometheus.Desc
	reloads                                            *prometheus.Desc
}

func newCollector(backend Backend, requests *requestCounts) *collector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("streamer_"+name, help, labels, nil)
	}
	return &collector{
		backend:       backend,
		requests:      requests,
		requestsTotal: desc("requests_total", "Prediction requests answered, by outcome.", "outcome"),
		itemsTotal:    desc("items_total", "Items answered or refused, by outcome.", "outcome"),
		batchesTotal:  desc("batches_total", "Batches run to completion."),
		batchSize:     desc("batch_size_items", "Items per completed batch."),
		queueWait:     desc("queue_wait_seconds", "Time from admission until the item's batch reached the head of its worker."),
		compute:       desc("compute_seconds", "Time the item's batch ran on its worker, counted once per item."),
		endToEnd:      desc("end_to_end_seconds", "Time from admission until the item was answered."),
		queued:        desc("queue_depth_items", "Items waiting in the queue."),
		roomKept:      desc("queue_room_kept_items", "Room in the queue kept for a request larger than most that found none and waits for it (with a broker, in the shared backlog): smaller requests are refused meanwhile unless they leave it free (0: none)."),
		inFlight:      desc("batches_in_flight", "Batches handed to workers and not yet answered."),
		ready:         desc("ready", "1 when GET /readyz would answer 200: some worker can take work (on a front end behind Redis, some node can), and the server is not draining."),
		restarts:      desc("worker_restarts_total", "Worker restarts, by slot.", "slot"),
		crashes:       desc("worker_crashes_total", "Workers that died or were killed, as they ran or as they started, by slot.", "slot"),
		slotBatches:   desc("worker_batches_total", "Batches answered, by slot.", "slot"),
		workerState:   desc("worker_state", "How many slots of the number are in each state: 1 for the state a slot is in, 0 for the others; while a reload or scaling drains a slot, its draining series is 1 beside the state of the one that took its place.", "slot", "device", "state"),
		initS:         desc("worker_init_seconds", "How long the slot's current worker took to start and open its model.", "slot"),
		dispatches:    desc("dispatches_total", "Batches formed, by why each was sent.", "reason"),
		waitAdded:     desc("dispatch_wait_added_seconds_total", "Time idle workers waited for arrivals before dispatching."),
		costFitted:    desc("batch_cost_fitted", "1 when the batch cost below is fitted on enough batches."),
		costFixed:     desc("batch_cost_fixed_seconds", "Measured cost of a batch regardless of its size."),
		costPerItem:   desc("batch_cost_per_item_seconds", "Measured cost of each item of a batch."),
		returnShare:   desc("return_ratio", "Share of answered callers that send a new item soon after (0 to 1)."),
		returnFirst:   desc("return_first_seconds", "How soon after its answer the first caller of a batch comes back."),
		returnGap:     desc("return_gap_seconds", "How far apart the other callers of a batch come back."),
		reloads:       desc("reloads_total", "Reloads of the workers, by outcome: ok (every worker replaced) or failed (stopped at a worker that failed to start; the old ones kept serving).", "outcome"),
	}
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.requests != nil {
		ch <- c.requestsTotal
	}
	for _, d := range []*prometheus.Desc{
		c.itemsTotal, c.batchesTotal, c.batchSize,
		c.queueWait, c.compute, c.endToEnd, c.queued, c.roomKept, c.inFlight, c.ready,
		c.restarts, c.crashes, c.slotBatches, c.workerState, c.initS,
		c.dispatches, c.waitAdded, c.costFitted, c.costFixed, c.costPerItem,
		c.returnShare, c.returnFirst, c.returnGap, c.reloads,
	} {
		ch <- d
	}
}

// Collect reads the backend once and sends every metric.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.backend.Stats()
	c.collectCounts(ch, st)
	c.collectHistograms(ch, st)
	c.collectSlots(ch, c.backend.Slots())
	c.collectDispatch(ch, st)
}

func (c *collector) collectCounts(ch chan<- prometheus.Metric, st supervisor.Stats) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if c.requests != nil {
		for i, outcome := range requestOutcomes {
			counter(c.requestsTotal, float64(c.requests.byOutcome[i].Load()), outcome)
		}
	}
	// Failed counts every item answered with an error, expired, poisoned
	// and canceled ones too; they are told apart here. The parts come
	// from one reading of counters that each count an item in one way
	// only, so none of them reads backwards.
	failed := st.Failed - st.Expired - st.Poisoned - st.Canceled
	counter(c.itemsTotal, float64(st.Answered-st.Failed), outcomeOK)
	counter(c.itemsTotal, float64(st.Rejected), outcomeRejected)
	counter(c.itemsTotal, float64(st.Expired), outcomeTimedOut)
	counter(c.itemsTotal, float64(failed), outcomeFailed)
	counter(c.itemsTotal, float64(st.Poisoned), outcomePoisoned)
	counter(c.itemsTotal, float64(st.Canceled), outcomeCanceled)
	counter(c.batchesTotal, float64(st.Batches))
	counter(c.reloads, float64(st.Reloads), outcomeOK)
	counter(c.reloads, float64(st.ReloadFailures), outcomeFailed)
	ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(st.Queued))
	ch <- prometheus.MustNewConstMetric(c.roomKept, prometheus.GaugeValue, float64(st.RoomKept))
	ready := 0.0
	if c.backend.Ready() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready)
}

func (c *collector) collectHistograms(ch chan<- prometheus.Metric, st supervisor.Stats) {
	ch <- batchSizeHistogram(c.batchSize, st.BatchSizes)
	for d, h := range map[*prometheus.Desc]supervisor.Histogram{
		c.queueWait: st.Latency.QueueWait, c.compute: st.Latency.Compute, c.endToEnd: st.Latency.EndToEnd,
	} {
		ch <- latencyHistogram(d, h)
	}
}

// batchSizeHistogram makes a histogram of sizes[n], the batches of n items,
// with buckets at the powers of two up to the largest size.
func batchSizeHistogram(d *prometheus.Desc, sizes []uint64) prometheus.Metric {
	buckets := make(map[float64]uint64)
	var count uint64
	var sum float64
	bound := 1
	for n, batches := range sizes {
		for n > bound {
			buckets[float64(bound)] = count
			bound *= 2
		}
		count += batches
		sum += float64(n) * float64(batches)
	}
	buckets[float64(bound)] = count
	return prometheus.MustNewConstHistogram(d, count, sum, buckets)
}

func latencyHistogram(d *prometheus.Desc, h supervisor.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.BoundsSeconds))
	var count uint64
	for i, c := range h.Counts {
		count += c
		if i < len(h.BoundsSeconds) {
			buckets[h.BoundsSeconds[i]] = count
		}
	}
	return prometheus.MustNewConstHistogram(d, count, h.SumSeconds, buckets)
}

var slotStates = [...]supervisor.SlotState{
	supervisor.SlotStarting, supervisor.SlotReady, supervisor.SlotBackoff, supervisor.SlotDraining,
	supervisor.SlotFailed, supervisor.SlotStopped,
}

// collectSlots sends the per-slot families, one series per slot number.
// While a reload or a scaling drains a slot, two slots have its number:
// the draining one and the one that took its place. Their counts are the
// same (see supervisor.SlotStatus), sent once, and worker_state counts
// the slots of the number in each state.
func (c *collector) collectSlots(ch chan<- prometheus.Metric, slots []supervisor.SlotStatus) {
	inFlight := 0
	first := make(map[int]int, len(slots)) // slot number → index in slots of its first
	states := make(map[int]*[len(slotStates)]float64, len(slots))
	for i, sl := range slots {
		inFlight += sl.InFlight
		counts, ok := states[sl.Slot]
		if !ok {
			first[sl.Slot] = i
			counts = new([len(slotStates)]float64)
			states[sl.Slot] = counts
		}
		for j, state := range slotStates {
			if sl.State == state {
				counts[j]++
			}
		}
	}
	for i, sl := range slots {
		if first[sl.Slot] != i {
			continue
		}
		slot := strconv.Itoa(sl.Slot)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(sl.Restarts), slot)
		ch <- prometheus.MustNewConstMetric(c.crashes, prometheus.CounterValue, float64(sl.Crashes), slot)
		ch <- prometheus.MustNewConstMetric(c.slotBatches, prometheus.CounterValue, float64(sl.Batches), slot)
		ch <- prometheus.MustNewConstMetric(c.initS, prometheus.GaugeValue, sl.InitSeconds, slot)
		device := slotDevice(sl)
		for j, state := range slotStates {
			ch <- prometheus.MustNewConstMetric(c.workerState, prometheus.GaugeValue, states[sl.Slot][j], slot, device, string(state))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight))
}

// slotDevice names a slot's card for the device label: its
// CUDA_VISIBLE_DEVICES when it has one, which a slot number keeps across
// restarts and reloads, else "unset", so that a series keeps its labels
// whatever its worker says.
func slotDevice(sl supervisor.SlotStatus) string {
	if sl.CUDA != "" {
		return "cuda:" + sl.CUDA
	}
	return "unset"
}

func (c *collector) collectDispatch(ch chan<- prometheus.Metric, st supervisor.Stats) {
	d := st.Dispatch
	for reason, n := range map[string]uint64{
		"full": d.Full, "idle": d.Idle, "waited": d.Waited, "max_latency": d.MaxLatency, "deadline": d.Deadline, "retry": d.Retry,
		"recalled": d.Recalled,
	} {
		ch <- prometheus.MustNewConstMetric(c.dispatches, prometheus.CounterValue, float64(n), reason)
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	ch <- prometheus.MustNewConstMetric(c.waitAdded, prometheus.CounterValue, d.WaitAddedMs/1e3)
	fitted := 0.0
	if st.Cost.Fitted {
		fitted = 1
	}
	gauge(c.costFitted, fitted)
	gauge(c.costFixed, st.Cost.FixedMs/1e3)
	gauge(c.costPerItem, st.Cost.PerItemMs/1e3)
	gauge(c.returnShare, st.Returns.Share)
	gauge(c.returnFirst, st.Returns.FirstMs/1e3)
	gauge(c.returnGap, st.Returns.GapMs/1e3)
}
