// Package workerproc is what runs inside a worker process: prove to the
// supervisor that it is a worker, learn its model from it, open the model,
// say ready, then read batches, run them and write the results back, with
// heartbeats in between, until told to stop.
//
// A worker binary's main calls Main (see its example); Run is the same loop
// on any reader and writer, for tests and for callers that own their pipes.
package workerproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/streamer-dev/streamer/internal/idlemem"
	"github.com/streamer-dev/streamer/internal/waitq"
	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
)

// OpenFunc opens the model a Spec names. A worker calls it once, after its
// handshake with the supervisor; model/load.Open opens every runner streamer
// has, and an embedder may pass its own.
type OpenFunc func(ctx context.Context, spec model.Spec) (model.Model, error)

// Config tells Run how to serve and where the supervisor is. The model comes
// from the supervisor, in its Init message.
type Config struct {
	// Open initialises the model; it is called once, after the handshake.
	Open OpenFunc
	// In carries frames from the supervisor; Out carries frames to it.
	In  io.Reader
	Out io.Writer
	// Device describes what the worker runs on, for the ready message.
	Device string
	// HeartbeatInterval is how often the worker says it is alive; zero means 1s.
	HeartbeatInterval time.Duration
	// MaxFrame bounds frames both ways; zero means ipc.DefaultMaxFrame.
	MaxFrame int
	// Logger receives the worker's own log lines; nil discards them.
	Logger *slog.Logger
}

// Errors Run returns; callers branch on them with errors.Is.
var (
	// ErrStopped: the supervisor closed the pipe without asking the worker
	// to stop. It is gone, so the worker exits.
	ErrStopped = errors.New("workerproc: supervisor went away")
	// ErrNoSpec: the supervisor's Init carried no model spec, or one that is
	// not a model.Spec. A worker never falls back to a default model.
	ErrNoSpec = errors.New("workerproc: no usable model spec")
)

