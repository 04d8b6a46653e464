package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
)

// Config sets up a Streamer. The zero value of every field but the model
// (InProcess or Process) works: zero means the default each field names.
// New refuses a negative value.
type Config struct {
	// BatchSize is the most items in one batch: 1 to MaxBatchSize.
	// Default 64.
	BatchSize int
	// MaxLatency bounds how long an item waits for batch-mates: while every
	// worker is busy, or while an idle one waits for arrivals (Batching). A
	// lone request on an idle streamer never pays it. Default 100ms.
	MaxLatency time.Duration
	// MaxQueue is the most items waiting; beyond it Submit fails with
	// ErrOverloaded. A request that finds no room, and is at least twice
	// the mean size of those queued of late, has room kept for it and
	// waits for it while batches leave (Submit then blocks; see
	// RoomHold): smaller
	// requests are refused meanwhile unless they leave it free, so that a
	// large request is not refused for ever while small ones keep the
	// queue near its bound. Default 100 × BatchSize × Workers.
	MaxQueue int
	// MaxItems is the most items one request may carry; a larger request,
	// or one larger than MaxQueue, fails with ErrTooLarge, since no wait
	// would let it in. Default 4096.
	MaxItems int
	// MaxBatchBytes bounds the summed item bytes of one batch, so a batch
	// fits the pipe's frame limit; an item larger than it is refused with
	// ErrTooLarge. Default 64 MiB, or less if Process.MaxFrame is smaller;
	// New refuses a value whose batch would not fit in a frame.
	MaxBatchBytes int
	// Workers is the number of slots: 1 to MaxWorkers. Default 1.
	Workers int
	// Batching decides when an idle worker starts a batch that is not full:
	// BatchingAdaptive (the default) or BatchingGreedy.
	Batching Batching
	// PipelineDepth is the most batches one worker holds: the one it runs and
	// those formed ahead so it never idles between batches. Default 2.
	PipelineDepth int

	// InProcess, when set, runs batches in this process, one goroutine per
	// slot, calling its Predict; no child process is started (the in-process
	// mode). Predict may be called from several goroutines at once (one per
	// slot, and any call abandoned on a timeout), so it must be safe for
	// concurrent use. Its errors reach the callers wrapped, not flattened to text:
	// errors.Is finds the model's own sentinels as well as ErrModel or
	// ErrModelFailed. A panic in Predict is handled like a crashed worker.
	// Predict must not write to the items it is given: they are the
	// callers' own bytes, not copies, and a batch run again after a crash
	// is run with the same bytes.
	// The Streamer never closes it: the caller owns it, and closes it once
	// Shutdown has returned and, when Close cannot overlap Predict, once
	// WaitModel has: a call abandoned by the Streamer (its batch ran past
	// WorkerTimeout, or Shutdown's context ended) may still be running
	// after Shutdown, with its context canceled. model.Func makes a Model
	// of a plain function.
	InProcess model.Model
	// Process, when InProcess is nil, starts one worker process per slot.
	Process ProcessConfig

	// WorkerTimeout: a batch running longer kills its worker, which counts
	// as a crash. Default 20s.
	WorkerTimeout time.Duration
	// InitTimeout bounds a worker's start and model initialisation. Default 2m.
	InitTimeout time.Duration
	// BackoffMin and BackoffMax bound the wait before restarting a dead worker.
	// It doubles with each start that fails and each death with no batch in
	// flight, and resets when the worker answers a batch or lives StableAfter.
	// A worker killed by a batch restarts after BackoffMin: its batch is
	// being dealt with. Defaults 20ms, 5s and 30s.
	BackoffMin, BackoffMax, StableAfter time.Duration
	// A death after MaxRestarts restarts within RestartWindow marks a
	// slot failed; when every slot has failed, Fatal reports it. Deaths
	// while narrowing down a batch that already killed a worker count once
	// that is over, and not at all if a bad item in the batch was found.
	// Defaults 10 and 1m.
	MaxRestarts   int
	RestartWindow time.Duration
	// UnavailableAfter: when no worker has been able to run for this long,
	// new items are refused at once with ErrUnavailable, and queued ones fail
	// too unless some worker is starting. Default 1s.
	UnavailableAfter time.Duration
	// PoisonTTL is how long an item found to crash workers is remembered and
	// refused on sight. Default 10m.
	PoisonTTL time.Duration

	// Logger receives one line per event; nil discards them.
	Logger *slog.Logger
}

