package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
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
percentiles, the batch sizes the server formed, and errors by kind. With the
sleep model it also reports the physical limit workers × batch / cost(batch).

Closed loop by default: --concurrency clients, each sending its next request
when the last returns. With --rate the load is open: requests are sent on a
fixed schedule and latency counts from the scheduled time, so queueing shows.
--api go drives the supervisor through its Go API in this process (worker
processes still run the model), so that HTTP does not hide the batcher's cost.`,
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

// sample is one request's outcome.
type sample struct {
	at      time.Duration // since the measurement started, at send
	latency time.Duration
	errKind string // "" for success
}

// sender sends one request and says how it went.
type sender func(ctx context.Context) (errKind string)

// statsSource reads the server's counters.
type statsSource func(ctx context.Context) (supervisor.Stats, error)

func runBench(ctx context.Context, flags *pflag.FlagSet, o benchOptions) error {
	if o.concurrency < 1 || o.itemsPerRequest < 1 || o.duration <= 0 {
		return errors.New("--concurrency, --items-per-request and --duration must be positive")
	}
	var item any
	if err := json.Unmarshal([]byte(o.input), &item); err != nil {
		return fmt.Errorf("--input %q is not JSON: %w", o.input, err)
	}
	send, stats, stop, err := o.setUp(ctx, flags, item)
	if err != nil {
		return err
	}
	defer stop()

	if o.warmup > 0 {
		o.load(ctx, send, o.warmup, false)
	}
	before, err := stats(ctx)
	if err != nil {
		return fmt.Errorf("read server stats: %w", err)
	}
	began := time.Now()
	samples := o.load(ctx, send, o.duration, !o.jsonOut)
	elapsed := time.Since(began)
	after, err := stats(ctx)
	if err != nil {
		return fmt.Errorf("read server stats: %w", err)
	}
	rep := newReport(samples, elapsed, o.itemsPerRequest, before, after)
	if o.target == "" {
		rep.setLimit(o.serve)
	}
	if o.plot != "" {
		if err := writePlot(o.plot, samples, rep.BatchSizes); err != nil {
			return err
		}
	}
	if o.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.print(os.Stdout)
	return nil
}

// setUp makes the sender for the chosen API, starting a server when needed.
func (o benchOptions) setUp(ctx context.Context, flags *pflag.FlagSet, item any) (sender, statsSource, func(), error) {
	switch {
	case o.api == "go":
		if o.target != "" {
			return nil, nil, nil, errors.New("--api go runs its own supervisor; it cannot drive --target")
		}
		return o.goAPI(ctx, item)
	case o.api != "http":
		return nil, nil, nil, fmt.Errorf("--api %q: want http or go", o.api)
	}
	target, stop := o.target, func() {}
	if target == "" {
		var err error
		target, stop, err = startBenchServer(ctx, flags)
		if err != nil {
			return nil, nil, nil, err
		}
	}
	target = strings.TrimSuffix(target, "/")
	inputs := make([]any, o.itemsPerRequest)
	for i := range inputs {
		inputs[i] = item
	}
	body, err := json.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        o.concurrency * 2,
		MaxIdleConnsPerHost: o.concurrency * 2,
		IdleConnTimeout:     time.Minute,
	}}
	return httpSender(client, target+"/predict", body), httpStats(client, target+"/v1/stats"), stop, nil
}

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
		return st, json.NewDecoder(resp.Body).Decode(&st)
	}
}

// goAPI runs a supervisor in this process, with worker processes, and sends
// msgpack items through Predict.
func (o benchOptions) goAPI(ctx context.Context, item any) (sender, statsSource, func(), error) {
	spec, err := o.serve.spec()
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := o.serve.supervisorConfig(spec, discardLogger())
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := supervisor.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := st.Start(ctx); err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = st.Shutdown(ctx)
	}
	if err := waitAllReady(ctx, st, cfg.Workers); err != nil {
		stop()
		return nil, nil, nil, err
	}
	encoded, err := msgpack.Marshal(item)
	if err != nil {
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

func waitAllReady(ctx context.Context, st *supervisor.Streamer, workers int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ready := 0
		for _, sl := range st.Slots() {
			if sl.State == supervisor.SlotReady {
				ready++
			}
		}
		if ready == workers {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("only %d of %d workers became ready", ready, workers)
		}
		time.Sleep(10 * time.Millisecond)
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

// load sends requests for d and returns what happened to each.
func (o benchOptions) load(ctx context.Context, send sender, d time.Duration, progress bool) []sample {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var bar *progressbar.ProgressBar
	stopBar := make(chan struct{})
	var barDone sync.WaitGroup
	if progress {
		bar = progressbar.NewOptions64(d.Milliseconds(),
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionClearOnFinish())
		barDone.Go(func() { tickBar(bar, d, stopBar) })
	}
	start := time.Now()
	var samples []sample
	if o.rate > 0 {
		samples = openLoop(ctx, send, start, o.rate, o.concurrency)
	} else {
		samples = closedLoop(ctx, send, start, o.concurrency)
	}
	close(stopBar)
	barDone.Wait()
	return samples
}

func tickBar(bar *progressbar.ProgressBar, d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			_ = bar.Finish()
			return
		case <-t.C:
			_ = bar.Set64(min(time.Since(start), d).Milliseconds())
		}
	}
}

// closedLoop runs clients that each send their next request when the last
// one is answered.
func closedLoop(ctx context.Context, send sender, start time.Time, clients int) []sample {
	results := make([][]sample, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				kind := send(ctx)
				if ctx.Err() != nil {
					return
				}
				results[c] = append(results[c], sample{at: t0.Sub(start), latency: time.Since(t0), errKind: kind})
			}
		})
	}
	wg.Wait()
	return slices.Concat(results...)
}

// openLoop sends rate requests per second on a fixed schedule; latency counts
// from the scheduled time. At most maxInFlight are outstanding: beyond that a
// request is counted as a client-side overload instead of being sent.
func openLoop(ctx context.Context, send sender, start time.Time, rate float64, maxInFlight int) []sample {
	var mu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxInFlight)
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := time.Duration(i) * interval
		if wait := time.Until(start.Add(at)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		default:
			mu.Lock()
			samples = append(samples, sample{at: at, errKind: "client in-flight limit"})
			mu.Unlock()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			kind := send(ctx)
			if ctx.Err() != nil {
				return
			}
			s := sample{at: at, latency: time.Since(start.Add(at)), errKind: kind}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	return samples
}

// startBenchServer runs `streamer serve` with the serve flags that were set,
// on a free loopback port, and waits until it is ready.
func startBenchServer(ctx context.Context, flags *pflag.FlagSet) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
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
	var logs bytes.Buffer
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &logs}, &syncWriter{w: &logs}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
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
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop, nil
			}
		}
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("server exited before it was ready (%v):\n%s", err, logs.String())
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("server not ready after 2m:\n%s", logs.String())
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// report is what bench prints; its JSON keys are documented in the README.
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

func newReport(samples []sample, elapsed time.Duration, itemsPerRequest int, before, after supervisor.Stats) report {
	r := report{Seconds: elapsed.Seconds(), Errors: map[string]uint64{}, BatchSizes: map[int]uint64{}}
	var ok []time.Duration
	for _, s := range samples {
		if s.errKind != "" {
			r.Errors[s.errKind]++
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
	cost, err := model.ParseSleep(args)
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
	for kind, n := range r.Errors {
		fmt.Fprintf(w, "  %-24s %d\n", kind, n)
	}
}
