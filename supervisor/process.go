package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/streamer-dev/streamer/internal/lastwords"
	"github.com/streamer-dev/streamer/internal/waitq"
	"github.com/streamer-dev/streamer/ipc"
)

// startWorker starts a worker for sl and waits until it is ready.
func (s *Streamer) startWorker(abandon <-chan struct{}, sl *slot) (worker, error) {
	sl.startBegan = time.Now()
	if s.cfg.InProcess != nil {
		return startLocal(sl, s.cfg.InProcess), nil
	}
	p, err := startProcess(abandon, sl)
	if err != nil {
		return nil, err // not a nil *process in a non-nil worker
	}
	return p, nil
}

// process is a worker running as a child process. Batches go to it on one
// pipe and results come back on another, as ipc frames; its stdout and
// stderr are read line by line into the log.
type process struct {
	sl      *slot
	cmd     *exec.Cmd
	out     *ipc.Writer
	in      *os.File // results from the child
	toChild *os.File
	ready   ipc.Ready

	orders *orders
	// hello is closed when the child has proved it is a worker.
	hello  chan struct{}
	waited chan struct{}
	exited chan struct{}
	// stderrRead is closed when the child's stderr has been read to its
	// end: the process may be reaped before its last line is read.
	stderrRead chan struct{}
	// written is closed when writeLoop has returned; nil until it starts.
	written chan struct{}

	mu         sync.Mutex
	killReason error
	exitErr    error

	// lastHeard is when the last message came, on the streamer's monotonic
	// clock: a step of the wall clock must not make a worker look silent.
	lastHeard  atomic.Int64
	lastStderr atomic.Pointer[string]
	// signalled: this server sent the child its SIGKILL (see kill).
	signalled bool // guarded by mu
	// firstDeathLine is the first line of its stderr that says why it
	// dies (a panic's message; see deathLine), if any.
	firstDeathLine atomic.Pointer[string]
}

func startProcess(abandon <-chan struct{}, sl *slot) (*process, error) {
	s := sl.s
	pc := s.cfg.Process
	path, shown := pc.Path, pc.Path
	if path == "" {
		var err error
		if path, shown, err = ownImage(); err != nil {
			return nil, fmt.Errorf("find own binary: %w", err)
		}
	}
	args := pc.Args
	if args == nil {
		args = []string{"worker"}
	}
	pipes, err := newPipes()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Args[0] = shown
	cmd.Env = append(os.Environ(), pc.Env...)
	cmd.Env = append(cmd.Env, ipc.WorkerEnv+"="+ipc.WorkerCookie, ipc.MaxFrameEnv+"="+strconv.Itoa(ipc.FrameLimit(pc.MaxFrame)))
	if sl.cuda != "" {
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+sl.cuda)
	}
	// The child reads frames on fd 3 and writes its own on fd 4
	// (ipc.WorkerInFD and ipc.WorkerOutFD): ExtraFiles start at 3.
	cmd.ExtraFiles = []*os.File{pipes.childIn, pipes.childOut}
	cmd.Stdout, cmd.Stderr = pipes.stdoutW, pipes.stderrW
	// Its own process group, so that killing it also kills what it started
	// (a plugin); and, on Linux, it dies with us.
	cmd.SysProcAttr = workerProcAttr()
	err = cmd.Start()
	pipes.closeChildEnds()
	if err != nil {
		pipes.closeParentEnds()
		return nil, fmt.Errorf("start worker %s: %w", path, err)
	}
	s.log.Info("worker started", sl.logAttrs(nil, "pid", cmd.Process.Pid)...)
	p := &process{
		sl:      sl,
		cmd:     cmd,
		out:     ipc.NewWriter(pipes.toChild, pc.MaxFrame),
		in:      pipes.fromChild,
		toChild: pipes.toChild,
		orders:  waitq.New[order](),
		hello:   make(chan struct{}),
		waited:  make(chan struct{}),
		exited:  make(chan struct{}),

		stderrRead: make(chan struct{}),
	}
	p.heard()
	go p.logLines(pipes.stdoutR, "stdout", nil)
	go p.logLines(pipes.stderrR, "stderr", p.stderrRead)
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.waited)
	}()
	if err := p.awaitReady(abandon, ipc.NewReader(p.in, pc.MaxFrame)); err != nil {
		return nil, err
	}
	return p, nil
}

