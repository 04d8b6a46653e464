// Package supervisor is streamer's engine: the bounded request queue, the
// batcher that forms batches from it, and the worker slots that run them.
//
// Callers Submit items and get a Future. Items are opaque bytes: the
// supervisor never decodes them. Each item is scheduled on its own (items of
// one request may land in different batches) and results come back in order.
//
// A slot runs either a worker process, talking msgpack frames over pipes
// (ProcessConfig: `streamer worker`, or the embedder's own program whose main
// calls workerproc.Main; the model travels to it in the protocol, and a
// binary that does not answer the handshake fails Start with ErrNotWorker),
// or, for the in-process
// mode, a goroutine calling the model.Model given as Config.InProcess
// (model.Func makes one of a plain Go function), whose errors reach the
// callers as they are, for errors.Is. Slots whose worker dies (or whose
// in-process model panics) are restarted with back-off; the batch that was
// running is retried elsewhere, and a batch that keeps killing workers is
// split until the one item doing it is found.
package supervisor

import (
	"errors"
	"fmt"
	"time"
)

// Errors that callers branch on with errors.Is. Every item that Submit
// accepted is answered exactly once: with its output or with an error wrapping
// one of these.
var (
	// ErrOverloaded: the queue is full; try again later (HTTP 429).
	ErrOverloaded = errors.New("overloaded: the queue is full")
	// ErrUnavailable: no worker is able to run (HTTP 503).
	ErrUnavailable = errors.New("unavailable: no worker is able to run")
	// ErrShuttingDown: the streamer is draining or stopped (HTTP 503).
	ErrShuttingDown = errors.New("shutting down")
	// ErrDeadline: the item's deadline passed before it was answered (HTTP 504).
	ErrDeadline = errors.New("deadline passed")
	// ErrCanceled: the caller's context was canceled (not timed out): the
	// items not yet sent to a worker are dropped with it, and a caller
	// waiting in Result or Predict stops waiting with it.
	ErrCanceled = errors.New("request canceled")
	// ErrPoison: the item kills the workers that run it; it is refused on
	// sight for Config.PoisonTTL, or until a Reload (HTTP 422).
	ErrPoison = errors.New("item crashes the model")
	// ErrModel: the model rejected the item (HTTP 422).
	ErrModel = errors.New("model error")
	// ErrModelFailed: the model failed the whole batch, or answered it with
	// the wrong number of outputs: a fault of the model, not of the item
	// (HTTP 500).
	ErrModelFailed = errors.New("model failed")
	// ErrBadRequest: the request itself is malformed, e.g. it has no items.
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge: the request can never be admitted as it is: it has more
	// items than MaxItems or MaxQueue, or an item or batch too large for
	// the pipe's frame limit. Retrying it unchanged cannot help (HTTP 413).
	ErrTooLarge = errors.New("request too large")
	// ErrNotWorker: the binary ProcessConfig.Path names did not answer the
	// worker handshake: it exited or stayed silent instead of proving it is
	// a streamer worker (its main calls workerproc.Main).
	ErrNotWorker = errors.New("not a streamer worker")
	// ErrModelChanged: a worker refused to start because the model its
	// spec names changed since the spec was made (a model file replaced on
	// disk without a Reload). Its slot keeps retrying, with back-off, and
	// the refusals do not count towards MaxRestarts: a Reload, or putting
	// the old model back, lets it start again.
	ErrModelChanged = errors.New("the model changed since it was loaded")
	// ErrStarted: Start was called on a Streamer already started.
	ErrStarted = errors.New("supervisor: already started")
)

// ItemError is the error of one item of a request.
type ItemError struct {
	// Index is the item's position in its request.
	Index int
	// Err says why; it wraps one of the package's sentinel errors.
	Err error
	// Every says that every item of the request failed with this same
	// error (their batch failed as a whole, say): Index is then 0.
	Every bool
}

func (e *ItemError) Error() string {
	if e.Every {
		return fmt.Sprintf("every item: %v", e.Err)
	}
	return fmt.Sprintf("item %d: %v", e.Index, e.Err)
}

// Unwrap returns the item's error.
func (e *ItemError) Unwrap() error { return e.Err }