// Run is the worker's side of the protocol: it says hello, reads the model
// spec from the supervisor's Init, opens the model and says ready, then
// serves batches until the supervisor sends Stop (nil) or goes away
// (ErrStopped), or ctx is done (ctx.Err()). When the spec is missing or
// the model cannot be opened, a Fatal message tells the supervisor why and
// Run returns that error.
func Run(ctx context.Context, cfg Config) error {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out := ipc.NewWriter(cfg.Out, cfg.MaxFrame)
	in := ipc.NewReader(cfg.In, cfg.MaxFrame)
	hello := &ipc.Ready{Version: ipc.Version, PID: os.Getpid(), Magic: ipc.Magic}
	if err := out.Write(&ipc.Message{Kind: ipc.KindHello, Ready: hello}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	spec, err := awaitInit(ctx, in)
	if err != nil {
		_ = out.Write(&ipc.Message{Kind: ipc.KindFatal, Error: err.Error()})
		return err
	}
	m, err := cfg.Open(model.WithLastWords(ctx, lastWords(out)), spec)
	if err == nil && model.Nil(m) {
		// Its first batch would crash the worker, and every batch after.
		err = errors.New("the opener returned neither a model nor an error")
		if m != nil {
			err = fmt.Errorf("the opener returned a nil %T and no error", m)
		}
	}
	if err != nil {
		_ = out.Write(&ipc.Message{Kind: ipc.KindFatal, Error: fatalText(spec, err)})
		return openError(spec, err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			log.Warn("close model", "err", err)
		}
	}()
	name := spec.String()
	if d, ok := m.(model.Describer); ok {
		name = d.Describe()
	}
	ready := &ipc.Ready{Version: ipc.Version, PID: os.Getpid(), Device: cfg.Device, Model: name}
	if err := out.Write(&ipc.Message{Kind: ipc.KindReady, Ready: ready}); err != nil {
		return fmt.Errorf("send ready: %w", err)
	}
	return serve(ctx, cfg, m, in, out)
}

// fatalText is the Error of the Fatal message that says why the model spec
// names did not open. When the model changed since spec was made, it is
// marked with ipc.FatalStale, so that the supervisor can tell it from a
// crash, and it leaves out the spec: the opener's error names the model.
func fatalText(spec model.Spec, err error) string {
	if errors.Is(err, model.ErrStale) {
		return ipc.FatalStale + err.Error()
	}
	for _, e := range []error{syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC} {
		if errors.Is(err, e) {
			// The machine's want, not the model's fault: a plugin that
			// could not be forked under a limit of processes, say.
			return ipc.FatalNoResources + openError(spec, err).Error()
		}
	}
	return openError(spec, err).Error()
}

// openError is err, the opener's, said of the model spec names: the
// runner, the error, then the settings, which run to hundreds of bytes
// (a plugin's path, sum, stamp and sockets' folder): the text, cut short
// for /readyz and 503s, must still say why.
func openError(spec model.Spec, err error) error {
	if settings, ok := strings.CutPrefix(spec.String(), spec.Runner+" "); ok {
		return fmt.Errorf("open model %s: %w (its settings: %s)", spec.Runner, err, settings)
	}
	return fmt.Errorf("open model %s: %w", spec.Runner, err)
}

// lastWordsWait bounds how long a model's last words wait for the pipe: a
// supervisor that reads nothing must not keep a dying worker alive.
const lastWordsWait = time.Second

// lastWords is how a model that ends the worker process on its own says
// why (see model.WithLastWords): a Fatal message, which the supervisor
// takes as the cause of the worker's death.
func lastWords(out *ipc.Writer) func(reason string) {
	return func(reason string) {
		sent := make(chan struct{})
		go func() {
			_ = out.Write(&ipc.Message{Kind: ipc.KindFatal, Error: reason})
			close(sent)
		}()
		select {
		case <-sent:
		case <-time.After(lastWordsWait):
		}
	}
}

// awaitInit waits for the supervisor's Init, or for ctx: a read cannot be
// interrupted, so it runs apart and is abandoned when ctx ends first.
func awaitInit(ctx context.Context, in *ipc.Reader) (model.Spec, error) {
	type outcome struct {
		spec model.Spec
		err  error
	}
	got := make(chan outcome, 1)
	go func() {
		spec, err := readInit(in)
		got <- outcome{spec, err}
	}()
	select {
	case o := <-got:
		return o.spec, o.err
	case <-ctx.Done():
		return model.Spec{}, ctx.Err()
	}
}

// readInit reads the supervisor's Init and decodes its model spec, refusing
// a field model.Spec does not have.
func readInit(in *ipc.Reader) (model.Spec, error) {
	var spec model.Spec
	msg, err := in.Read()
	switch {
	case errors.Is(err, io.EOF):
		return spec, ErrStopped
	case err != nil:
		return spec, fmt.Errorf("read init from supervisor: %w", err)
	case msg.Kind != ipc.KindInit:
		return spec, fmt.Errorf("%w: the supervisor sent %s before init", ErrNoSpec, msg.Kind)
	case len(msg.Spec) == 0:
		return spec, fmt.Errorf("%w: the supervisor's init names no model", ErrNoSpec)
	}
	dec := json.NewDecoder(bytes.NewReader(msg.Spec))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, fmt.Errorf("%w: %v", ErrNoSpec, err)
	}
	if spec.Runner == "" {
		return spec, fmt.Errorf("%w: the spec names no runner", ErrNoSpec)
	}
	return spec, nil
}

// serve runs batches from in until Stop, the supervisor's going, or ctx.
// Once idle after batches that left the heap far larger than what it
// uses (large items or outputs), it gives the memory back to the system
// (see idlemem.Release), rather than hold it for minutes.
func serve(ctx context.Context, cfg Config, m model.Model, in *ipc.Reader, out *ipc.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go heartbeat(ctx, out, cfg.HeartbeatInterval)
	var (
		answered atomic.Uint64
		running  atomic.Bool
	)
	go idlemem.Release(ctx, func() (uint64, bool) { return answered.Load(), running.Load() }, cfg.Logger)

	// The batches read ahead of the model, until it takes them or the
	// supervisor asks one back.
	waiting := waitq.New[arrival]()
	go func() { waiting.End(readBatches(ctx, in, out, waiting)) }()
	for {
		next, ok, err := waiting.Take(ctx.Done())
		switch {
		case !ok && ctx.Err() != nil:
			return ctx.Err()
		case !ok:
			return err
		}
		running.Store(true)
		err = sendResult(out, runArrival(ctx, m, next, time.Now()), cfg.MaxFrame)
		running.Store(false)
		answered.Add(1)
		if err != nil {
			return fmt.Errorf("send result of batch %d: %w", next.msg.BatchID, err)
		}
	}
}

// arrival is a batch as read from the supervisor, with when it was read:
// its items' TTLs count from then.
type arrival struct {
	msg  ipc.Message
	read time.Time
}

