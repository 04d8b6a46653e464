package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/internal/bench"
	"github.com/streamer-dev/streamer/internal/wire"
	"github.com/streamer-dev/streamer/supervisor"
)

// batchBound is the most items one batch of the server bench starts may
// hold: --batch-size, or fewer where --max-queue or --max-batch-bytes (at
// the encoded size of --input) allow fewer. The queue admits whole
// requests, so it holds a multiple of --items-per-request at most. The
// limits bench reports against are the sleep model's at that size: at
// --batch-size, a server whose batches could never be that large seemed
// to reach a fraction of its best.
func (o benchOptions) batchBound(input string) int {
	n := o.serve.batchSize
	if o.serve.maxQueue > 0 {
		per := max(o.cfg.ItemsPerRequest, 1)
		n = min(n, max(o.serve.maxQueue/per*per, per))
	}
	if item, err := wire.JSONToMsgpack(nil, []byte(input)); err == nil && len(item) > 0 && o.serve.maxBatchBytes > 0 {
		n = min(n, max(1, o.serve.maxBatchBytes/len(item)))
	}
	return n
}

// benchFilesMargin is the files bench keeps open besides its clients'
// connections: its server's pipes, the stats reads, the runtime's own.
const benchFilesMargin = 64

// checkOpenFiles refuses a --concurrency over HTTP whose connections, one
// per client, would not fit this process's limit of open files. Past it,
// the clients the limit left out failed each request at once, counted as
// the server's connection errors, and the run measured fewer clients than
// it said, exiting 0.
func (o benchOptions) checkOpenFiles() error {
	if o.cfg.API == bench.APIGo || o.cfg.Protocol == bench.ProtocolGRPC {
		return nil // no connection per client
	}
	flag, clients := "--concurrency", o.cfg.Concurrency
	if len(o.sweepClients) > 0 {
		flag, clients = "--sweep-concurrency", slices.Max(o.sweepClients)
	}
	if clients < 1 || clients > bench.MaxConcurrency {
		return nil // refused as out of range, by the load's own check
	}
	limit, ok := openFilesLimit()
	need := uint64(clients) + benchFilesMargin
	if !ok || limit >= need {
		return nil
	}
	return fmt.Errorf("%s %d: each client holds a connection, and this process may open %d files (ulimit -n), fewer than the %d it needs: raise the limit (ulimit -n %d), or lower %[1]s",
		flag, clients, limit, need, need)
}