// ProcessConfig tells how to start worker processes: a binary whose main
// is a worker (it calls workerproc.Main, or is `streamer worker`), and the
// model every worker opens.
type ProcessConfig struct {
	// Model is the model every worker opens, sent to each in the protocol's
	// Init message. The supervisor does not read it; a worker that cannot
	// open it says why and the slot fails. Required.
	Model model.Spec
	// Refresh, when not nil, is called by Reload before it starts any
	// worker, with the spec the newest workers open; the spec it returns is
	// the one the reload's workers open, and the slots added after it. A
	// runner that pins its model file's content in the spec (an ONNX file's
	// SHA-256) reads the file again here: the reload takes the file as it
	// is now, while a worker restarted after a crash in a slot the reload
	// has not reached opens the spec its slot began with, and refuses a
	// file replaced since, rather than serve other weights than the other
	// workers without a word. An error ends the Reload before any worker
	// is replaced. Nil: every worker opens Model.
	Refresh func(ctx context.Context, spec model.Spec) (model.Spec, error)
	// Path is the worker binary; default: this program, which must then
	// call workerproc.Main when workerproc.Started says so (a test
	// binary, in TestMain): New refuses to start workers from a process
	// started as a worker that did not, which would start copies of
	// itself. A binary that does not answer the handshake fails Start
	// with ErrNotWorker. By default the workers run this program's own
	// image (on Linux, /proc/self/exe): one that an upgrade replaced on
	// disk since it started is not the one restarted workers run, nor
	// those of a Reload, which would be another build than the
	// supervisor's. A Path is started as it is on disk at each start.
	Path string
	// Args are its arguments; default: ["worker"], which is what the
	// streamer binary needs. A program that checks workerproc.Started
	// first ignores them.
	Args []string
	// Env is added to this process's environment for every worker.
	Env []string
	// CUDADevices, when not empty, sets CUDA_VISIBLE_DEVICES of slot i to
	// CUDADevices[i % len]; a restarted worker keeps its slot's device. When
	// empty the variable passes through unchanged.
	CUDADevices []string
	// HandshakeTimeout bounds the wait for a started binary's first message,
	// which proves it is a worker; the model's initialisation comes after,
	// bounded by Config.InitTimeout. Default 10s.
	HandshakeTimeout time.Duration
	// HeartbeatTimeout: a worker silent for this long is killed. Default
	// 10s; at least MinHeartbeatTimeout, as a worker beats every second
	// (workerproc.Config.HeartbeatInterval) even while it runs a batch.
	HeartbeatTimeout time.Duration
	// StopTimeout bounds a worker's clean exit after Stop; then it is killed.
	// Default 5s.
	StopTimeout time.Duration
	// MaxFrame bounds pipe frames both ways; default ipc.DefaultMaxFrame.
	MaxFrame int
}

// The bounds of Config's fields that have one beyond being positive.
const (
	// MaxBatchSize is the largest Config.BatchSize: each worker's batches
	// and the batch-size figures are sized by it, so a value with no
	// bound could take all memory at the first batch.
	MaxBatchSize = 1 << 16
	// MaxWorkers is the most slots, in Config.Workers and SetWorkers.
	MaxWorkers = 1024
	// MaxPipelineDepth is the largest Config.PipelineDepth: each worker's
	// queue of batches is sized by it, and no worker runs more than a few
	// ahead usefully.
	MaxPipelineDepth = 1024
	// MinHeartbeatTimeout is the shortest ProcessConfig.HeartbeatTimeout:
	// three of a worker's beats, one a second, so that one late beat does
	// not kill a worker that is well.
	MinHeartbeatTimeout = 3 * time.Second
)