// awaitReady waits for the child's Hello, which proves it is a worker, and
// then for its Ready, and starts the loops that serve it. On failure, or
// once abandon is closed (the reload or scaling that started it gave up),
// the child is killed and reaped before returning.
func (p *process) awaitReady(abandon <-chan struct{}, r *ipc.Reader) error {
	s := p.sl.s
	first := make(chan error, 1)
	go p.readLoop(r, first)
	handshake := time.NewTimer(s.cfg.Process.HandshakeTimeout)
	defer handshake.Stop()
	timer := time.NewTimer(s.cfg.InitTimeout)
	defer timer.Stop()
	var err error
	helloed := p.hello
	for done := false; !done; {
		done = true
		select {
		case err = <-first:
		case <-helloed:
			helloed = nil // closed: stop selecting on it
			handshake.Stop()
			done = false
		case <-handshake.C:
			err = fmt.Errorf("%w: %s said nothing on the worker pipe within %s (a worker binary's main calls workerproc.Main)", ErrNotWorker, p.binary(), s.cfg.Process.HandshakeTimeout)
		case <-timer.C:
			err = fmt.Errorf("worker did not become ready within %s, the init timeout: its %s model was still opening", s.cfg.InitTimeout, p.sl.spec.Runner)
			if helloed != nil { // no Hello yet: it was never sent the model
				err = fmt.Errorf("%w: %s said nothing on the worker pipe within %s, the init timeout (a worker binary's main calls workerproc.Main)", ErrNotWorker, p.binary(), s.cfg.InitTimeout)
			}
		case <-s.stopping:
			err = ErrShuttingDown
		case <-abandon:
			err = errStartAbandoned
		}
	}
	if err != nil {
		p.kill(err)
		<-p.exited
		return p.wait()
	}
	p.written = make(chan struct{})
	go p.writeLoop()
	go p.watchHeartbeat()
	return nil
}

// readLoop reads the child's messages until its pipe ends, then reaps it.
// The outcome of the wait for Ready goes to first.
func (p *process) readLoop(r *ipc.Reader, first chan<- error) {
	defer close(p.exited)
	defer func() {
		// Whatever ended the reading, the child must be gone before we say so.
		if !isClosed(p.waited) {
			p.kill(errClosedPipe)
		}
		<-p.waited
	}()
	helloed, isReady := false, false
	var parts resultParts
	for {
		msg, err := r.Read()
		if err != nil {
			switch {
			case !errors.Is(err, io.EOF) && !helloed:
				p.kill(fmt.Errorf("%w: %s wrote what is not a worker's frame on the worker pipe: %v", ErrNotWorker, p.binary(), err))
			case !errors.Is(err, io.EOF):
				p.kill(fmt.Errorf("read from worker: %w", err))
			}
			if !isReady {
				first <- p.startError(helloed)
			}
			return
		}
		p.heard()
		switch {
		case !helloed:
			if err := p.greet(msg); err != nil {
				p.kill(err)
				continue
			}
			helloed = true
			close(p.hello)
		case msg.Kind == ipc.KindReady && !isReady && msg.Ready != nil:
			p.ready = *msg.Ready
			isReady = true
			first <- nil
		case msg.Kind == ipc.KindFatal:
			p.kill(fatalError(msg.Error))
		case msg.Kind == ipc.KindHeartbeat:
		case msg.Kind == ipc.KindResultPart && isReady:
			if err := parts.add(&msg, func(id uint64) (int, bool) { return p.sl.runningItems(p, id) }); err != nil {
				p.kill(err)
			}
		case msg.Kind == ipc.KindRecalled && isReady:
			if err := p.sl.onRecalled(p, msg.BatchID); err != nil {
				p.kill(err)
			}
		case msg.Kind == ipc.KindResult && isReady:
			if err := parts.end(&msg); err != nil {
				p.kill(err)
				continue
			}
			p.sl.onResult(p, result{id: msg.BatchID, outputs: msg.Items, itemErrs: pipeErrors(msg.ItemErrors), expired: msg.Expired, err: pipeError(msg.Error)})
		default:
			p.kill(fmt.Errorf("unexpected %s message from worker", msg.Kind))
		}
	}
}