// Request is what Submit takes.
type Request struct {
	// Items are the samples, each encoded as the model expects (msgpack).
	// The streamer keeps them, and reads them, after the call that
	// submitted them returns: one that returns early, for its caller's
	// context or deadline, leaves items that were queued, or on their way
	// to a worker (or to Redis, for a broker's front end), to be dropped
	// or sent later, with no sign to the caller of when. Their bytes must
	// not be changed once submitted: a caller that reuses its buffers
	// submits copies.
	Items [][]byte
	// Keys, when not nil, holds one batch key per item: items with different
	// keys never share a batch (e.g. tensors of different shapes).
	Keys []string
	// Deadline, when set, bounds the wait for the answer; the context's
	// deadline is used when it is earlier. An item whose deadline has passed
	// is never sent to a worker.
	Deadline time.Time
}

// Stats is a snapshot of the streamer's counters since it started.
type Stats struct {
	// Submitted counts items accepted by Submit, and those it turned away
	// as their deadline had passed or their caller had left (counted
	// Expired or Canceled), so that it equals Answered once every item
	// is answered.
	Submitted uint64 `json:"submitted"`
	// Answered counts items answered, with an output or an error.
	Answered uint64 `json:"answered"`
	// Failed counts items answered with an error: Expired, Poisoned and
	// Canceled are parts of it, and the rest failed in the model, or as
	// no worker could run them.
	Failed uint64 `json:"failed"`
	// Rejected counts items refused at Submit (overloaded, unavailable,
	// poison).
	Rejected uint64 `json:"rejected"`
	// Expired counts items answered with ErrDeadline: their deadline passed
	// before they ran (before they were queued, in the queue, or on the way
	// to their worker), or before their answer came.
	Expired uint64 `json:"expired"`
	// Canceled counts items dropped as their caller left before they ran,
	// queued or not yet.
	Canceled uint64 `json:"canceled"`
	// Batches counts batches run to completion: those with some item that
	// reached the model (not every item had expired on the way).
	Batches uint64 `json:"batches"`
	// BatchSizes[n] counts completed batches of n items.
	BatchSizes []uint64 `json:"batch_sizes"`
	// Queued is the number of items waiting now.
	Queued int `json:"queued"`
	// RoomKept is the room in the queue kept now for a request larger
	// than most that found none and waits for it (see Config.MaxQueue),
	// in items: 0 when none. Behind a broker, the room kept in the shared
	// backlog, as the front end's last check found it.
	RoomKept int `json:"room_kept"`
	// Crashes counts workers that died or were killed, as they ran or as
	// they started (a start that failed), but for those a drain stopped
	// for a hunt nobody waited for.
	Crashes uint64 `json:"crashes"`
	// Poisoned counts items found to crash the model.
	Poisoned uint64 `json:"poisoned"`
	// Dispatch counts the batches formed, by why each was sent.
	Dispatch DispatchStats `json:"dispatch"`
	// Cost is the batch cost measured on the recent batches.
	Cost CostStats `json:"cost"`
	// Returns is how the callers answered come back, as measured.
	Returns ReturnStats `json:"returns"`
	// Latency is where the items' time went, as histograms.
	Latency LatencyStats `json:"latency"`
	// Reloads and ReloadFailures count the reloads (Reload) that replaced
	// every worker, and those that stopped at a worker that failed to
	// start; LastReloadError says why the last failure failed.
	Reloads         uint64 `json:"reloads"`
	ReloadFailures  uint64 `json:"reload_failures"`
	LastReloadError string `json:"last_reload_error,omitempty"`
}

// setOutcomes fills Answered and Failed and their parts from the counts
// of the items answered in each way, each item in one of them.
func (st *Stats) setOutcomes(ok, failed, expired, poisoned, canceled uint64) {
	st.Expired, st.Poisoned, st.Canceled = expired, poisoned, canceled
	st.Failed = failed + expired + poisoned + canceled
	st.Answered = ok + st.Failed
}

