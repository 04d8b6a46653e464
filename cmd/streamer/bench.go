package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/supervisor"
)

// benchOptions are the flags of streamer bench; the serve flags come too.
type benchOptions struct {
	serve           serveOptions
	concurrency     int
	duration        time.Duration
	warmup          time.Duration
	rate            float64
	target          string
	api             string
	input           string
	itemsPerRequest int
	jsonOut         bool
	plot            string
}

func newBenchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench [serve flags]",
		Short: "Measure throughput and latency under load",
		Long: `Bench starts a server with the given serve flags (or drives --target),
sends load for --duration, and reports requests/s, items/s, latency
percentiles, the batch sizes the server formed (from GET /v1/stats), and
errors by kind. With the sleep model it also reports the physical limit
workers × batch / cost(batch).

Closed loop by default: --concurrency clients, each sending its next request
when the last returns. With --rate the load is open: requests are sent on a
fixed schedule and latency counts from the scheduled time, so queueing shows.
--api go drives the supervisor through its Go API in this process (worker
processes still run the model), so that HTTP does not hide the batcher's cost.

Over plain http the load comes from a lean HTTP/1.1 keep-alive client, so
that on a small machine the client takes as little CPU from the server as it
can; https targets get Go's standard client.`,
		Example: `  streamer bench --model sleep:10ms,100us --workers 4 --concurrency 512 --duration 10s
  streamer bench --api go --model echo --workers 2 --concurrency 512
  streamer bench --target http://127.0.0.1:5005 --rate 2000 --duration 30s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), cmd.Flags(), o)
		},
	}
	addServeFlags(cmd, &o.serve)
	f := cmd.Flags()
	f.IntVar(&o.concurrency, "concurrency", 64, "closed loop: number of clients; open loop: most requests in flight")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send load")
	f.DurationVar(&o.warmup, "warmup", time.Second, "load sent before measuring starts")
	f.Float64Var(&o.rate, "rate", 0, "open loop: requests per second on a fixed schedule (0: closed loop)")
	f.StringVar(&o.target, "target", "", "drive a running server at this URL instead of starting one")
	f.StringVar(&o.api, "api", "http", "http, or go to drive the supervisor's Go API in this process")
	f.StringVar(&o.input, "input", `"hello, streamer"`, "one item, as JSON")
	f.IntVar(&o.itemsPerRequest, "items-per-request", 1, "items in each request")
	f.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of the table")
	f.StringVar(&o.plot, "plot", "", "write a PNG of latency over time and the batch-size histogram to this file")
	return cmd
}

// sample is one request's outcome. It holds no pointers, so that the
// garbage collector need not scan the millions of them a long run keeps.
type sample struct {
	at      time.Duration // since the measurement started, at send (open loop: scheduled send)
	latency time.Duration
	errKind uint16 // an errorKinds number; 0 for success
}

// errorKinds numbers the kinds of failure the samples record.
type errorKinds struct {
	mu    sync.Mutex
	names []string // names[0] is "", success
	ids   map[string]uint16
}

func newErrorKinds() *errorKinds {
	return &errorKinds{names: []string{""}, ids: map[string]uint16{"": 0}}
}

// id numbers kind, "" being 0; past 65535 distinct kinds, the rest share
// the last number.
func (k *errorKinds) id(kind string) uint16 {
	if kind == "" {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	id, ok := k.ids[kind]
	if !ok {
		if len(k.names) > math.MaxUint16 {
			return math.MaxUint16
		}
		id = uint16(len(k.names))
		k.names = append(k.names, kind)
		k.ids[kind] = id
	}
	return id
}

// name is the kind numbered id.
func (k *errorKinds) name(id uint16) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.names[id]
}

// sender sends one request and says how it went. It is called from many
// goroutines at once.
type sender func(ctx context.Context) (errKind string)

// statsSource reads the server's counters.
type statsSource func(ctx context.Context) (supervisor.Stats, error)

// check validates the bench flags before anything is started, so that a
// typo fails at once rather than after a server start.
func (o benchOptions) check() (item any, err error) {
	switch {
	case o.concurrency < 1:
		return nil, fmt.Errorf("--concurrency %d: want at least 1", o.concurrency)
	case o.itemsPerRequest < 1:
		return nil, fmt.Errorf("--items-per-request %d: want at least 1", o.itemsPerRequest)
	case o.duration <= 0:
		return nil, fmt.Errorf("--duration %s: must be positive", o.duration)
	case o.warmup < 0:
		return nil, fmt.Errorf("--warmup %s: must not be negative", o.warmup)
	case o.rate < 0:
		return nil, fmt.Errorf("--rate %g: must not be negative (0 is closed loop)", o.rate)
	case o.api != "http" && o.api != "go":
		return nil, fmt.Errorf("--api %q: want http or go", o.api)
	case o.api == "go" && o.target != "":
		return nil, errors.New("--api go runs its own supervisor; it cannot drive --target")
	}
	if o.target != "" {
		if _, err := parseTarget(o.target); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal([]byte(o.input), &item); err != nil {
		return nil, fmt.Errorf("--input %q is not JSON: %w", o.input, err)
	}
	return item, nil
}

// parseTarget checks that target is an http or https URL with a host.
func parseTarget(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("--target %q: %w", target, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--target %q: want an http:// or https:// URL such as http://127.0.0.1:5005", target)
	}
	return u, nil
}

func runBench(ctx context.Context, flags *pflag.FlagSet, o benchOptions) error {
	item, err := o.check()
	if err != nil {
		return err
	}
	// The plot file is created first: a path that cannot be written fails
	// now, not after the whole run.
	var plotFile *os.File
	if o.plot != "" {
		if plotFile, err = os.Create(o.plot); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
		defer func() {
			if plotFile != nil { // not written: leave no empty or partial file behind
				plotFile.Close()
				os.Remove(o.plot)
			}
		}()
	}
	// An interrupt ends the load early; the server this run started is
	// stopped and what was measured so far is still reported.
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()

	send, stats, stop, err := o.setUp(ctx, flags, item)
	if err != nil {
		return err
	}
	defer stop()

	rep, samples, err := o.measure(ctx, send, stats)
	if err != nil {
		return err
	}
	if plotFile != nil {
		err := writePlot(plotFile, samples, rep.BatchSizes)
		if closeErr := plotFile.Close(); err == nil {
			err = closeErr
		}
		if err != nil {
			return fmt.Errorf("--plot %s: %w", o.plot, err)
		}
		plotFile = nil
	}
	if err := o.printReport(rep); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted after %.1fs of load; the figures above cover that part", rep.Seconds)
	}
	return nil
}

// printReport writes the table, or the JSON object with --json, to stdout.
func (o benchOptions) printReport(rep report) error {
	if !o.jsonOut {
		rep.print(os.Stdout)
		return nil
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// statsSnapshot is the server's counters when the measured window opened.
type statsSnapshot struct {
	stats supervisor.Stats
	err   error
	at    time.Time
}

// measure sends one continuous load for the warm-up and then the measured
// window, and builds the report from the requests answered inside the window
// and the server's counters at its start and end. The load does not stop
// between the two: a pause would let the queue and the workers' pipelines
// drain, and the window would start from an idle server and read low.
func (o benchOptions) measure(ctx context.Context, send sender, stats statsSource) (report, []sample, error) {
	// The run may be interrupted: the stats reads must not be.
	statsCtx := context.WithoutCancel(ctx)
	opened := make(chan statsSnapshot, 1)
	openWindow := func() {
		at := time.Now()
		st, err := stats(statsCtx)
		opened <- statsSnapshot{stats: st, err: err, at: at}
	}
	var window *time.Timer
	if o.warmup == 0 {
		openWindow()
	} else {
		window = time.AfterFunc(o.warmup, openWindow)
	}
	samples, kinds := o.load(ctx, send, !o.jsonOut)
	loadEnded := time.Now()
	if window != nil && window.Stop() {
		return report{}, nil, errors.New("interrupted during the warm-up; nothing was measured")
	}
	before := <-opened
	if before.err != nil {
		if o.target == "" {
			return report{}, nil, fmt.Errorf("read server stats: %w", before.err)
		}
		// Another server behind --target may not have the endpoint: the
		// client-side figures still stand.
		fmt.Fprintf(os.Stderr, "streamer bench: no batch figures: read %s/v1/stats: %v\n", strings.TrimSuffix(o.target, "/"), before.err)
	}
	after := before.stats
	if before.err == nil {
		var err error
		if after, err = stats(statsCtx); err != nil {
			return report{}, nil, fmt.Errorf("read server stats: %w", err)
		}
	}
	elapsed := o.duration
	if ctx.Err() != nil { // interrupted: the window ended early
		elapsed = min(loadEnded.Sub(before.at), o.duration)
	}
	samples = inWindow(samples, o.warmup)
	rep := newReport(samples, kinds, elapsed, o.itemsPerRequest, before.stats, after)
	if o.target == "" {
		rep.setLimit(o.serve)
	}
	return rep, samples, nil
}

// inWindow keeps the samples answered after the warm-up, with their send
// times counted from the window's start (negative for a request sent during
// the warm-up and answered inside the window). Counting answers in the
// window, whenever they were sent, measures the steady rate without a bias
// for the requests in flight at either end.
func inWindow(samples []sample, warmup time.Duration) []sample {
	kept := samples[:0]
	for _, s := range samples {
		if s.at+s.latency >= warmup {
			s.at -= warmup
			kept = append(kept, s)
		}
	}
	return kept
}

// setUp makes the sender for the chosen API, starting a server when needed.
// The returned func stops what was started.
func (o benchOptions) setUp(ctx context.Context, flags *pflag.FlagSet, item any) (sender, statsSource, func(), error) {
	if o.api == "go" {
		return o.goAPI(ctx, item)
	}
	target, stop := o.target, func() {}
	if target == "" {
		var err error
		if target, stop, err = startBenchServer(ctx, flags, o.serve.workers); err != nil {
			return nil, nil, nil, err
		}
	}
	u, err := parseTarget(target)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	inputs := make([]any, o.itemsPerRequest)
	for i := range inputs {
		inputs[i] = item
	}
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	base := strings.TrimSuffix(u.String(), "/")
	statsClient := &http.Client{Timeout: 30 * time.Second}
	stats := httpStats(statsClient, base+"/v1/stats")
	if u.Scheme == "http" {
		c := newWireClient(u, "/predict", body, o.concurrency)
		return c.send, stats, func() { c.closeIdle(); stop() }, nil
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        o.concurrency * 2,
		MaxIdleConnsPerHost: o.concurrency * 2,
		IdleConnTimeout:     time.Minute,
	}}
	return httpSender(client, base+"/predict", body), stats, func() { client.CloseIdleConnections(); stop() }, nil
}

// httpSender posts body with Go's standard client (used for https).
func httpSender(client *http.Client, url string, body []byte) sender {
	return func(ctx context.Context) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return "client"
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			return "connection"
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("http %d", resp.StatusCode)
		}
		return ""
	}
}

func httpStats(client *http.Client, url string) statsSource {
	return func(ctx context.Context) (supervisor.Stats, error) {
		var st supervisor.Stats
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return st, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return st, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return st, fmt.Errorf("GET %s: %w", url, err)
		}
		return st, nil
	}
}

// goAPI runs a supervisor in this process, with worker processes, and sends
// msgpack items through Predict.
func (o benchOptions) goAPI(ctx context.Context, item any) (sender, statsSource, func(), error) {
	spec, err := o.serve.spec("")
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := o.serve.supervisorConfig(spec, discardLogger())
	if err != nil {
		return nil, nil, nil, err
	}
	encoded, err := msgpack.Marshal(item)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--input: encode as msgpack: %w", err)
	}
	st, err := supervisor.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := st.Start(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("start workers: %w", err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = st.Shutdown(ctx)
	}
	if err := waitReady(ctx, cfg.Workers, func(context.Context) ([]supervisor.SlotStatus, error) { return st.Slots(), nil }); err != nil {
		stop()
		return nil, nil, nil, err
	}
	items := make([][]byte, o.itemsPerRequest)
	for i := range items {
		items[i] = encoded
	}
	send := func(ctx context.Context) string {
		if _, err := st.Predict(ctx, items); err != nil {
			if ctx.Err() != nil {
				return ""
			}
			return errorKind(err)
		}
		return ""
	}
	stats := func(context.Context) (supervisor.Stats, error) { return st.Stats(), nil }
	return send, stats, stop, nil
}

// readyTimeout bounds the wait for every worker of a started server.
const benchReadyTimeout = 2 * time.Minute

// waitReady polls slots until all workers are ready: a measurement that
// starts while some still initialise would understate the limit.
func waitReady(ctx context.Context, workers int, slots func(context.Context) ([]supervisor.SlotStatus, error)) error {
	ctx, cancel := context.WithTimeout(ctx, benchReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ready := 0
		list, err := slots(ctx)
		for _, sl := range list {
			if sl.State == supervisor.SlotReady {
				ready++
			}
		}
		if err == nil && ready >= workers {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("workers not ready: %w", err)
			}
			return fmt.Errorf("only %d of %d workers became ready: %w", ready, workers, ctx.Err())
		case <-tick.C:
		}
	}
}

// errorKind names a Go API error by its sentinel.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{supervisor.ErrOverloaded, "overloaded"}, {supervisor.ErrUnavailable, "unavailable"},
		{supervisor.ErrShuttingDown, "shutting down"}, {supervisor.ErrDeadline, "deadline"},
		{supervisor.ErrPoison, "poison"}, {supervisor.ErrModel, "model"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// loadRun is what the load loops share.
type loadRun struct {
	send  func(context.Context) uint16 // the sender, its outcome numbered
	kinds *errorKinds
	start time.Time
	done  *atomic.Int64 // counts answers for the progress bar; nil without one
}

// load sends requests for the warm-up and the measured window and returns
// what happened to each.
func (o benchOptions) load(ctx context.Context, send sender, progress bool) ([]sample, *errorKinds) {
	d := o.warmup + o.duration
	// The end of the load cancels the requests still out; it is not their
	// deadline, which the supervisor would enforce on its own clock and count
	// as a failure.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopLoad := time.AfterFunc(d, cancel)
	defer stopLoad.Stop()
	// Answers are counted only for the bar: a counter that every client
	// bumps costs a contended cache line per request.
	var done *atomic.Int64
	stopBar := make(chan struct{})
	var barDone sync.WaitGroup
	switch {
	case progress && isTerminal(os.Stderr):
		done = new(atomic.Int64)
		barDone.Go(func() { showProgress(o.warmup, d, done, stopBar) })
	case progress:
		// A bar redrawn ten times a second would fill a log file.
		fmt.Fprintf(os.Stderr, "streamer bench: loading for %s (%s warm-up, then %s measured)\n", d, o.warmup, o.duration)
	}
	kinds := newErrorKinds()
	run := loadRun{
		send:  func(ctx context.Context) uint16 { return kinds.id(send(ctx)) },
		kinds: kinds,
		start: time.Now(),
		done:  done,
	}
	var samples []sample
	if o.rate > 0 {
		samples = openLoop(ctx, run, o.rate, o.concurrency)
	} else {
		samples = closedLoop(ctx, run, o.concurrency)
	}
	close(stopBar)
	barDone.Wait()
	return samples, kinds
}

// isTerminal reports whether f is a terminal rather than a file or a pipe.
func isTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// showProgress draws a bar on stderr that fills over d, says when the
// warm-up is over, and counts the answered requests, until stop is closed.
func showProgress(warmup, d time.Duration, done *atomic.Int64, stop <-chan struct{}) {
	bar := progressbar.NewOptions64(d.Milliseconds(),
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("bench"),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish())
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			_ = bar.Finish()
			return
		case <-t.C:
			elapsed := min(time.Since(start), d)
			phase := "bench"
			if elapsed < warmup {
				phase = "warm-up"
			}
			n := done.Load()
			bar.Describe(fmt.Sprintf("%s: %d answers, %.0f/s", phase, n, float64(n)/max(elapsed.Seconds(), 1e-3)))
			_ = bar.Set64(elapsed.Milliseconds())
		}
	}
}

// closedLoop runs clients that each send their next request when the last
// one is answered. Requests cut short by the end of the load are not counted.
func closedLoop(ctx context.Context, run loadRun, clients int) []sample {
	results := make([][]sample, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() { results[c] = client(ctx, run) })
	}
	wg.Wait()
	return slices.Concat(results...)
}

// client is one closed-loop client. It keeps its samples to itself until
// the end, and sends under a context of its own: what each request does
// with its context then stays off the one context all clients share, whose
// cache line would otherwise bounce between the cores at every request.
func client(ctx context.Context, run loadRun) []sample {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var samples []sample
	for ctx.Err() == nil {
		// time.Since reads only the monotonic clock; time.Now reads both.
		sent := time.Since(run.start)
		kind := run.send(ctx)
		if ctx.Err() != nil {
			break
		}
		samples = append(samples, sample{at: sent, latency: time.Since(run.start) - sent, errKind: kind})
		if run.done != nil {
			run.done.Add(1)
		}
	}
	return samples
}

// openLoop sends rate requests per second on a fixed schedule; latency counts
// from the scheduled time, so a sender that falls behind shows as latency
// rather than as a lower rate. At most maxInFlight are outstanding: beyond
// that a request is counted as a client-side overload instead of being sent.
func openLoop(ctx context.Context, run loadRun, rate float64, maxInFlight int) []sample {
	var mu sync.Mutex
	var samples []sample
	record := func(s sample) {
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
		if run.done != nil {
			run.done.Add(1)
		}
	}
	refused := run.kinds.id("client in-flight limit")
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxInFlight)
	interval := float64(time.Second) / rate
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		at := time.Duration(float64(i) * interval)
		if wait := time.Until(run.start.Add(at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			record(sample{at: at, errKind: refused})
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			kind := run.send(ctx)
			if ctx.Err() != nil {
				return
			}
			record(sample{at: at, latency: time.Since(run.start.Add(at)), errKind: kind})
		})
	}
	wg.Wait()
	return samples
}

// startBenchServer runs `streamer serve` with the serve flags that were set,
// on a free loopback port, and waits until every worker is ready.
func startBenchServer(ctx context.Context, flags *pflag.FlagSet, workers int) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("find own binary to start the server: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("find a free port for the server: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	logs := &tailBuffer{max: 64 << 10}
	cmd := exec.Command(self, serveArgs(flags, addr)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start server: %w", err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	url := "http://" + addr
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	err = waitReady(waitCtx, workers, func(ctx context.Context) ([]supervisor.SlotStatus, error) {
		return getSlots(ctx, client, url+"/v1/workers")
	})
	select {
	case <-exited:
		return "", nil, fmt.Errorf("server exited before it was ready (%v); its output:\n%s", waitErr, logs.String())
	default:
	}
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("server on %s: %w; its output:\n%s", addr, err, logs.String())
	}
	return url, stop, nil
}

// serveArgs turns the serve flags that were set into `streamer serve`
// arguments listening on addr.
func serveArgs(flags *pflag.FlagSet, addr string) []string {
	args := []string{"serve", "--listen", addr}
	serveFlags := newServeCommand().Flags()
	flags.Visit(func(f *pflag.Flag) {
		if f.Name == "listen" || serveFlags.Lookup(f.Name) == nil {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				args = append(args, "--"+f.Name, v)
			}
			return
		}
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}

func getSlots(ctx context.Context, client *http.Client, url string) ([]supervisor.SlotStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var slots []supervisor.SlotStatus
	if err := json.NewDecoder(resp.Body).Decode(&slots); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return slots, nil
}

// tailBuffer keeps the last max bytes written to it: the server's output,
// shown when it fails to start, must not grow without bound during a run.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if extra := len(t.buf) - t.max; extra > 0 {
		t.buf = append(t.buf[:0], t.buf[extra:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// report is what bench prints; BENCHMARKS.md documents its JSON keys.
type report struct {
	Requests       int               `json:"requests"`
	Seconds        float64           `json:"seconds"`
	RequestsPerS   float64           `json:"requests_per_s"`
	ItemsPerS      float64           `json:"items_per_s"`
	LatencyMS      latencies         `json:"latency_ms"`
	MeanBatchSize  float64           `json:"mean_batch_size"`
	BatchSizes     map[int]uint64    `json:"batch_sizes"`
	Errors         map[string]uint64 `json:"errors"`
	LimitItemsPerS float64           `json:"limit_items_per_s,omitempty"`
	OfLimit        float64           `json:"of_limit,omitempty"`
}

type latencies struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func newReport(samples []sample, kinds *errorKinds, elapsed time.Duration, itemsPerRequest int, before, after supervisor.Stats) report {
	r := report{Seconds: elapsed.Seconds(), Errors: map[string]uint64{}, BatchSizes: map[int]uint64{}}
	var ok []time.Duration
	for _, s := range samples {
		if s.errKind != 0 {
			r.Errors[kinds.name(s.errKind)]++
			continue
		}
		ok = append(ok, s.latency)
	}
	r.Requests = len(ok)
	r.RequestsPerS = float64(len(ok)) / elapsed.Seconds()
	r.ItemsPerS = r.RequestsPerS * float64(itemsPerRequest)
	slices.Sort(ok)
	ms := func(q float64) float64 {
		if len(ok) == 0 {
			return 0
		}
		return float64(ok[min(int(q*float64(len(ok))), len(ok)-1)]) / float64(time.Millisecond)
	}
	r.LatencyMS = latencies{P50: ms(0.50), P90: ms(0.90), P99: ms(0.99), Max: ms(1)}
	var items, batches uint64
	for n := range after.BatchSizes {
		c := after.BatchSizes[n]
		if n < len(before.BatchSizes) {
			c -= before.BatchSizes[n]
		}
		if c > 0 {
			r.BatchSizes[n] = c
			items += uint64(n) * c
			batches += c
		}
	}
	if batches > 0 {
		r.MeanBatchSize = float64(items) / float64(batches)
	}
	return r
}

// setLimit fills in the physical limit when the model's cost is known.
func (r *report) setLimit(o serveOptions) {
	name, args, _ := strings.Cut(o.model, ":")
	if name != "sleep" || o.plugin != "" {
		return
	}
	cost, err := builtin.ParseSleep(args)
	if err != nil || cost.Cost(o.batchSize) <= 0 {
		return
	}
	r.LimitItemsPerS = float64(o.workers) * float64(o.batchSize) / cost.Cost(o.batchSize).Seconds()
	r.OfLimit = r.ItemsPerS / r.LimitItemsPerS
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "requests      %d in %.1fs\n", r.Requests, r.Seconds)
	fmt.Fprintf(w, "requests/s    %.0f\n", r.RequestsPerS)
	fmt.Fprintf(w, "items/s       %.0f\n", r.ItemsPerS)
	if r.LimitItemsPerS > 0 {
		fmt.Fprintf(w, "limit items/s %.0f (workers × batch / cost(batch)); reached %.3f of it\n", r.LimitItemsPerS, r.OfLimit)
	}
	fmt.Fprintf(w, "latency ms    p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.LatencyMS.P50, r.LatencyMS.P90, r.LatencyMS.P99, r.LatencyMS.Max)
	fmt.Fprintf(w, "mean batch    %.2f\n", r.MeanBatchSize)
	fmt.Fprintln(w, "batch sizes")
	sizes := make([]int, 0, len(r.BatchSizes))
	var most uint64
	for n, c := range r.BatchSizes {
		sizes = append(sizes, n)
		most = max(most, c)
	}
	slices.Sort(sizes)
	for _, n := range sizes {
		c := r.BatchSizes[n]
		fmt.Fprintf(w, "  %4d  %8d  %s\n", n, c, strings.Repeat("#", int(1+39*c/max(most, 1))))
	}
	if len(r.Errors) == 0 {
		fmt.Fprintln(w, "errors        none")
		return
	}
	fmt.Fprintln(w, "errors")
	kinds := make([]string, 0, len(r.Errors))
	for kind := range r.Errors {
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	for _, kind := range kinds {
		fmt.Fprintf(w, "  %-24s %d\n", kind, r.Errors[kind])
	}
}

// wireClient posts one prepared HTTP/1.1 request over keep-alive connections
// and reads of each answer only what it needs: the status and where the
// answer ends. The load generator shares the machine with the server it
// measures, and net/http's client spends about twice the CPU per request (a
// reader and a writer goroutine per connection and hand-offs between them);
// every cycle the client spends is one the server does not get.
type wireClient struct {
	addr    string // host:port to dial
	request []byte // the whole request: head and body
	idle    chan *wireConn
	dialer  net.Dialer
}

// wireConn is one keep-alive connection and its read buffer.
type wireConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// errNoAnswer means the connection closed before a byte of the answer came:
// on a reused connection, the server closed it while it was idle.
var errNoAnswer = errors.New("connection closed before the answer")

// aLongTimeAgo is a deadline in the past: setting it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// newWireClient prepares POST u.Path+path with body as JSON; at most maxIdle
// connections are kept between requests.
func newWireClient(u *url.URL, path string, body []byte, maxIdle int) *wireClient {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: streamer-bench\r\n", strings.TrimSuffix(u.EscapedPath(), "/")+path, u.Host)
	fmt.Fprintf(&head, "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	return &wireClient{
		addr:    addr,
		request: append(head.Bytes(), body...),
		idle:    make(chan *wireConn, maxIdle),
	}
}

// send is the client's sender. A request that fails on a reused connection
// before any answer is sent again once on a new one, as browsers do.
func (c *wireClient) send(ctx context.Context) string {
	for attempt := 0; ; attempt++ {
		conn, reused, err := c.get(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			return "connection"
		}
		status, keepAlive, err := conn.roundTrip(ctx, c.request)
		switch {
		case err != nil:
			conn.conn.Close()
			if ctx.Err() != nil {
				return ""
			}
			if reused && attempt == 0 && errors.Is(err, errNoAnswer) {
				continue
			}
			return "connection"
		case keepAlive:
			c.put(conn)
		default:
			conn.conn.Close()
		}
		if status != http.StatusOK {
			return "http " + strconv.Itoa(status)
		}
		return ""
	}
}

// get takes an idle connection or dials a new one.
func (c *wireClient) get(ctx context.Context) (conn *wireConn, reused bool, err error) {
	select {
	case conn := <-c.idle:
		return conn, true, nil
	default:
	}
	nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	return &wireConn{conn: nc, r: bufio.NewReaderSize(nc, 16<<10)}, false, nil
}

// put keeps conn for the next request, or closes it when enough are kept.
func (c *wireClient) put(conn *wireConn) {
	select {
	case c.idle <- conn:
	default:
		conn.conn.Close()
	}
}

// closeIdle closes the kept connections.
func (c *wireClient) closeIdle() {
	for {
		select {
		case conn := <-c.idle:
			conn.conn.Close()
		default:
			return
		}
	}
}

// roundTrip writes request and reads the answer. When ctx ends first, the
// blocked read is woken and the connection is unusable: the caller closes
// it on the error.
func (w *wireConn) roundTrip(ctx context.Context, request []byte) (status int, keepAlive bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() && err == nil {
			err = ctx.Err() // the deadline is set: the connection cannot be reused
		}
	}()
	if _, err := w.conn.Write(request); err != nil {
		return 0, false, fmt.Errorf("%w: write: %w", errNoAnswer, err)
	}
	return readResponse(w.r)
}

// readResponse reads one HTTP/1.x answer: its status, whether the
// connection stays open, and the body, which is discarded. Interim 1xx
// answers are skipped.
func readResponse(r *bufio.Reader) (status int, keepAlive bool, err error) {
	for first := true; ; first = false {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if first && len(line) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
				return 0, false, errNoAnswer
			}
			return 0, false, fmt.Errorf("read status line: %w", err)
		}
		status, http10, err := parseStatusLine(line)
		if err != nil {
			return 0, false, err
		}
		h, err := readHeader(r, http10)
		if err != nil {
			return 0, false, err
		}
		if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
			continue
		}
		return status, h.keepAlive, h.discardBody(r, status)
	}
}

// parseStatusLine reads "HTTP/1.1 200 OK".
func parseStatusLine(line []byte) (status int, http10 bool, err error) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("malformed status line %q", line)
		}
		status = status*10 + int(c-'0')
	}
	return status, line[7] == '0', nil
}

// answerHeader is what readResponse needs of the header fields.
type answerHeader struct {
	contentLength int64 // -1: not given
	chunked       bool
	keepAlive     bool
}

// readHeader reads header lines up to the empty one.
func readHeader(r *bufio.Reader, http10 bool) (answerHeader, error) {
	h := answerHeader{contentLength: -1, keepAlive: !http10}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return h, fmt.Errorf("read header: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("malformed header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, ok := parseDecimal(value)
			if !ok {
				return h, fmt.Errorf("malformed Content-Length %q", value)
			}
			h.contentLength = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			h.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			switch {
			case bytes.EqualFold(value, []byte("close")):
				h.keepAlive = false
			case bytes.EqualFold(value, []byte("keep-alive")):
				h.keepAlive = true
			}
		}
	}
}

// parseDecimal parses a non-negative decimal that fits comfortably in int64.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// discardBody reads past the body. An answer with neither a length nor
// chunks ends when the server closes the connection.
func (h *answerHeader) discardBody(r *bufio.Reader, status int) error {
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		return nil
	case h.chunked:
		return discardChunked(r)
	case h.contentLength >= 0:
		if _, err := r.Discard(int(h.contentLength)); err != nil {
			return fmt.Errorf("read body: %w", err)
		}
		return nil
	}
	h.keepAlive = false
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	return nil
}

// discardChunked reads past a chunked body and its trailer.
func discardChunked(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read chunk size: %w", err)
		}
		sizeText, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		size, err := strconv.ParseInt(string(bytes.TrimSpace(sizeText)), 16, 32)
		if err != nil || size < 0 {
			return fmt.Errorf("malformed chunk size %q", line)
		}
		if size == 0 {
			break
		}
		if _, err := r.Discard(int(size)); err != nil {
			return fmt.Errorf("read chunk: %w", err)
		}
		if line, err = r.ReadSlice('\n'); err != nil || len(bytes.TrimRight(line, "\r\n")) != 0 {
			return fmt.Errorf("malformed chunk end %q: %v", line, err)
		}
	}
	for { // the trailer, up to its empty line
		line, err := r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("read trailer: %w", err)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}