// resultParts gathers the parts of a batch's answer that a worker sent in
// several frames (ipc.KindResultPart) because together its outputs would
// not fit in one, until the KindResult that ends the answer.
//
// What it holds is bounded by the batch it answers: no more outputs than
// the batch has items, each in a frame of its own at most, so at most the
// batch's items times the frame limit, which is what a legitimate answer
// of outputs that each fit a frame may need. A worker that sends more, or
// parts of a batch it does not run, is killed at the first part that
// breaks the rule rather than at the end of the answer.
type resultParts struct {
	started  bool
	id       uint64
	maxItems int // the items of the batch answered
	items    [][]byte
	itemErrs []string // nil while no part had any
	expired  []int    // counted from the answer's first item
}

// add keeps a part. running tells, for the first part of an answer, the
// items of the batch if it is the one the worker runs, or false if it is
// not. A part of another batch than the one running or than the one
// begun, one whose item errors do not match its items, or parts holding
// more outputs than the batch has items, break the protocol.
func (rp *resultParts) add(msg *ipc.Message, running func(id uint64) (items int, ok bool)) error {
	if !rp.started {
		items, ok := running(msg.BatchID)
		if !ok {
			return fmt.Errorf("worker sent a part of the answer to batch %d, which is not the one it runs", msg.BatchID)
		}
		rp.started, rp.id, rp.maxItems = true, msg.BatchID, items
	}
	switch {
	case msg.BatchID != rp.id:
		return fmt.Errorf("worker sent a part of the answer to batch %d while answering batch %d", msg.BatchID, rp.id)
	case msg.ItemErrors != nil && len(msg.ItemErrors) != len(msg.Items):
		return fmt.Errorf("worker sent a part of the answer to batch %d with %d item errors for %d outputs", msg.BatchID, len(msg.ItemErrors), len(msg.Items))
	case len(rp.items)+len(msg.Items) > rp.maxItems:
		return fmt.Errorf("worker sent parts of the answer to batch %d with more outputs than the batch has items (%d)", msg.BatchID, rp.maxItems)
	}
	rp.join(msg)
	return nil
}

// join appends a part's items, item errors and expired items to those kept.
func (rp *resultParts) join(msg *ipc.Message) {
	for _, i := range msg.Expired {
		// Each part counts its expired items from its own first item.
		rp.expired = append(rp.expired, len(rp.items)+i)
	}
	rp.itemErrs = joinTexts(rp.itemErrs, len(rp.items), msg.ItemErrors, len(msg.Items))
	rp.items = append(rp.items, msg.Items...)
}

// end puts the parts kept, if any, in front of msg, the result that ends
// their answer, and starts afresh for the next answer.
func (rp *resultParts) end(msg *ipc.Message) error {
	if !rp.started {
		return nil
	}
	defer func() { *rp = resultParts{} }()
	switch {
	case msg.BatchID != rp.id:
		return fmt.Errorf("worker ended the answer to batch %d with a result of batch %d", rp.id, msg.BatchID)
	case msg.ItemErrors != nil && len(msg.ItemErrors) != len(msg.Items):
		return fmt.Errorf("worker ended the answer to batch %d with %d item errors for %d outputs", msg.BatchID, len(msg.ItemErrors), len(msg.Items))
	}
	rp.join(msg)
	msg.Items, msg.ItemErrors, msg.Expired = rp.items, rp.itemErrs, rp.expired
	return nil
}

// joinTexts joins the item error texts of two runs of na and nb items,
// either of which may have none (nil): nil when neither has any.
func joinTexts(a []string, na int, b []string, nb int) []string {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		a = make([]string, na, na+nb)
	}
	if b == nil {
		return append(a, make([]string, nb)...)
	}
	return append(a, b...)
}

// fatalError is the cause of death a worker's Fatal message gives: one
// that is ErrModelChanged when the worker marked it with ipc.FatalStale.
func fatalError(text string) error {
	if why, ok := strings.CutPrefix(text, ipc.FatalStale); ok {
		return modelChangedError{why: cutText(why, maxLastWords)}
	}
	if why, ok := strings.CutPrefix(text, ipc.FatalNoResources); ok {
		return noResourcesError{"worker could not open its model for want of the machine's resources: " + cutText(why, maxLastWords)}
	}
	return fmt.Errorf("worker gave up: %s", cutText(text, maxLastWords))
}

// noResourcesError is a worker's failure for want of the machine's
// resources, which it said in words: noResources takes it as the
// supervisor's own want of them (see crashNoResources).
type noResourcesError struct{ why string }

func (e noResourcesError) Error() string        { return e.why }
func (e noResourcesError) Is(target error) bool { return target == syscall.EAGAIN }

