// Package ipc is the wire between the supervisor and its worker processes:
// the message types, their msgpack encoding, and the length-delimited frames
// that carry them over a pipe, with a hard size limit.
//
// A frame is a 4-byte big-endian payload length followed by that many bytes
// of msgpack. The payload is a msgpack array whose first element is the
// message Kind. Items travel as opaque msgpack bin values: the supervisor never
// looks inside them.
package ipc

import (
	"errors"
	"fmt"
)

// Version is the protocol version. A worker reports it in its Hello and
// Ready messages and the supervisor refuses a worker that speaks another one.
const Version = 5

// The worker contract: how a supervisor starts a worker process and how the
// worker knows it was started by one. The supervisor sets WorkerEnv to
// WorkerCookie in the child's environment and hands it two pipes as file
// descriptors WorkerInFD (frames to the worker) and WorkerOutFD (frames from
// it), keeping the child's stdout and stderr free for the model to print on.
//
// The worker's first frame is a Hello whose Ready carries Magic and its
// Version: a program that is not a worker sends none, and the supervisor
// refuses it by name. The supervisor then sends an Init frame with the
// model spec; the worker opens the model and answers Ready, or Fatal.
//
// The supervisor sets MaxFrameEnv to the largest frame it reads, in bytes:
// the worker writes none larger, splitting an answer into parts that fit
// (see ResultParts), where a frame over the supervisor's limit would be
// taken for a broken worker.
const (
	WorkerEnv    = "STREAMER_WORKER"
	WorkerCookie = "a3f6c0de-streamer-worker"
	WorkerInFD   = 3
	WorkerOutFD  = 4
	MaxFrameEnv  = "STREAMER_MAX_FRAME"
	// Magic is what a worker's Hello carries in Ready.Magic.
	Magic = "streamer-worker"
)

// DefaultMaxFrame is the frame size limit used when none is given.
const DefaultMaxFrame = 256 << 20

// frameHeader is the size of the length prefix in front of every frame.
const frameHeader = 4

// FatalStale begins the Error of a KindFatal message from a worker that
// refused its Init's spec because the model the spec names changed since the
// spec was made (model.ErrStale): the text after it says why. Another start
// of the same spec fails alike until the model is reloaded or put back, so
// the supervisor retries without counting it as the worker's crash.
const FatalStale = "stale model: "

// FatalNoResources begins the Error of a KindFatal message from a worker
// whose model did not open for want of the machine's resources: processes
// or threads (EAGAIN), memory (ENOMEM), open files (EMFILE, ENFILE), disk
// space or inodes (ENOSPC), as a plugin that could not be started. The text
// after it says why. The supervisor backs off and retries without counting
// it as the worker's crash: the model is not at fault.
const FatalNoResources = "no resources: "

// Kind tells what a message is for.
type Kind uint8

// The message kinds. The comment on each says who sends it.
const (
	// KindReady (worker → supervisor): the model is initialised; Ready is set.
	KindReady Kind = 1
	// KindBatch (supervisor → worker): run Items as one batch, answer with
	// BatchID. TTLs, when not nil, holds each item's time left when it was
	// sent; the worker does not run an item whose time is up when the batch
	// reaches the model.
	KindBatch Kind = 2
	// KindResult (worker → supervisor): the answer to batch BatchID. Items holds
	// one output per input; ItemErrors, when not nil, holds one error text per
	// input ("" where that item succeeded); Expired lists the inputs the
	// worker did not run because their time was up; Error, when set, fails
	// the whole batch.
	KindResult Kind = 3
	// KindHeartbeat (worker → supervisor): the worker's loop is alive.
	KindHeartbeat Kind = 4
	// KindStop (supervisor → worker): finish the batches already sent, then exit 0.
	KindStop Kind = 5
	// KindFatal (worker → supervisor): the worker cannot go on (its model failed
	// to initialise, say); Error says why. The worker exits after sending it.
	KindFatal Kind = 6
	// KindHello (worker → supervisor): the worker's first message, before
	// it knows its model; Ready holds Magic, Version and PID.
	KindHello Kind = 7
	// KindInit (supervisor → worker): the answer to Hello; Spec is the model
	// to open. The worker answers Ready once the model is open, or Fatal.
	KindInit Kind = 8
	// KindResultPart (worker → supervisor): a leading part of the answer to
	// batch BatchID, sent when the whole answer does not fit in one frame
	// (see ResultParts). Items holds the outputs of the next items of the
	// batch, in order; ItemErrors, when not nil, one error text for each
	// of them; and Expired those of them the worker did not run, counted
	// from the part's first item. The KindResult that follows, with the
	// same BatchID, carries the items after the parts, in the same way, and
	// ends the answer.
	KindResultPart Kind = 9
	// KindRecall (supervisor → worker): give back batch BatchID if the
	// model has not taken it yet. The supervisor sends it for a batch it
	// sent ahead to a worker whose running batch runs far past its
	// expected time, while another worker could run it sooner. The
	// worker answers KindRecalled if it gave the batch back, and nothing
	// if the model took it already: its KindResult follows as usual.
	KindRecall Kind = 10
	// KindRecalled (worker → supervisor): batch BatchID, asked back by a
	// KindRecall, was given back unrun; no KindResult will answer it.
	KindRecalled Kind = 11
)

func (k Kind) String() string {
	switch k {
	case KindReady:
		return "ready"
	case KindBatch:
		return "batch"
	case KindResult:
		return "result"
	case KindHeartbeat:
		return "heartbeat"
	case KindStop:
		return "stop"
	case KindFatal:
		return "fatal"
	case KindHello:
		return "hello"
	case KindInit:
		return "init"
	case KindResultPart:
		return "result part"
	case KindRecall:
		return "recall"
	case KindRecalled:
		return "recalled"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Message is one frame's content. Which fields are set depends on Kind.
type Message struct {
	Kind       Kind
	BatchID    uint64
	Items      [][]byte
	ItemErrors []string
	Error      string
	Ready      *Ready
	// TTLs (KindBatch) has one entry per item: the nanoseconds it had left
	// before its deadline when the batch was sent, or 0 for no deadline.
	// Time left rather than a time of day: the two processes need not
	// agree on a clock, and a step of the wall clock changes nothing. The
	// worker counts from when it reads the frame, which errs towards
	// running an item, never towards dropping one early.
	TTLs []int64
	// Expired (KindResult) lists, in increasing order, the indices of the
	// items the worker did not run because their time was up.
	Expired []int
	// Spec (KindInit) is the model the worker opens, as the supervisor's
	// caller encoded it (a model.Spec in JSON); ipc does not read it.
	Spec []byte
}

// Ready describes a worker that has initialised its model.
type Ready struct {
	// Version is the protocol version the worker speaks.
	Version int `msgpack:"version"`
	// PID is the worker's process id.
	PID int `msgpack:"pid"`
	// Device is what the worker runs on, e.g. "cpu" or "cuda:0 (CUDA_VISIBLE_DEVICES=2)".
	Device string `msgpack:"device"`
	// Model names the model the worker serves.
	Model string `msgpack:"model"`
	// Magic (Hello only) is ipc.Magic: the proof that the sender is a
	// streamer worker, not some other program started by mistake.
	Magic string `msgpack:"magic"`
}

// Errors a Reader returns; callers branch on them with errors.Is.
var (
	// ErrFrameTooLarge: a frame announced a payload over the reader's limit.
	ErrFrameTooLarge = errors.New("ipc: frame too large")
	// ErrCorruptFrame: a frame's payload is not a valid message.
	ErrCorruptFrame = errors.New("ipc: corrupt frame")
)