// benchOptions are the flags of streamer bench; the serve flags come too.
type benchOptions struct {
	serve         serveOptions
	cfg           bench.Config
	jsonOut       bool
	caFile        string
	sweepClients  []int
	sweepBatching []string
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
can; https targets get Go's standard client.

--plot is drawn by the streamer-bench binary (make build builds it), looked
for next to this binary and then on PATH: the plotting code stays out of the
streamer binary, which every worker process runs.

The report is printed, and bench then exits 1, when its figures do not
stand as a measurement of the load asked for: the run was interrupted, no
request succeeded, an open loop skipped more than 1% of its sends for
--concurrency, the server stopped answering its stats, or every request was
refused alike (the load then stops early). BENCHMARKS.md, "What streamer
bench reports", has the figures and the JSON keys.`,
		Example: `  streamer bench --model sleep:10ms,100us --workers 4 --concurrency 512 --duration 10s
  streamer bench --api go --model echo --workers 2 --concurrency 512
  streamer bench --target http://127.0.0.1:5005 --input '[5.1,3.5,1.4,0.2]' --rate 2000 --duration 30s --json
  streamer bench --model demo --protocol grpc --input '[5.1,3.5,1.4,0.2]' --concurrency 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), cmd.Flags(), o)
		},
	}
	addServeFlags(cmd, &o.serve)
	// Its server listens where bench picks (see runBench).
	_ = cmd.Flags().MarkHidden("listen")
	_ = cmd.Flags().MarkHidden("grpc-listen") // bench picks its server's gRPC port
	addBenchFlags(cmd.Flags(), &o)
	return cmd
}

// addBenchFlags binds the flags of the load itself to o.
func addBenchFlags(f *pflag.FlagSet, o *benchOptions) {
	intVar(f, &o.cfg.Concurrency, "concurrency", 64, "closed loop: number of clients; open loop: most requests in flight (at most 65536)")
	f.DurationVar(&o.cfg.Duration, "duration", 10*time.Second, "how long to send load")
	f.DurationVar(&o.cfg.Warmup, "warmup", time.Second, "load sent before measuring starts")
	f.Float64Var(&o.cfg.Rate, "rate", 0, "open loop: requests per second on a fixed schedule, up to 1e6 (0: closed loop)")
	f.DurationVar(&o.cfg.RequestTimeout, "request-timeout", 30*time.Second, "longest one request may wait for its answer; a slower one counts as an error of the kind timeout (http only: the Go API's requests are bounded by --worker-timeout)")
	f.StringVar(&o.cfg.Target, "target", "", "drive a running server at this URL instead of starting one (it was started with serve flags of its own: bench refuses them here, but for the token's and a v2 model's name)")
	f.StringVar(&o.cfg.API, "api", bench.APIHTTP, "http, or go to drive the supervisor's Go API in this process")
	f.StringVar(&o.cfg.Protocol, "protocol", bench.ProtocolPredict, "what the load speaks: predict (POST /predict), v2 (the Open Inference Protocol, JSON data), v2-binary (its binary tensor data extension, for inputs and outputs) or grpc (its gRPC service, raw contents)")
	f.StringVar(&o.caFile, "ca", "", "with an https --target: PEM file of the CA that signed the server's certificate (default: the system's); its gRPC service's too")
	f.BoolVar(&o.cfg.GRPCStream, "grpc-stream", false, "with --protocol grpc: send the requests on Triton's streaming call (ModelStreamInfer), one call per connection carrying its clients' requests, rather than a call each")
	f.StringVar(&o.cfg.GRPCTarget, "grpc-target", "", "with --target and --protocol grpc: the address of the target's gRPC service (its --grpc-listen); its stats are read from --target")
	f.StringVar(&o.cfg.Input, "input", `"hello, streamer"`, "one item, as JSON")
	intVar(f, &o.cfg.ItemsPerRequest, "items-per-request", 1, "items in each request (at most 65536, and the --max-items of the server bench starts)")
	f.BoolVar(&o.jsonOut, "json", false, "print one JSON object instead of the table")
	f.IntSliceVar(&o.sweepClients, "sweep-concurrency", nil, "run a closed loop at each of these numbers of clients (e.g. 1,2,8,32,64,128,256,512) and print one table, each figure beside the best possible for the sleep model")
	f.StringSliceVar(&o.sweepBatching, "sweep-batching", nil, "with --sweep-concurrency: the batching policies to run side by side at each number of clients (e.g. greedy,adaptive; default: --batching)")
	f.StringVar(&o.cfg.PlotFile, "plot", "", "write a PNG of latency over time and the batch-size histogram to this file (drawn by the "+bench.PlotterName+" binary)")
}

// runBench runs the load the flags describe and prints its report. An
// interrupt ends the load early; the server the run started is stopped and
// what was measured so far is still reported.
func runBench(ctx context.Context, flags *pflag.FlagSet, o benchOptions) error {
	o.serve.modelGiven = flags.Changed("model") // --model and --plugin are refused together, as by serve
	if flags.Changed("listen") {
		return errors.New("--listen: bench starts its server on a free loopback port of its own, or drives --target")
	}
	if flags.Changed("grpc-listen") {
		return errors.New("--grpc-listen: with --protocol grpc, bench starts its server's gRPC service on a free loopback port of its own, or drives --grpc-target")
	}
	if o.cfg.Target == "" && (flags.Changed("tls-cert") || flags.Changed("tls-key")) {
		// Its server would serve HTTPS while the readiness checks and the
		// load speak plain http: the run would wait for workers that are
		// ready all along, and fail blaming them.
		return errors.New("--tls-cert, --tls-key: bench speaks plain http to the server it starts; to load a server over HTTPS, start it with them and give bench --target https://host:port")
	}
	if err := checkSweep(flags, o); err != nil {
		return err
	}
	if o.caFile != "" && !bench.IsHTTPS(o.cfg.Target) {
		return errors.New("--ca: it checks the certificate of an https --target, and there is none")
	}
	if err := checkTargetFlags(flags, o); err != nil {
		return err
	}
	if err := refuseEmpty(flags, os.LookupEnv, "bench"); err != nil {
		return err
	}
	// As the server it starts will: $STREAMER_BROKER set but empty is
	// refused now, not once the server has started. (A --target, or the
	// Go API, starts no server.)
	if err := o.serve.broker.resolve(flags, os.LookupEnv); err != nil && o.cfg.Target == "" && o.cfg.API != bench.APIGo {
		return err
	}
	if err := checkGoAPIFlags(flags, o); err != nil {
		return err
	}
	if flags.Changed("request-timeout") && o.cfg.API == bench.APIGo {
		return errors.New("--request-timeout bounds the requests of an http run; with --api go the supervisor's --worker-timeout bounds them")
	}
	if err := o.checkOpenFiles(); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary to start the server: %w", err)
	}
	cfg := o.cfg
	// The server's --auth-token (or its variable or file): the load sends it.
	if cfg.Token, err = o.serve.security.token(os.LookupEnv); err != nil {
		return err
	}
	if cfg.Protocol != bench.ProtocolPredict {
		spec, err := o.serve.spec("")
		if err != nil {
			return err
		}
		if cfg.ModelName, err = o.serve.v2ModelName(spec); err != nil {
			return err
		}
	}
	if o.caFile != "" {
		if cfg.RootCAs, err = readCA("--ca", o.caFile); err != nil {
			return err
		}
	}
	cfg.Progress = !o.jsonOut
	cfg.Stderr = os.Stderr
	cfg.Server = bench.Server{Binary: self, Args: serveArgs(flags), Workers: o.serve.workers}
	if cfg.Token != "" {
		cfg.Server.Env = []string{envAuthToken + "=" + cfg.Token}
	}
	cfg.Supervisor = func() (supervisor.Config, error) {
		spec, err := o.serve.spec("")
		if err != nil {
			return supervisor.Config{}, err
		}
		return o.serve.supervisorConfig(spec, slog.New(slog.DiscardHandler))
	}
	cfg.MaxItems = o.serve.maxItems
	if cfg.MaxQueue = o.serve.maxQueue; cfg.MaxQueue == 0 {
		// The server's default: with a broker, the shared backlog's.
		cfg.MaxQueue = 100 * o.serve.batchSize * o.serve.workers
		if o.serve.broker.url != "" {
			cfg.MaxQueue = 100 * o.serve.batchSize
		}
	}
	if o.serve.plugin == "" {
		cfg.LimitItemsPerS = bench.SleepLimit(o.serve.model, o.serve.workers, o.batchBound(cfg.Input))
	}
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	// Once interrupted, bench only winds down (the closing stats reads, the
	// report, its server's stop): a second interrupt kills it as usual,
	// rather than be swallowed.
	context.AfterFunc(ctx, stopSignals)
	if len(o.sweepClients) > 0 {
		return runSweep(ctx, cfg, o)
	}
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := printReport(res.Report, o.jsonOut); err != nil {
		return err
	}
	// A script reading the exit status must not take it for a measurement.
	return res.Err
}

// checkTargetFlags refuses the serve flags that a --target run would not
// use: they describe a server bench starts, and the target was started with
// its own. What bench does take from them is the token it sends and, to ask
// a v2 target for its model by name, what names the model.
func checkTargetFlags(flags *pflag.FlagSet, o benchOptions) error {
	if o.cfg.Target == "" {
		return nil
	}
	used := map[string]bool{"auth-token": true, "auth-token-file": true}
	if o.cfg.Protocol != bench.ProtocolPredict {
		used["model"], used["model-name"], used["plugin"] = true, true, true
	}
	serveFlags := newServeCommand().Flags()
	var unused []string
	flags.Visit(func(f *pflag.Flag) {
		if serveFlags.Lookup(f.Name) != nil && !used[f.Name] {
			unused = append(unused, "--"+f.Name)
		}
	})
	if len(unused) > 0 {
		return fmt.Errorf("%s: --target drives a server started with flags of its own, and bench would ignore these; it takes only --auth-token (or --auth-token-file) and, with --protocol v2, v2-binary or grpc, --model, --model-name or --plugin to name the model",
			strings.Join(unused, ", "))
	}
	return nil
}

// goAPIFlags are the serve flags a run of --api go uses: those of the
// model and of the supervisor, which it runs in this process.
var goAPIFlags = []string{
	"model", "plugin", "plugin-arg", "plugin-sha256", "device", "intra-op-threads", "ort-lib", "pad",
	"workers", "cuda", "batch-size", "max-latency", "batching", "max-queue", "max-items", "max-batch-bytes",
	"worker-timeout", "init-timeout", "max-restarts", "unavailable-after", "pipeline-depth",
}

// checkGoAPIFlags checks, for --api go, the serve flags as serve does, and
// refuses those the run would ignore: it has no HTTP server, broker, token
// or log of a server's.
func checkGoAPIFlags(flags *pflag.FlagSet, o benchOptions) error {
	if o.cfg.API != bench.APIGo {
		return nil
	}
	serveFlags := newServeCommand().Flags()
	var unused []string
	flags.Visit(func(f *pflag.Flag) {
		if serveFlags.Lookup(f.Name) != nil && !slices.Contains(goAPIFlags, f.Name) {
			unused = append(unused, "--"+f.Name)
		}
	})
	if len(unused) > 0 {
		return fmt.Errorf("%s: --api go runs the supervisor in this process, with no HTTP server, broker, token or log, and would ignore these", strings.Join(unused, ", "))
	}
	return o.serve.checkFlags()
}

// checkSweep checks the sweep flags before anything starts, so that a
// typo late in a list fails at once rather than after the runs before it.
func checkSweep(flags *pflag.FlagSet, o benchOptions) error {
	if len(o.sweepClients) == 0 {
		if flags.Changed("sweep-batching") {
			return errors.New("--sweep-batching goes with --sweep-concurrency; a single run takes --batching")
		}
		return nil
	}
	if o.cfg.Rate != 0 || o.cfg.Target != "" || o.cfg.PlotFile != "" {
		return errors.New("--sweep-concurrency runs closed loops against servers it starts: it takes no --rate, --target or --plot")
	}
	for _, clients := range o.sweepClients {
		if clients < 1 || clients > bench.MaxConcurrency {
			return fmt.Errorf("--sweep-concurrency %d: want 1 to %d clients", clients, bench.MaxConcurrency)
		}
	}
	for _, policy := range o.sweepBatching {
		if policy != string(supervisor.BatchingAdaptive) && policy != string(supervisor.BatchingGreedy) {
			return fmt.Errorf("--sweep-batching %q: want adaptive or greedy", policy)
		}
	}
	return nil
}

// runSweep runs the closed loop at each number of clients under each
// batching policy, each run against a server of its own, and prints one
// table (or one JSON array). A run that fails, or is no measurement (no
// request succeeded, say), fails the sweep once the table is printed; an
// interrupt ends it, and the table holds the runs that completed.
func runSweep(ctx context.Context, cfg bench.Config, o benchOptions) error {
	policies := o.sweepBatching
	if len(policies) == 0 {
		policies = []string{string(o.serve.policy())}
	}
	var rows []bench.SweepRow
	var failed []error
	for _, clients := range o.sweepClients {
		for _, policy := range policies {
			res, err := bench.Run(ctx, sweepRun(cfg, o, clients, policy))
			if ctx.Err() != nil {
				return errors.Join(printSweep(rows, o), fmt.Errorf("interrupted in the run of %d clients, %s; the table holds the runs that completed before it", clients, policy))
			}
			if err != nil {
				return errors.Join(printSweep(rows, o), fmt.Errorf("%d clients, %s: %w", clients, policy, err))
			}
			row := bench.SweepRow{Batching: policy, Clients: clients, ItemsPerRequest: cfg.ItemsPerRequest, Report: res.Report}
			if o.serve.plugin == "" {
				row.BestItemsPerS, row.BestP50MS = bench.SleepBest(o.serve.model, o.serve.workers, o.batchBound(cfg.Input), clients, cfg.ItemsPerRequest)
				row.WithReturn(o.serve.workers)
			}
			rows = append(rows, row)
			if !o.jsonOut {
				fmt.Fprintf(os.Stderr, "streamer bench: %d clients, %s: %.0f items/s, p50 %.2f ms\n", clients, policy, res.Report.ItemsPerS, res.Report.LatencyMS.P50)
			}
			if res.Err != nil {
				failed = append(failed, fmt.Errorf("%d clients, %s: %w", clients, policy, res.Err))
			}
		}
	}
	return errors.Join(printSweep(rows, o), errors.Join(failed...))
}

// sweepRun is the run of a sweep at clients under policy.
func sweepRun(cfg bench.Config, o benchOptions, clients int, policy string) bench.Config {
	run := cfg
	run.Concurrency = clients
	run.Progress = false
	run.Server.Args = append(slices.Clone(cfg.Server.Args), "--batching="+policy)
	serve := o.serve
	serve.batching = policy
	run.Supervisor = func() (supervisor.Config, error) {
		spec, err := serve.spec("")
		if err != nil {
			return supervisor.Config{}, err
		}
		return serve.supervisorConfig(spec, slog.New(slog.DiscardHandler))
	}
	return run
}

// printSweep writes the rows as a table, or a JSON array with --json, to
// stdout; nothing when there are none.
func printSweep(rows []bench.SweepRow, o benchOptions) error {
	switch {
	case len(rows) == 0:
		return nil
	case o.jsonOut:
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	bench.PrintSweep(os.Stdout, o.serve.workers, rows)
	return nil
}

// printReport writes the table, or the JSON object with --json, to stdout.
func printReport(rep bench.Report, jsonOut bool) error {
	if !jsonOut {
		rep.Print(os.Stdout)
		return nil
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// serveArgs turns the serve flags that were set into `streamer serve`
// arguments; bench adds --listen.
func serveArgs(flags *pflag.FlagSet) []string {
	var args []string
	serveFlags := newServeCommand().Flags()
	flags.Visit(func(f *pflag.Flag) {
		// The token goes to the server in its variable (see runBench), out
		// of the process list.
		if f.Name == "listen" || f.Name == "auth-token" || f.Name == "auth-token-file" || serveFlags.Lookup(f.Name) == nil {
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