// modelChangedError is a worker's refusal of a model changed since the
// spec was made. It is ErrModelChanged, but its text is the worker's own,
// which says what changed and what to do.
type modelChangedError struct{ why string }

func (e modelChangedError) Error() string        { return "worker refused its model: " + e.why }
func (e modelChangedError) Is(target error) bool { return target == ErrModelChanged }

// maxLastWords bounds the text of a worker's Fatal message that becomes
// the cause of its death: it goes to the callers of its batch, the log and
// the slot's status, where megabytes help no one.
const maxLastWords = 4 << 10

// cutText cuts text to at most limit bytes, at a character's start, saying
// how much was cut.
func cutText(text string, limit int) string {
	if len(text) <= limit {
		return text
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d more bytes cut)", text[:cut], len(text)-cut)
}

// binary names the worker's binary in messages: its path, or this
// program's as it was started, when it runs this program's image.
func (p *process) binary() string { return p.cmd.Args[0] }

// greet checks the child's first message, which must be a Hello of this
// protocol's version, and answers it with the model spec.
func (p *process) greet(msg ipc.Message) error {
	path := p.binary()
	switch {
	case msg.Kind == ipc.KindReady && msg.Ready != nil && msg.Ready.Version != ipc.Version:
		// Workers before version 3 said Ready first, without a Hello.
		return fmt.Errorf("worker speaks protocol version %d, want %d: is %s the same build as this supervisor?", msg.Ready.Version, ipc.Version, path)
	case msg.Kind != ipc.KindHello || msg.Ready == nil || msg.Ready.Magic != ipc.Magic:
		return fmt.Errorf("%w: %s sent a %s message where a worker says hello", ErrNotWorker, path, msg.Kind)
	case msg.Ready.Version != ipc.Version:
		return fmt.Errorf("worker speaks protocol version %d, want %d: is %s the same build as this supervisor?", msg.Ready.Version, ipc.Version, path)
	}
	spec, err := json.Marshal(p.sl.spec)
	if err != nil {
		return fmt.Errorf("encode the model spec: %w", err)
	}
	// The writer is ours alone until writeLoop starts, after Ready.
	if err := p.out.Write(&ipc.Message{Kind: ipc.KindInit, Spec: spec}); err != nil {
		return fmt.Errorf("send init to worker: %w", err)
	}
	return nil
}

// startError explains why a child ended before it was ready: one that
// ended before its Hello is no worker, unless we killed it for a reason.
func (p *process) startError(helloed bool) error {
	<-p.waited
	// Its last words, which say why, may still be on their way through the
	// pipe; a process it started may hold the pipe open, so not for long.
	select {
	case <-p.stderrRead:
	case <-time.After(time.Second):
	}
	err := p.deathReason()
	killed := p.reason() != nil
	// A panic's message tells more than the last line, its stack's end.
	last := p.firstDeathLine.Load()
	if last == nil {
		last = p.lastStderr.Load()
	}
	if last != nil && !killed {
		err = fmt.Errorf("%w; its last words: %s", err, *last)
	}
	if last != nil && !killed && lastwords.WantsThreads(*last) {
		return noResourcesError{fmt.Sprintf("%s could not start a thread: the limit of processes (a container's pids limit, ulimit -u) leaves it no room (%v)", p.binary(), err)}
	}
	if !helloed && !killed {
		if sig, ok := p.signaled(); ok {
			// Killed from outside (the OOM killer, an operator): no news
			// of what the binary is.
			return fmt.Errorf("%s was ended by a signal (%s) before its handshake, not sent by this server (%v)", p.binary(), sig, err)
		}
		return fmt.Errorf("%w: %s ended before the handshake (%v)", ErrNotWorker, p.binary(), err)
	}
	return err
}

// signaled reports the signal that ended the child, if one did.
func (p *process) signaled() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var exit *exec.ExitError
	if !errors.As(p.exitErr, &exit) {
		return "", false
	}
	return exitSignal(exit.ProcessState)
}