// DispatchStats counts batches by why they were dispatched.
type DispatchStats struct {
	// Full batches had BatchSize items.
	Full uint64 `json:"full"`
	// Idle: an idle worker took what was queued, at once.
	Idle uint64 `json:"idle"`
	// Waited: an idle worker waited for arrivals first (BatchingAdaptive).
	Waited uint64 `json:"waited"`
	// MaxLatency: the oldest item had waited MaxLatency, or would have.
	MaxLatency uint64 `json:"max_latency"`
	// Deadline: a wait was cut short so that an item meets its deadline.
	Deadline uint64 `json:"deadline"`
	// Retry batches were formed before: retried after a crash, or split.
	Retry uint64 `json:"retry"`
	// Recalled batches had been sent ahead to a worker whose running batch
	// then ran far past its expected time, were given back unrun, and sent
	// again, to a worker on time.
	Recalled uint64 `json:"recalled"`
	// WaitAddedMs is the time idle workers spent waiting for arrivals, in
	// milliseconds, summed over the waits.
	WaitAddedMs float64 `json:"wait_added_ms"`
}

// CostStats is the batch cost fitted on the recent batches (about the last
// 200): a batch of n items runs for about FixedMs + n × PerItemMs.
type CostStats struct {
	// Fitted is false while the batches seen are too few, or too alike in
	// size, to tell the fixed cost from the per-item cost.
	Fitted    bool    `json:"fitted"`
	FixedMs   float64 `json:"fixed_ms"`
	PerItemMs float64 `json:"per_item_ms"`
	// Batches counts the batches measured.
	Batches uint64 `json:"batches"`
}

// ReturnStats is how callers come back once answered, as the adaptive
// policy measures it (running means over the recent batches): in a closed
// loop nearly all of them, the first FirstMs after the answer and the
// others GapMs apart. A batch of n callers is back after about FirstMs +
// (n − 1) × GapMs.
type ReturnStats struct {
	// Share of the answered callers that sent a new item within their
	// batch's return window (0 to 1).
	Share   float64 `json:"share"`
	FirstMs float64 `json:"first_ms"`
	GapMs   float64 `json:"gap_ms"`
}

// MeanBatchSize is the average size of the completed batches.
func (s Stats) MeanBatchSize() float64 {
	var items, batches uint64
	for n, c := range s.BatchSizes {
		items += uint64(n) * c
		batches += c
	}
	if batches == 0 {
		return 0
	}
	return float64(items) / float64(batches)
}

// SlotState is where a slot is in its worker's life.
type SlotState string

// The slot states.
const (
	SlotStarting SlotState = "starting" // a worker is starting or initialising
	SlotReady    SlotState = "ready"    // the worker takes batches
	SlotBackoff  SlotState = "backoff"  // the worker died, or failed to start; waiting before starting another
	SlotDraining SlotState = "draining" // retired by Reload or SetWorkers: answering what it holds, then stopping
	SlotFailed   SlotState = "failed"   // restarted too often; given up
	SlotStopped  SlotState = "stopped"  // shut down
)

// SlotStatus describes one slot.
type SlotStatus struct {
	Slot   int       `json:"slot"`
	State  SlotState `json:"state"`
	PID    int       `json:"pid,omitempty"`
	Device string    `json:"device,omitempty"`
	// Model is how the slot's worker describes the model it opened: an
	// ONNX model's file, device and runtime, and why its items run one
	// by one where the worker found so as it loaded it (see model/onnx's
	// README), which the file alone does not say.
	Model    string `json:"model,omitempty"`
	CUDA     string `json:"cuda_visible_devices,omitempty"`
	Restarts int    `json:"restarts"`
	InFlight int    `json:"in_flight"`
	LastErr  string `json:"last_error,omitempty"`
	// Restarts, Batches and Crashes count for the slot number, since the
	// Streamer started: a slot that a Reload or SetWorkers put in the
	// place of another counts on from the other's counts, so they never go
	// back; a draining slot shows the counts of its number too.
	//
	// Batches counts the batches the slot's workers answered, of those that
	// reached the model (Stats.Batches counts the same).
	Batches uint64 `json:"batches"`
	// Crashes counts the slot's workers that died or were killed, as
	// they ran or as they started (a start that failed).
	Crashes int `json:"crashes"`
	// InitSeconds is how long the slot's current worker took to start and
	// open its model; zero while none is ready.
	InitSeconds float64 `json:"init_seconds,omitempty"`
}