func (c *Config) setDefaults() error {
	if err := c.checkNegatives(); err != nil {
		return err
	}
	if c.InProcess != nil && model.Nil(c.InProcess) {
		// Not a nil interface: its first batch would crash, as a
		// worker, and every batch after it.
		return fmt.Errorf("supervisor: InProcess is a nil %T: no item could run", c.InProcess)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.Workers == 0 {
		c.Workers = 1
	}
	if c.BatchSize > MaxBatchSize {
		return fmt.Errorf("supervisor: BatchSize %d: want at most %d", c.BatchSize, MaxBatchSize)
	}
	if c.Workers > MaxWorkers {
		return fmt.Errorf("supervisor: Workers %d: want at most %d", c.Workers, MaxWorkers)
	}
	switch c.Batching {
	case "":
		c.Batching = BatchingAdaptive
	case BatchingAdaptive, BatchingGreedy:
	default:
		return fmt.Errorf("supervisor: Batching %q: want %q or %q", c.Batching, BatchingAdaptive, BatchingGreedy)
	}
	if c.PipelineDepth <= 0 {
		c.PipelineDepth = 2
	}
	if c.PipelineDepth > MaxPipelineDepth {
		return fmt.Errorf("supervisor: PipelineDepth %d: want at most %d", c.PipelineDepth, MaxPipelineDepth)
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = 100 * c.BatchSize * c.Workers
	}
	if c.MaxItems == 0 {
		c.MaxItems = 4096
	}
	if err := c.fitBatchBytes(); err != nil {
		return err
	}
	if c.InProcess == nil {
		if err := checkSpec(c.Process.Model); err != nil {
			return err
		}
		if err := checkNotAWorker(); err != nil {
			return err
		}
	}
	def(&c.MaxLatency, 100*time.Millisecond)
	def(&c.WorkerTimeout, 20*time.Second)
	def(&c.InitTimeout, 2*time.Minute)
	def(&c.BackoffMin, 20*time.Millisecond)
	def(&c.BackoffMax, 5*time.Second)
	def(&c.StableAfter, 30*time.Second)
	def(&c.RestartWindow, time.Minute)
	def(&c.UnavailableAfter, time.Second)
	def(&c.PoisonTTL, 10*time.Minute)
	def(&c.Process.HandshakeTimeout, 10*time.Second)
	def(&c.Process.HeartbeatTimeout, 10*time.Second)
	if c.InProcess == nil && c.Process.HeartbeatTimeout < MinHeartbeatTimeout {
		return fmt.Errorf("supervisor: Process.HeartbeatTimeout %s: want at least %s (three of a worker's beats, one a second), or zero for the default", c.Process.HeartbeatTimeout, MinHeartbeatTimeout)
	}
	def(&c.Process.StopTimeout, 5*time.Second)
	if c.MaxRestarts <= 0 {
		c.MaxRestarts = 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BackoffMin > c.BackoffMax {
		return fmt.Errorf("supervisor: BackoffMin %s is above BackoffMax %s", c.BackoffMin, c.BackoffMax)
	}
	return nil
}

// checkNotAWorker refuses to start worker processes from a process that a
// supervisor started as its worker and that has not become one: a program
// whose main does not call workerproc.Main before making its Streamer (a
// test binary without it in TestMain, as a rule) would otherwise start
// copies of itself that each start more, until the first handshake's
// timeout. workerproc.Serve takes the cookie out of the environment, so a
// worker whose model makes a Streamer of its own is not refused.
func checkNotAWorker() error {
	if os.Getenv(ipc.WorkerEnv) != ipc.WorkerCookie {
		return nil
	}
	err := fmt.Errorf("supervisor: this process was started as a streamer worker (%s is set) and has not become one, so it may not start workers of its own: its main must call workerproc.Main when workerproc.Started() reports true, before anything else (in a test binary, in TestMain)", ipc.WorkerEnv)
	// Said on stderr too, which the supervisor that started this process
	// reads for its last words: a test binary reports a failed test on
	// stdout, and its supervisor would say only that it ended.
	fmt.Fprintln(os.Stderr, err)
	return err
}

// checkNegatives refuses the fields set below zero: zero means the
// default, and below it none has a meaning (before, a negative was taken
// for zero without a word).
func (c *Config) checkNegatives() error {
	var bad []string
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"BatchSize", int64(c.BatchSize)}, {"Workers", int64(c.Workers)}, {"MaxQueue", int64(c.MaxQueue)},
		{"MaxItems", int64(c.MaxItems)}, {"PipelineDepth", int64(c.PipelineDepth)}, {"MaxBatchBytes", int64(c.MaxBatchBytes)},
		{"MaxRestarts", int64(c.MaxRestarts)}, {"MaxLatency", int64(c.MaxLatency)}, {"WorkerTimeout", int64(c.WorkerTimeout)},
		{"InitTimeout", int64(c.InitTimeout)}, {"BackoffMin", int64(c.BackoffMin)}, {"BackoffMax", int64(c.BackoffMax)},
		{"StableAfter", int64(c.StableAfter)}, {"RestartWindow", int64(c.RestartWindow)},
		{"UnavailableAfter", int64(c.UnavailableAfter)}, {"PoisonTTL", int64(c.PoisonTTL)},
		{"Process.HandshakeTimeout", int64(c.Process.HandshakeTimeout)}, {"Process.HeartbeatTimeout", int64(c.Process.HeartbeatTimeout)},
		{"Process.StopTimeout", int64(c.Process.StopTimeout)},
	} {
		if f.v < 0 {
			bad = append(bad, f.name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("supervisor: %s must not be negative (zero means the default)", strings.Join(bad, ", "))
	}
	return nil
}

// checkSpec refuses a model spec that no worker could read. What it means
// is the worker's business.
func checkSpec(spec model.Spec) error {
	if spec.Runner == "" {
		return errors.New("supervisor: Process.Model names no runner: say which model the workers open (or run a model in-process)")
	}
	if len(spec.Settings) > 0 && !json.Valid(spec.Settings) {
		return fmt.Errorf("supervisor: Process.Model's settings for %s are not JSON", spec.Runner)
	}
	return nil
}

// frameOverhead bounds what a batch frame carries besides its items' bytes:
// the message's own fields and, per item, its header and deadline.
func frameOverhead(batchSize int) int { return 64 + 18*batchSize }

// BatchBytesFit is the most item bytes a batch of batchSize items can carry
// to a worker process whose pipe frames are at most maxFrame bytes
// (ipc.DefaultMaxFrame when maxFrame <= 0): the bound of MaxBatchBytes.
// Below 1 when no batch of that size fits.
func BatchBytesFit(batchSize, maxFrame int) int {
	if maxFrame <= 0 {
		maxFrame = ipc.DefaultMaxFrame
	}
	return maxFrame - frameOverhead(batchSize)
}

// fitBatchBytes defaults MaxBatchBytes and checks that a batch of that many
// bytes fits the pipe's frame limit (worker processes only).
func (c *Config) fitBatchBytes() error {
	fits := int(^uint(0) >> 1)
	if c.InProcess == nil {
		frame := c.Process.MaxFrame
		if frame <= 0 {
			frame = ipc.DefaultMaxFrame
		}
		fits = BatchBytesFit(c.BatchSize, frame)
		if fits < 1 {
			return fmt.Errorf("supervisor: Process.MaxFrame %d cannot carry a batch of %d items", frame, c.BatchSize)
		}
	}
	switch {
	case c.MaxBatchBytes <= 0:
		c.MaxBatchBytes = min(64<<20, fits)
	case c.MaxBatchBytes > fits:
		return fmt.Errorf("supervisor: MaxBatchBytes %d does not fit the pipe's frame limit: a batch of %d items may carry at most %d bytes", c.MaxBatchBytes, c.BatchSize, fits)
	}
	return nil
}