func (p *process) writeLoop() {
	defer close(p.written)
	var ttls []int64 // reused from batch to batch
	for {
		o, ok, _ := p.orders.Take(p.exited)
		if !ok {
			return
		}
		msg := &ipc.Message{Kind: ipc.KindStop}
		switch {
		case o.b != nil:
			var check takeCheck
			switch ttls, check = p.sl.pruneForRun(p, o.b, o.seq, ttls); check {
			case takeDead:
				return // it is dying: its batches are back in the queue
			case takeStale:
				continue
			}
			msg = &ipc.Message{Kind: ipc.KindBatch, BatchID: o.b.id, Items: o.b.data, TTLs: ttls}
		case o.recall != 0:
			msg = &ipc.Message{Kind: ipc.KindRecall, BatchID: o.recall}
		}
		if err := p.out.Write(msg); err != nil {
			p.kill(fmt.Errorf("send %s to worker: %w", msg.Kind, err))
			return
		}
	}
}

// watchHeartbeat kills a child that has said nothing for HeartbeatTimeout:
// its process may be alive but its loop is stuck. After a stall of the
// supervisor (see stallClock) the child's silence counts from the stall's
// end: what it said meanwhile may not be read yet.
func (p *process) watchHeartbeat() {
	s := p.sl.s
	timeout := s.cfg.Process.HeartbeatTimeout
	t := time.NewTicker(timeout / 4)
	defer t.Stop()
	watch := heardWatch{seen: s.stalls.stalled(s.clock())}
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
			now := s.clock()
			if silent := watch.silence(now, p.lastHeard.Load(), s.stalls.stalled(now)); silent > timeout {
				p.kill(fmt.Errorf("no heartbeat for %s", silent.Round(time.Millisecond)))
				return
			}
		}
	}
}

// heardWatch judges a child's silence across the supervisor's stalls.
type heardWatch struct {
	seen    time.Duration // the stalls counted at the last look
	resumed int64         // when the last stall seen ended; 0 for none
}

// silence is how long a child last heard at heard has been silent at now,
// counted from the end of the last stall seen, given stalled, the stalls
// counted up to now. All three are readings of the streamer's clock.
func (w *heardWatch) silence(now, heard int64, stalled time.Duration) time.Duration {
	if stalled != w.seen {
		w.seen, w.resumed = stalled, now
	}
	silent := time.Duration(now - heard)
	if w.resumed != 0 {
		silent = min(silent, time.Duration(now-w.resumed))
	}
	return silent
}

// heard notes that the child just said something.
func (p *process) heard() { p.lastHeard.Store(p.sl.s.clock()) }

// silence is how long the child has said nothing.
func (p *process) silence() time.Duration {
	return time.Duration(p.sl.s.clock() - p.lastHeard.Load())
}

// logLines copies the child's output into the log, a line an event, and
// closes done, if not nil, at its end.
func (p *process) logLines(r *os.File, stream string, done chan struct{}) {
	defer r.Close()
	if done != nil {
		defer close(done)
	}
	br := bufio.NewReaderSize(r, 4096)
	out := newOutputLog(p.sl.s.log.With("slot", p.sl.id, "pid", p.cmd.Process.Pid, "stream", stream))
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			line = trimNewline(line)
			// A line logged, or left out for its level, is the last
			// words so far; those dropped for the rate are kept by out,
			// and the last of them said at the end.
			if text := out.line(line, time.Now()); text != "" && stream == "stderr" {
				p.lastStderr.Store(&text)
				if deathLine(line) && p.firstDeathLine.Load() == nil {
					p.firstDeathLine.Store(&text)
				}
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if last := out.end(); last != "" && stream == "stderr" {
				p.lastStderr.Store(&last)
			}
			return
		}
	}
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func (p *process) send(b *batch) { p.orders.Put(order{b: b, seq: b.sendSeq}) }

func (p *process) recall(id uint64) { p.orders.Put(order{recall: id}) }

func (p *process) forget(b *batch) { forgetOrder(p.orders, b) }

func (p *process) stop() { p.orders.Put(order{}) }

// kill ends the child and everything in its process group. The first
// non-nil reason is kept as the cause of death; but a pipe that broke
// (see pipeBroke) is the cause only if the child still runs a moment
// later: as a rule it broke because the child died, and the child's own
// end (its exit status, the SIGKILL of the kernel's out-of-memory killer)
// says why, which the pipe's error would hide.
func (p *process) kill(reason error) {
	if reason != nil && pipeBroke(reason) {
		t := time.NewTimer(deathSettles)
		select {
		case <-p.waited:
			// Dead already: what it started goes, and its end says why.
			t.Stop()
			killProcessGroup(p.cmd.Process.Pid)
			return
		case <-t.C:
		}
	}
	p.mu.Lock()
	if p.killReason == nil {
		p.killReason = reason
	}
	p.signalled = true
	p.mu.Unlock()
	killProcessGroup(p.cmd.Process.Pid)
	_ = p.cmd.Process.Kill()
}