// runArrival runs the items of a batch whose time is not up at now, and
// answers the others as expired without showing them to the model.
func runArrival(ctx context.Context, m model.Model, a arrival, now time.Time) *ipc.Message {
	msg := a.msg
	if len(msg.Items) == 0 {
		// Everything in it expired on the supervisor's side on the way.
		return &ipc.Message{Kind: ipc.KindResult, BatchID: msg.BatchID, Items: [][]byte{}}
	}
	var expired []int
	for i, ttl := range msg.TTLs {
		if ttl > 0 && !now.Before(a.read.Add(time.Duration(ttl))) {
			expired = append(expired, i)
		}
	}
	if expired == nil {
		return runBatch(ctx, m, msg)
	}
	dead := make([]bool, len(msg.Items))
	for _, i := range expired {
		dead[i] = true
	}
	live := ipc.Message{Kind: msg.Kind, BatchID: msg.BatchID, Items: make([][]byte, 0, len(msg.Items)-len(expired))}
	for i, it := range msg.Items {
		if !dead[i] {
			live.Items = append(live.Items, it)
		}
	}
	res := &ipc.Message{Kind: ipc.KindResult, BatchID: msg.BatchID, Items: [][]byte{}}
	if len(live.Items) > 0 {
		res = runBatch(ctx, m, live)
	}
	res.Expired = expired
	if res.Error != "" {
		return res
	}
	return spread(res, dead)
}

// spread puts the answers of a batch's live items back at their places
// among all its items, leaving the dead (expired) places empty.
func spread(res *ipc.Message, dead []bool) *ipc.Message {
	n := len(dead)
	outputs := make([][]byte, n)
	var itemErrs []string
	if res.ItemErrors != nil {
		itemErrs = make([]string, n)
	}
	live := 0
	for i := range n {
		if dead[i] {
			continue
		}
		if live < len(res.Items) {
			outputs[i] = res.Items[live]
		}
		if itemErrs != nil {
			itemErrs[i] = res.ItemErrors[live]
		}
		live++
	}
	res.Items, res.ItemErrors = outputs, itemErrs
	return res
}

// sendResult writes res. A result too large for a frame goes in several
// (see ipc.ResultParts), so that the outputs of a batch may together exceed
// the limit as long as each fits alone: the Writer sent nothing of the
// whole, so the stream is still in step. Only an output too large for any
// frame fails, its item's alone. The common, small result costs nothing
// more: it is split only once the Writer has refused it.
func sendResult(out *ipc.Writer, res *ipc.Message, maxFrame int) error {
	err := out.Write(res)
	if !errors.Is(err, ipc.ErrFrameTooLarge) {
		return err
	}
	for _, part := range ipc.ResultParts(res, maxFrame) {
		if err := out.Write(part); err != nil {
			return err
		}
	}
	return nil
}

// readBatches decodes frames ahead of the model so that the next batch is
// ready the moment the current one is done, and gives back a batch not yet
// taken that the supervisor asks for (ipc.KindRecall), saying so with
// ipc.KindRecalled. It returns nil on Stop.
func readBatches(ctx context.Context, in *ipc.Reader, out *ipc.Writer, waiting *waitq.Queue[arrival]) error {
	for {
		msg, err := in.Read()
		switch {
		case errors.Is(err, io.EOF):
			return ErrStopped
		case err != nil:
			return fmt.Errorf("read from supervisor: %w", err)
		}
		switch msg.Kind {
		case ipc.KindBatch:
			waiting.Put(arrival{msg: msg, read: time.Now()})
		case ipc.KindRecall:
			if !waiting.Remove(func(a arrival) bool { return a.msg.BatchID == msg.BatchID }) {
				continue // the model took it: its result answers it
			}
			if err := out.Write(&ipc.Message{Kind: ipc.KindRecalled, BatchID: msg.BatchID}); err != nil {
				return fmt.Errorf("send recalled of batch %d: %w", msg.BatchID, err)
			}
		case ipc.KindStop:
			return nil
		default:
			return fmt.Errorf("unexpected %s message from supervisor", msg.Kind)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// runBatch calls the model and turns what it said into a result message.
func runBatch(ctx context.Context, m model.Model, msg ipc.Message) *ipc.Message {
	res := &ipc.Message{Kind: ipc.KindResult, BatchID: msg.BatchID}
	outputs, itemErrs, err := model.Call(ctx, m, msg.Items)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if itemErrs != nil {
		res.ItemErrors = make([]string, len(itemErrs))
		for i, e := range itemErrs {
			if e != nil {
				res.ItemErrors[i] = e.Error()
			}
		}
	}
	res.Items = outputs
	return res
}

func heartbeat(ctx context.Context, out *ipc.Writer, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := out.Write(&ipc.Message{Kind: ipc.KindHeartbeat}); err != nil {
				return
			}
		}
	}
}