func (p *process) reason() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killReason
}

func (p *process) wait() error {
	<-p.exited
	p.toChild.Close()
	p.in.Close()
	if p.written != nil {
		// The batches in flight go back to the queue, to be answered and
		// reused; the writer must be done with their bytes first.
		<-p.written
	}
	err := p.deathReason()
	// A panic's message says why better than an exit status, or than a
	// write to a pipe the worker had already left (EPIPE: it was dying).
	// Written before the exit, it is read by now as a rule, but a loaded
	// machine's reader may lag behind the reaping: the death of a worker
	// short of threads, taken for a crash, would count towards its
	// restarts. The wait is short, since it holds the dead worker's
	// batches, and ends at once as a rule: only a process the worker
	// started can hold the pipe open past its end, and what it started
	// goes with it first, as kill has it go.
	ownDeath := p.reason() == nil || errors.Is(p.reason(), syscall.EPIPE)
	if ownDeath && p.stderrRead != nil {
		if p.cmd != nil && p.cmd.Process != nil {
			killProcessGroup(p.cmd.Process.Pid)
		}
		select {
		case <-p.stderrRead:
		case <-time.After(lastWordsWait):
		}
	}
	if last := p.firstDeathLine.Load(); last != nil && ownDeath {
		err = fmt.Errorf("%w; its last words: %s", err, *last)
		if lastwords.WantsThreads(*last) {
			return noResourcesError{fmt.Sprintf("worker could not start a thread: the limit of processes (a container's pids limit, ulimit -u) leaves it no room (%v)", err)}
		}
	}
	return err
}

// lastWordsWait is how long a worker that died on its own waits for the
// reader of its stderr to finish, for its last words.
const lastWordsWait = 500 * time.Millisecond

// deathSettles is how long a broken pipe waits for its child's end to
// be seen, before the child is killed for it.
const deathSettles = 200 * time.Millisecond

// errClosedPipe is the death of a child that closed its pipe to the server
// while it ran on, and was killed for it.
var errClosedPipe = errors.New("worker closed its pipe to the server while it ran")

// pipeBroke says whether err is a pipe to or from the child that broke:
// what a child that died leaves its pipes in.
func pipeBroke(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, errClosedPipe)
}

// deathReason says why the child ended; call it once the child is reaped.
func (p *process) deathReason() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killReason != nil {
		return p.killReason
	}
	if p.exitErr == nil {
		return fmt.Errorf("worker pid %d exited", p.cmd.Process.Pid)
	}
	err := fmt.Errorf("worker pid %d exited: %w", p.cmd.Process.Pid, p.exitErr)
	if ps := p.cmd.ProcessState; ps != nil {
		if sig, ok := exitSignal(ps); ok && sig == syscall.SIGKILL.String() && !p.signalled {
			err = fmt.Errorf("%w (a SIGKILL this server did not send: as a rule the kernel's out-of-memory killer; see the kernel's log)", err)
		}
	}
	return err
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) device() string { return p.ready.Device }

func (p *process) modelName() string { return p.ready.Model }

// pipes are the four pipes between the supervisor and one child.
type pipes struct {
	toChild, childIn    *os.File // batches: we write toChild, the child reads childIn
	fromChild, childOut *os.File // results: the child writes childOut, we read fromChild
	stdoutR, stdoutW    *os.File
	stderrR, stderrW    *os.File
}

func newPipes() (*pipes, error) {
	p := &pipes{}
	var err error
	pairs := []struct{ r, w **os.File }{
		{&p.childIn, &p.toChild}, {&p.fromChild, &p.childOut}, {&p.stdoutR, &p.stdoutW}, {&p.stderrR, &p.stderrW},
	}
	for _, pair := range pairs {
		if *pair.r, *pair.w, err = os.Pipe(); err != nil {
			p.closeChildEnds()
			p.closeParentEnds()
			return nil, fmt.Errorf("make pipes for a worker: %w", err)
		}
	}
	return p, nil
}

func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.childIn, p.childOut, p.stdoutW, p.stderrW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeParentEnds() {
	for _, f := range []*os.File{p.toChild, p.fromChild, p.stdoutR, p.stderrR} {
		if f != nil {
			f.Close()
		}
	}
}
