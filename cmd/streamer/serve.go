package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/internal/buildinfo"
	"github.com/streamer-dev/streamer/internal/heapfloor"
	"github.com/streamer-dev/streamer/internal/idlemem"
	"github.com/streamer-dev/streamer/ipc"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/plugin"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// serveOptions are the flags of streamer serve.
type serveOptions struct {
	modelGiven       bool // --model was on the command line
	listen           string
	workers          int
	cuda             string
	batchSize        int
	maxLatency       time.Duration
	maxQueue         int
	maxItems         int
	maxBatchBytes    int
	maxBody          int64
	readTimeout      time.Duration
	writeTimeout     time.Duration
	idleTimeout      time.Duration
	maxConnections   int
	allowOrigins     []string
	memoryLimit      string
	workerTimeout    time.Duration
	initTimeout      time.Duration
	grace            time.Duration
	maxRestarts      int
	unavailableAfter time.Duration
	pipeline         int
	logFormat        string
	logLevel         string
	pprof            string
	grpcListen       string
	admin            bool

	model          string
	v2Name         string
	plugin         string
	pluginArgs     []string
	pluginSHA256   string
	device         string
	intraOpThreads int
	batching       string
	ortLib         string
	pad            []string

	broker   brokerOptions
	security securityOptions
}

func newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a model over HTTP with dynamic batching",
		Long: `Serve starts one supervisor process that owns the request queue and forms
batches, and --workers child processes that each run the model. Child i gets
CUDA_VISIBLE_DEVICES set to the (i mod n)-th entry of --cuda.`,
		Example: `  streamer serve --model sleep:10ms,100us --workers 4 --cuda 0,1 --batch-size 64
  streamer serve --plugin ./bin/fillmask --workers 2
  streamer serve --model model.onnx --device cuda --cuda 0,1,2,3 --workers 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if log, err := o.logger(stderrLog); err == nil && o.logFormat == "json" {
				// From the first check on, the error the server
				// exits with is JSON, as its log is.
				exitLog.Store(log)
			}
			if err := refuseEmpty(cmd.Flags(), os.LookupEnv, "serve"); err != nil {
				return err
			}
			if err := o.broker.resolve(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			o.modelGiven = cmd.Flags().Changed("model")
			return runServe(cmd.Context(), o)
		},
	}
	addServeFlags(cmd, &o)
	return cmd
}

func addServeFlags(cmd *cobra.Command, o *serveOptions) {
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:5005", "address the HTTP API listens on")
	f.StringVar(&o.grpcListen, "grpc-listen", "", "also serve the Open Inference Protocol (KServe v2) over gRPC on this address, as Triton's and KServe's gRPC clients call it (off when empty); the same model, token, certificate and limits as the HTTP API")
	intVar(f, &o.workers, "workers", 1, "number of worker processes, at most 1024 (0: a front end only, with --broker)")
	f.StringVar(&o.cuda, "cuda", "", "comma-separated GPU ids handed round-robin to the workers as CUDA_VISIBLE_DEVICES (unset: the variable passes through)")
	intVar(f, &o.batchSize, "batch-size", 64, "most items in one batch (1 to 65536)")
	f.DurationVar(&o.maxLatency, "max-latency", 100*time.Millisecond, "longest an item waits for batch-mates (with every worker busy; or, under --batching adaptive, while an idle worker waits a little for a fuller batch)")
	intVar(f, &o.maxQueue, "max-queue", 0, "most items waiting; beyond it requests get 429 (0: 100 × batch-size × workers); with --broker, the bound of the shared backlog in Redis (0: 100 × batch-size, on every process alike)")
	intVar(f, &o.maxItems, "max-items", 4096, "most items in one request; more (or more than --max-queue) gets 413")
	intVar(f, &o.maxBatchBytes, "max-batch-bytes", 64<<20, "most encoded item bytes in one batch; an item larger gets 413 (must fit the pipe's frame limit of 256 MiB)")
	intVar(f, &o.maxBody, "max-body", 8<<20, "largest request body in bytes; larger gets 413")
	f.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a whole request, headers and body (a slower one gets 408, or is closed while still sending headers, 10s at most)")
	f.DurationVar(&o.writeTimeout, "write-timeout", 30*time.Second, "longest a client may take to read its answer once it is ready (not counting the wait for the model)")
	f.DurationVar(&o.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection is kept open")
	intVar(f, &o.maxConnections, "max-connections", 4096, "most client connections open at once; one more takes the place of the connection idle longest (for 1s at least: between requests, or before its first), or with none is answered 503 and closed; as many gRPC connections on --grpc-listen, counted apart and reclaimed alike")
	f.StringArrayVar(&o.allowOrigins, "allow-origin", nil, "a browser origin (scheme://host[:port], or * for any) whose pages may call the API (repeatable); requests with any other Origin header get 403")
	f.StringVar(&o.memoryLimit, "memory-limit", "", "soft limit on this supervisor process's Go memory (e.g. 2GiB; at least 16MiB): the collector works harder as it nears it (unset: none; memory is given back anyway once the server is idle after a burst)")
	f.DurationVar(&o.workerTimeout, "worker-timeout", 20*time.Second, "a batch running longer kills its worker (counted as a crash)")
	f.DurationVar(&o.initTimeout, "init-timeout", 2*time.Minute, "longest a worker may take to start and initialise its model")
	f.DurationVar(&o.grace, "grace", 30*time.Second, "on SIGTERM, how long admitted requests may take to finish before the rest are failed (a second SIGTERM or SIGINT exits at once)")
	intVar(f, &o.maxRestarts, "max-restarts", 10, "restarts of one slot within a minute; a death past them gives the slot up (deaths a bad item explains, while the model answers other items, do not count); when every slot is given up the server exits 1")
	f.DurationVar(&o.unavailableAfter, "unavailable-after", time.Second, "with no worker able to run for this long, new requests get 503 at once (and queued ones too unless a worker is starting)")
	lowerVar(f, &o.batching, "batching", "", "when an idle worker starts a batch that is not full: adaptive (waits a little for arriving items when its measured batch cost says a fuller batch pays) or greedy (at once) (default: adaptive)")
	intVar(f, &o.pipeline, "pipeline-depth", 2, "most batches one worker holds: the one it runs and those formed ahead, 1 to 1024 (raise it for very fast models)")
	lowerVar(f, &o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "least severe log lines written: debug, info, warn or error")
	f.StringVar(&o.pprof, "pprof", "", "serve Go's profiles (/debug/pprof/) of this supervisor process on this address, apart from the API (off when empty; keep it on loopback)")

	f.StringVar(&o.model, "model", "echo", "model to serve: demo (a small ONNX classifier, built in), echo, sleep:FIXED,PER_ITEM, chaos:OPTS (tests), or a path to an .onnx file")
	f.StringVar(&o.v2Name, "model-name", "", "the model's name on the Open Inference Protocol routes, /v2/models/NAME (default: the built-in's name, the ONNX file's base name without .onnx, or the plugin binary's base name)")
	f.StringVar(&o.plugin, "plugin", "", "path to a model plugin binary, served in place of --model")
	f.StringArrayVar(&o.pluginArgs, "plugin-arg", nil, "key=value setting passed to the plugin's Init (repeatable)")
	f.StringVar(&o.pluginSHA256, "plugin-sha256", "", "refuse a plugin binary whose SHA-256 (hex) differs")
	lowerVar(f, &o.device, "device", "cpu", "where the model runs: cpu or cuda (device 0 of the worker's CUDA_VISIBLE_DEVICES)")
	intVar(f, &o.intraOpThreads, "intra-op-threads", 0, "threads one worker uses inside a batch (ONNX; 0: runtime default; at most 1024); keep workers × threads ≤ cores")
	f.StringVar(&o.ortLib, "ort-lib", "", "path to the ONNX Runtime shared library (default: $STREAMER_ORT_LIB, third_party/onnxruntime, then the system)")
	f.StringArrayVar(&o.pad, "pad", nil, "INPUT=VALUE: pad that ONNX input's dynamic axes with VALUE (a number, or -inf, inf, nan) so items of different lengths share a batch (repeatable)")
	addBrokerFlags(f, &o.broker)
	addSecurityFlags(f, &o.security)
	addAdminFlags(f, &o.admin)
}

// spec turns the model flags into the Spec every worker opens. socketDir
// is where a plugin's private socket directory goes (empty: not made yet).
func (o serveOptions) spec(socketDir string) (model.Spec, error) {
	if o.device != "cpu" && o.device != "cuda" {
		return model.Spec{}, fmt.Errorf("--device %q: want cpu or cuda", o.device)
	}
	if o.plugin != "" {
		switch {
		case len(o.pad) > 0:
			return model.Spec{}, errors.New("--pad is for ONNX models: a plugin pads its own inputs")
		case o.intraOpThreads != 0:
			return model.Spec{}, errors.New("--intra-op-threads is for ONNX models: a plugin sets its own threads")
		case o.ortLib != "":
			return model.Spec{}, errors.New("--ort-lib is for ONNX models: a plugin loads its own libraries")
		}
		return o.pluginSpec(socketDir)
	}
	pad, err := keyValues("--pad", "INPUT=NUMBER", o.pad, func(v string) (float64, error) {
		return strconv.ParseFloat(v, 64)
	})
	if err != nil {
		return model.Spec{}, err
	}
	spec, err := load.Parse(o.model, onnx.Settings{
		Device:         o.device,
		IntraOpThreads: o.intraOpThreads,
		Library:        o.ortLib,
		Pad:            pad,
	})
	if err != nil {
		return model.Spec{}, fmt.Errorf("--model: %w", err)
	}
	if spec.Runner != onnx.SpecRunner {
		// Taken for set, these would be ignored without a word.
		switch {
		case len(o.pad) > 0:
			return model.Spec{}, fmt.Errorf("--pad is for ONNX models, and --model %s is a built-in one with no inputs to pad", o.model)
		case o.device != "cpu":
			return model.Spec{}, fmt.Errorf("--device %s is for ONNX models and plugins, and --model %s is a built-in one that runs on the CPU", o.device, o.model)
		case o.intraOpThreads != 0:
			return model.Spec{}, fmt.Errorf("--intra-op-threads is for ONNX models, and --model %s is a built-in one", o.model)
		case o.ortLib != "":
			return model.Spec{}, fmt.Errorf("--ort-lib is for ONNX models, and --model %s is a built-in one", o.model)
		}
	}
	return spec, nil
}

// modelName is the model as the command line named it, for logs.
func (o serveOptions) modelName() string {
	if o.plugin != "" {
		return "plugin " + o.plugin
	}
	return o.model
}

func (o serveOptions) pluginSpec(socketDir string) (model.Spec, error) {
	args, err := keyValues("--plugin-arg", "key=value", o.pluginArgs, func(v string) (string, error) { return v, nil })
	if err != nil {
		return model.Spec{}, err
	}
	return plugin.Settings{
		Path:      o.plugin,
		Args:      args,
		Device:    o.device,
		SHA256:    o.pluginSHA256,
		SocketDir: socketDir,
		// Nine tenths of the worker's start: the plugin's own error,
		// which says what the binary did, comes before the worker's
		// init timeout, which would say only that it was opening.
		StartTimeout: plugin.Duration(o.initTimeout - o.initTimeout/10),
	}.Spec()
}

// keyValues reads repeated key=value flags into a map (nil when none).
func keyValues[V any](flag, want string, pairs []string, parse func(string) (V, error)) (map[string]V, error) {
	var m map[string]V
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		value, err := parse(v)
		if !ok || k == "" || err != nil {
			return nil, fmt.Errorf("%s %q: want %s", flag, kv, want)
		}
		if _, twice := m[k]; twice {
			return nil, fmt.Errorf("%s %q: %s is given twice", flag, kv, k)
		}
		if m == nil {
			m = map[string]V{}
		}
		m[k] = value
	}
	return m, nil
}

// checkModel checks spec before any worker starts. The runners' errors
// name the setting that is wrong; where a flag sets it under another name,
// the flag is added.
func (o serveOptions) checkModel(spec model.Spec) error {
	err := load.Check(spec)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, onnx.ErrNoLibrary) || errors.Is(err, onnx.ErrBadLibrary):
		return fmt.Errorf("%w (streamer serve takes the library's path with --ort-lib)", err)
	case spec.Runner == plugin.Runner:
		return fmt.Errorf("--plugin %s: %w", o.plugin, err)
	}
	return err
}

func (o serveOptions) logger(w io.Writer) (*slog.Logger, error) {
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		// Durations as Go writes them ("30s"), as the text format does,
		// not as integer nanoseconds.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
}

// pid1Warning is what the server warns of when it runs as pid, with
// plugin: as a container's first process (pid 1), every orphan of the
// machine's namespace becomes its child, and the processes a plugin leaves
// behind when it dies (its children, a shell wrapper's) stay zombies, for
// serve reaps its own workers alone. "" for nothing to warn of.
func pid1Warning(pid int, plugin string) string {
	if pid != 1 || plugin == "" {
		return ""
	}
	return "running as process 1 with a plugin: processes the plugin leaves behind as it dies are not reaped, and stay zombies; run streamer under an init that reaps them (docker run --init, tini as the container's entrypoint, or shareProcessNamespace in a Kubernetes pod)"
}

// warnOpenFiles warns when this process may open fewer files than its
// connections and workers take at their bounds: --max-connections (on the
// gRPC port as many again), a dozen pipes and files for each worker, and
// some for the rest. Past the limit, a new connection waits in the kernel
// unanswered, not even told 503, and a worker that dies cannot be started
// again until clients leave.
func (o serveOptions) warnOpenFiles(log *slog.Logger) {
	limit, ok := openFilesLimit()
	if !ok {
		return
	}
	connections := uint64(o.maxConnections)
	if o.grpcListen != "" {
		connections *= 2
	}
	need := connections + 12*uint64(o.workers) + 64
	if limit < need {
		log.Warn("the open-files limit is below what --max-connections and the workers take: past it, new connections wait unanswered (no 503) and dead workers cannot be restarted until clients leave; raise the limit (ulimit -n, systemd's LimitNOFILE=) or lower --max-connections",
			"open_files_limit", limit, "needs", need, "max_connections", o.maxConnections, "workers", o.workers)
	}
}

// policy is the batching policy --batching names; unset, adaptive, on a
// node fed through Redis too (BenchmarkClosedLoop in package broker: at 8
// and 64 clients it is at least as good as greedy there).
func (o serveOptions) policy() supervisor.Batching {
	if o.batching != "" {
		return supervisor.Batching(o.batching)
	}
	return supervisor.BatchingAdaptive
}

// checkQueueFlags refuses the batching and queue flags' values that no
// server could use. A front end (--workers 0) checks them as a local server
// does: some mean nothing to it, but a value it takes must not be one a
// local server refuses.
func (o serveOptions) checkQueueFlags() error {
	if o.batchSize < 1 || o.batchSize > supervisor.MaxBatchSize {
		return fmt.Errorf("--batch-size %d: want 1 to %d", o.batchSize, supervisor.MaxBatchSize)
	}
	if o.maxQueue < 0 {
		return fmt.Errorf("--max-queue %d: must not be negative", o.maxQueue)
	}
	if o.maxBatchBytes < 1 {
		return fmt.Errorf("--max-batch-bytes %d: want at least 1", o.maxBatchBytes)
	}
	if fits := supervisor.BatchBytesFit(o.batchSize, 0); fits < 1 {
		return fmt.Errorf("--batch-size %d: a batch that large cannot fit the worker pipe's frame limit of %d MiB", o.batchSize, ipc.DefaultMaxFrame>>20)
	} else if o.maxBatchBytes > fits {
		return fmt.Errorf("--max-batch-bytes %d does not fit the pipe's frame limit of %d MiB: a batch of %d items (--batch-size) may carry at most %d bytes", o.maxBatchBytes, ipc.DefaultMaxFrame>>20, o.batchSize, fits)
	}
	if o.maxItems < 1 {
		return fmt.Errorf("--max-items %d: want at least 1", o.maxItems)
	}
	if b := o.policy(); b != supervisor.BatchingAdaptive && b != supervisor.BatchingGreedy {
		return fmt.Errorf("--batching %q: want adaptive or greedy", o.batching)
	}
	_, err := o.cudaDevices()
	return err
}

// cudaDevices are the GPU ids --cuda lists, or nil.
func (o serveOptions) cudaDevices() ([]string, error) {
	if o.cuda == "" {
		return nil, nil
	}
	var cuda []string
	for _, id := range strings.Split(o.cuda, ",") {
		if id = strings.TrimSpace(id); id == "" {
			return nil, fmt.Errorf("--cuda %q: empty device id", o.cuda)
		}
		cuda = append(cuda, id)
	}
	return cuda, nil
}

// supervisorConfig builds the streamer's configuration from the flags.
func (o serveOptions) supervisorConfig(spec model.Spec, log *slog.Logger) (supervisor.Config, error) {
	if o.workers < 1 {
		return supervisor.Config{}, fmt.Errorf("--workers %d: want at least 1, or 0 for a front end alone (with --broker)", o.workers)
	}
	if err := o.checkQueueFlags(); err != nil {
		return supervisor.Config{}, err
	}
	cuda, err := o.cudaDevices()
	if err != nil {
		return supervisor.Config{}, err
	}
	return supervisor.Config{
		BatchSize:        o.batchSize,
		MaxLatency:       o.maxLatency,
		MaxQueue:         o.maxQueue,
		MaxItems:         o.maxItems,
		MaxBatchBytes:    o.maxBatchBytes,
		Workers:          o.workers,
		WorkerTimeout:    o.workerTimeout,
		InitTimeout:      o.initTimeout,
		MaxRestarts:      o.maxRestarts,
		UnavailableAfter: o.unavailableAfter,
		PipelineDepth:    o.pipeline,
		Batching:         o.policy(),
		Logger:           log,
		Process: supervisor.ProcessConfig{
			// No Path: workers run this very build, even once an upgrade
			// replaced the binary on disk.
			Args:        []string{"worker"},
			Model:       spec,
			Refresh:     load.Refresh,
			CUDADevices: cuda,
		},
	}, nil
}

func runServe(ctx context.Context, o serveOptions) error {
	// A reader of the log that goes away (a `| tee` that died, a log
	// shipper restarted) must not end the server, and the requests it has
	// taken with it: with SIGPIPE caught, a line written to a closed stdout
	// or stderr is lost with EPIPE, where Go's default is to die of it.
	// Caught rather than ignored, which workers would inherit.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if err := o.checkFlags(); err != nil {
		return err
	}
	log, err := o.logger(stderrLog)
	if err != nil {
		return err
	}
	stderrLog.setNotice(func(dropped int) {
		log.Warn("log lines dropped: the reader of the server's stderr fell behind", "dropped", dropped)
	})
	// Before the first line: a supervisor that sends SIGHUP once the
	// server speaks must not end it.
	hangups := catchHangups(log)
	defer hangups.stop()
	// Before any worker starts: they must not inherit its socket, nor the
	// descriptors the server inherited.
	keepInheritedToItself()
	manager := notifyService(log)
	hangups.tell(manager)
	o.warnOpenFiles(log)
	if warning := pid1Warning(os.Getpid(), o.plugin); warning != "" {
		log.Warn(warning)
	}
	heapfloor.Keep()
	guard, err := o.security.prepare(os.LookupEnv, log)
	if err != nil {
		return err
	}
	// Read now, and kept from the environment that workers, and their
	// plugins, inherit: a model has no use for the API's token or Redis's
	// password, and a plugin that logs its environment would put them in
	// the server's log.
	for _, secret := range []string{envAuthToken, envBroker} {
		_ = os.Unsetenv(secret)
	}
	hangups.reloadFiles(guard)
	guard.watch(ctx)
	if err := o.checkRoles(guard); err != nil {
		return err
	}
	m, err := o.loadModel(log)
	if m.socketDir != "" {
		// Deferred first, so it runs last: after the workers, and their
		// plugins, have stopped.
		defer func() {
			_ = os.RemoveAll(m.socketDir)
			m.unlockSocketDir()
		}()
	}
	if err != nil {
		return err
	}
	// A front end's model, read again at each SIGHUP; a node's is its
	// workers'.
	front := newLiveSpec(m.spec)
	st, remote, err := o.backends(m, front, log)
	if err != nil {
		return err
	}
	var models specSource = front
	if st != nil {
		models = st
	}
	var backend httpapi.Backend = st
	if remote != nil {
		backend = remote.backend()
		if st != nil {
			// Before the workers load the model, which may take
			// minutes: a URL Redis refuses is said now.
			if err := remote.check(ctx); err != nil {
				return err
			}
		}
	}
	listener, err := o.openListener(guard, log)
	if err != nil {
		return err
	}
	defer listener.Close()
	if o.pprof != "" {
		profiles, err := serveProfiles(o.pprof, log)
		if err != nil {
			return err
		}
		defer profiles.Close()
	}

	// What a second signal does before it ends the process, which skips
	// the deferred removal of the plugins' socket folder.
	lastWords := func() {
		if m.socketDir != "" {
			_ = os.RemoveAll(m.socketDir)
		}
	}
	ctx, stop := stopOnSignals(ctx, lastWords)
	defer stop()

	// Serve from the start: while the workers initialise, /readyz says 503
	// and requests get a quick 503 instead of waiting on a silent socket.
	api := httpapi.New(httpapi.Config{
		Backend: backend, Codec: m.codec, MaxBody: o.maxBody, Logger: log, Model: servedDescription(m.info, models),
		WriteTimeout: o.writeTimeout, AllowedOrigins: o.allowOrigins,
		Admin: adminFor(o.admin, st, manager, o.servingStatus(st, remote != nil)), Tensors: m.tensors,
		MaxBatchSize: o.batchSize, MaxQueueDelay: o.maxLatency, MaxItems: o.maxItems,
		Metrics: collectors{listener, guard, stderrLog},
	})
	grpcAPI, err := o.openGRPC(api, guard, &listener.grpc, log)
	if err != nil {
		return err
	}
	stopping := &drainer{listener: listener, grpc: grpcAPI, grace: o.grace, writeTimeout: o.writeTimeout, log: log, stops: stopsOf(st, remote), hangups: hangups, manager: manager,
		started: time.Now()}
	server := o.httpServer(stopping.wrap(guard.protect(api)), log)
	server.ConnState = listener.track
	serveErr := make(chan error, 1)
	go func() { serveErr <- server.Serve(listener) }()
	if st == nil {
		log.Info("listening; a front end, with no workers of its own", "listen", listener.Addr().String(), "model", o.modelName(), "version", buildinfo.Line())
		manager.starting("starting: a front end, joining Redis", 0)
	} else {
		log.Info("listening; starting workers", "listen", listener.Addr().String(), "model", o.modelName(), "workers", o.workers, "cuda", o.cuda, "version", buildinfo.Line())
		// A worker has --init-timeout to load the model; the start ends
		// once the first is ready, or when every one failed.
		manager.starting(fmt.Sprintf("starting: %d workers load the model %s", o.workers, o.modelName()), o.initTimeout+startSlack)
	}
	var fatal <-chan error
	if st != nil {
		if err := st.Start(ctx); err != nil {
			if ctx.Err() != nil {
				log.Info("signal received while starting: stopping")
				return stopping.drain(server)
			}
			return errors.Join(fmt.Errorf("start workers: %w", err), stopping.drain(server))
		}
		fatal = st.Fatal()
	}
	if remote != nil {
		if err := remote.start(ctx, log); err != nil {
			return errors.Join(err, stopping.drain(server))
		}
	}
	serving := o.servingStatus(st, remote != nil)
	hangups.serve(ctx, st, front, serving, o.reloadTakes(st))
	log.Info("serving")
	manager.ready(serving())
	var work statser = backend
	if remote != nil && st != nil {
		work = nodeWork{callers: backend, workers: st}
	}
	go idlemem.Release(ctx, serverProgress(work), log)
	// Through the drain too, which may take longer than the watchdog.
	alive := make(chan struct{})
	defer close(alive)
	go manager.keepAlive(alive, func() { work.Stats() })
	runErr := o.awaitEnd(ctx, fatal, serveErr, grpcAPI.failed(), log)
	return errors.Join(runErr, stopping.drain(server))
}

// stopOnSignals is ctx, canceled at the first SIGTERM or SIGINT, which
// begins the drain. The second ends the process at once, after lastWords,
// as that signal ends a process by default: the drain is cut short, and
// the workers, and their plugins, die with the server (see supervisor's
// parent-death signal). Both are caught from the start, so that two sent
// back to back are two. stop ends the watch; the signals that come after
// it are ignored, as the process ends.
func stopOnSignals(parent context.Context, lastWords func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() {
		for first := true; ; first = false {
			select {
			case <-done:
				return
			case sig := <-signals:
				if first {
					cancel()
					continue
				}
				exitBy(sig.(syscall.Signal), lastWords)
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			close(done)
			cancel()
		})
	}
}

// exitBy ends the process as sig does by default, after lastWords. The
// signal is raised again with its default action back; should it be
// ignored (a server started in the background by a shell that ignores
// SIGINT), the process exits all the same, with the shell's status for
// it, 128 and its number.
func exitBy(sig syscall.Signal, lastWords func()) {
	lastWords()
	signal.Reset(syscall.SIGTERM, syscall.SIGINT)
	if self, err := os.FindProcess(os.Getpid()); err == nil && self.Signal(sig) == nil {
		// Delivered to another of the process's threads, maybe: it ends
		// the process meanwhile.
		time.Sleep(time.Second)
	}
	os.Exit(128 + int(sig))
}

// startSlack is how much longer than --init-timeout a start may take:
// its workers' launch, and a node's first reads of Redis.
const startSlack = 30 * time.Second

// servingStatus is the line the service manager shows while the server
// serves, with st's workers as they are when it is read.
func (o serveOptions) servingStatus(st *supervisor.Streamer, redis bool) func() string {
	return func() string {
		switch {
		case st == nil:
			return "serving: a front end for the model " + o.modelName() + ", through Redis"
		case redis:
			return fmt.Sprintf("serving: the model %s on %d workers, a node of Redis", o.modelName(), st.Workers())
		}
		return fmt.Sprintf("serving: the model %s on %d workers", o.modelName(), st.Workers())
	}
}

// reloadTakes is the longest a reload of st may take: it replaces the
// workers one after another, each of which has --init-timeout to load the
// model. Nil for a front end, which reloads no workers.
func (o serveOptions) reloadTakes(st *supervisor.Streamer) func() time.Duration {
	if st == nil {
		return nil
	}
	return func() time.Duration { return time.Duration(st.Workers())*o.initTimeout + startSlack }
}

// httpServer is the server of the API's handler, with the flags' bounds.
func (o serveOptions) httpServer(handler http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: min(10*time.Second, o.readTimeout),
		MaxHeaderBytes:    maxHeaderBytes,
		// The handler lifts this deadline once the body is in, so that it
		// bounds the sending of a request and not the wait for its answer.
		ReadTimeout: o.readTimeout,
		IdleTimeout: o.idleTimeout,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// awaitEnd serves until a signal (ctx ends: then a second one ends the
// process at once, see stopOnSignals), every worker slot failing (fatal),
// or the HTTP server failing; it returns the error of the last two.
func (o serveOptions) awaitEnd(ctx context.Context, fatal, serveErr, grpcErr <-chan error, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("signal received: draining (a second signal exits at once)", "grace", o.grace)
		return nil
	case err := <-fatal:
		log.Error("every worker slot has failed; exiting so an orchestrator can take over", "err", err)
		return err
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	case err := <-grpcErr:
		return fmt.Errorf("gRPC server: %w", err)
	}
}

// checkRoles refuses flags that contradict the server's role: admin
// endpoints without a token, or on a front end that has no workers.
func (o serveOptions) checkRoles(guard *security) error {
	if o.admin && guard.token == nil {
		return errors.New("--admin needs --auth-token (or $" + envAuthToken + ", or --auth-token-file): whoever reaches the admin endpoints can reload and scale the workers")
	}
	if err := o.broker.check(); err != nil {
		return err
	}
	if o.admin && o.workers == 0 {
		return errors.New("--admin needs workers of this server's own (--workers > 0): a front end has none to reload or scale")
	}
	return nil
}

// servedModel is the model as the server serves it: how its workers
// start, how HTTP bodies are read into items, and what it says of it.
type servedModel struct {
	spec      model.Spec
	codec     httpapi.Codec
	info      any
	tensors   httpapi.TensorModel
	socketDir string // a plugin's sockets, removed once the server stops; "" for none

	unlockSocketDir func() // lets another server sweep socketDir (see plugin.LockDir)
}

// loadModel checks the model the flags name and prepares its codecs. A
// plugin's socket folder, once made, is in the result even on an error,
// for the caller to remove.
func (o serveOptions) loadModel(log *slog.Logger) (servedModel, error) {
	var m servedModel
	spec, err := o.spec("")
	if err != nil {
		return m, err
	}
	if err := o.checkModel(spec); err != nil {
		return m, err
	}
	if o.plugin != "" && o.workers > 0 {
		// A front end (no workers) starts no plugin: it has no sockets.
		if m.socketDir, m.unlockSocketDir, err = makeSocketDir(log); err != nil {
			return m, err
		}
		if spec, err = o.spec(m.socketDir); err != nil {
			return m, err
		}
	}
	m.spec = spec
	if m.codec, m.info, err = codecFor(spec, o.modelName()); err != nil {
		return m, err
	}
	announceModel(m.info, o.batchSize, o.maxLatency, log)
	if !o.modelGiven && o.plugin == "" && o.workers > 0 {
		// Most likely a command line that lost its --model.
		log.Warn("no --model: serving the built-in echo model, which answers each item with itself")
	}
	v2Name, err := o.v2ModelName(spec)
	if err != nil {
		return m, err
	}
	m.tensors, err = tensorsFor(spec, m.codec, v2Name)
	return m, err
}

// backends makes what serves the requests: the local supervisor of the
// server's own workers (none on a front end), and with --broker the parts
// that talk to Redis. Neither is started.
func (o serveOptions) backends(m servedModel, front *liveSpec, log *slog.Logger) (*supervisor.Streamer, *brokerParts, error) {
	if o.workers == 0 && o.broker.url == "" {
		return nil, nil, errNoBroker
	}
	var st *supervisor.Streamer
	if o.workers != 0 || o.broker.url == "" {
		cfg, err := o.supervisorConfig(m.spec, log)
		if err != nil {
			return nil, nil, err
		}
		if st, err = supervisor.New(cfg); err != nil {
			return nil, nil, err
		}
	} else if err := o.checkQueueFlags(); err != nil {
		// A front end alone has no supervisor, but refuses what one would.
		return nil, nil, err
	}
	if o.broker.url == "" {
		return st, nil, nil
	}
	var models specSource = front
	if st != nil {
		models = st
	}
	remote, err := o.brokerParts(st, models, modelID(m.spec, m.info, o.plugin, o.modelName()), log)
	if err != nil {
		return nil, nil, err
	}
	return st, remote, nil
}

// openListener sets the memory limit, and listens
// on --listen, capped at --max-connections, through TLS when asked.
func (o serveOptions) openListener(guard *security, log *slog.Logger) (*cappedListener, error) {
	if limit, err := o.memoryLimitBytes(); err != nil {
		return nil, err
	} else if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	tcpListener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	return &cappedListener{Listener: guard.listener(tcpListener), max: int64(o.maxConnections), log: log}, nil
}

// stopsOf are the shutdowns of a drain in order: the broker's parts (see
// brokerParts.stops), then the local workers.
func stopsOf(st *supervisor.Streamer, remote *brokerParts) []func(context.Context) error {
	var stops []func(context.Context) error
	if remote != nil {
		stops = append(stops, remote.stops()...)
	}
	if st == nil {
		return stops
	}
	left := "the items left were answered 503"
	if remote != nil {
		left = "the items left go to other nodes, which claim them after --claim-idle"
	}
	return append(stops, func(ctx context.Context) error {
		if err := st.Shutdown(ctx); err != nil {
			return fmt.Errorf("the workers: %w; %s", err, left)
		}
		return nil
	})
}

// drainer stops the server on a signal without leaving a request that
// reached it unanswered.
type drainer struct {
	// stops run in order: the front end, the node, the local supervisor.
	stops    []func(context.Context) error
	hangups  *hangups // told first that the drain has begun
	listener *cappedListener
	grpc     *grpcServer // nil without --grpc-listen
	grace    time.Duration
	// writeTimeout bounds the writing of every answer (see wrap).
	writeTimeout time.Duration
	log          *slog.Logger
	manager      *serviceManager // told as the drain begins
	draining     atomic.Bool
	started      time.Time // when the server began to listen
}

// writeDeadliner is net/http's HTTP/1 ResponseWriter as
// http.ResponseController uses it; asserting it costs no allocation.
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// wrap makes every answer given while draining close its connection, so
// that clients move off a server that is going away. And it bounds the
// writing of every answer by --write-timeout from the request's start:
// the API re-arms the bound as it writes an answer it waited for (the
// model's), but the answers given at once (the status page, a 401, a
// preflight's 204, /metrics) are written here and nowhere else, and a
// client that pipelines requests and never reads would hold its
// connection, and its place under --max-connections, for good.
func (d *drainer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		if wd, ok := w.(writeDeadliner); ok && d.writeTimeout > 0 {
			_ = wd.SetWriteDeadline(time.Now().Add(d.writeTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// Quiet period and bound of the last phase of a drain: new connections are
// answered 503 until none has come for drainQuiet, or for drainQuietMax.
const (
	drainQuiet    = 100 * time.Millisecond
	drainQuietMax = 2 * time.Second
)

// drain stops admitting work, lets admitted requests finish within grace,
// and stops the workers; meanwhile requests get 503 with Connection: close,
// on connections open or new. Then new connections are still answered 503
// until they stop coming, and only then does the listener close, along with
// the connections left idle, and the process waits for the refusals under
// way. Idle connections are not closed at the start:
// a request racing the close of its connection would get no answer at all.
// A SIGHUP from the start of the drain on reloads no worker (see hangups),
// and ends nothing.
func (d *drainer) drain(server *http.Server) error {
	d.hangups.drain()
	d.draining.Store(true)
	d.manager.stopping("stopping: answering what was admitted, then stopping the workers")
	ctx, cancel := context.WithTimeout(context.Background(), d.grace)
	defer cancel()
	for _, stop := range d.stops {
		if err := stop(ctx); err != nil {
			msg := "drain did not finish within the grace period"
			if ctx.Err() == nil {
				msg = "drain could not finish" // the error says why
			}
			d.log.Warn(msg, "err", err)
		}
	}
	// Every admitted item is answered by now: handlers only have their
	// responses left to write, and new requests get 503.
	d.listener.quiesce(drainQuiet, drainQuietMax)
	httpCtx, httpCancel := context.WithTimeout(context.Background(), time.Second)
	defer httpCancel()
	if err := server.Shutdown(httpCtx); err != nil {
		_ = server.Close()
	}
	d.grpc.stop(time.Second)
	d.listener.awaitRefusals()
	d.log.Info("stopped", "uptime", time.Since(d.started).Round(time.Second).String())
	return nil
}

// checkFlags refuses, before anything starts, the values of flags that
// no server could use, and flags given where they mean nothing. Without
// it, a value of zero or less of several was taken for "the default", so
// --max-latency 0 waited 100ms and --max-restarts 0 allowed 10, and a
// --plugin-sha256 without --plugin was ignored without a word.
func (o serveOptions) checkFlags() error {
	if _, err := o.memoryLimitBytes(); err != nil {
		return err
	}
	positive := []struct {
		flag  string
		value time.Duration
	}{
		{"--max-latency", o.maxLatency},
		{"--worker-timeout", o.workerTimeout},
		{"--init-timeout", o.initTimeout},
		{"--unavailable-after", o.unavailableAfter},
		{"--read-timeout", o.readTimeout},
		{"--write-timeout", o.writeTimeout},
		{"--idle-timeout", o.idleTimeout},
	}
	for _, p := range positive {
		if p.value <= 0 {
			return fmt.Errorf("%s %s: want a positive duration", p.flag, p.value)
		}
	}
	switch {
	case o.listen == "":
		return errors.New("--listen is empty: give the address to listen on, as host:port (an empty one would listen on every interface, on a port picked at random)")
	case o.workers > httpapi.MaxAdminWorkers:
		return fmt.Errorf("--workers %d: want at most %d", o.workers, httpapi.MaxAdminWorkers)
	case o.grace < 0:
		return fmt.Errorf("--grace %s: must not be negative", o.grace)
	case o.pipeline < 1 || o.pipeline > supervisor.MaxPipelineDepth:
		return fmt.Errorf("--pipeline-depth %d: want 1 to %d", o.pipeline, supervisor.MaxPipelineDepth)
	case o.maxRestarts < 1:
		return fmt.Errorf("--max-restarts %d: want at least 1", o.maxRestarts)
	case o.maxBody < 1:
		return fmt.Errorf("--max-body %d: want at least 1", o.maxBody)
	case o.maxConnections < 1:
		return fmt.Errorf("--max-connections %d: want at least 1", o.maxConnections)
	case o.intraOpThreads < 0 || o.intraOpThreads > maxIntraOpThreads:
		return fmt.Errorf("--intra-op-threads %d: want 0 (the runtime's default) to %d", o.intraOpThreads, maxIntraOpThreads)
	}
	for _, origin := range o.allowOrigins {
		if err := checkOrigin(origin); err != nil {
			return fmt.Errorf("--allow-origin %q: %w", origin, err)
		}
	}
	if err := checkListenAddrs([][2]string{{"--listen", o.listen}, {"--grpc-listen", o.grpcListen}, {"--pprof", o.pprof}}); err != nil {
		return err
	}
	if o.plugin == "" && (o.pluginSHA256 != "" || len(o.pluginArgs) > 0) {
		return errors.New("--plugin-sha256 and --plugin-arg need --plugin: they are the plugin's, and there is none")
	}
	if o.plugin != "" && o.modelGiven {
		// One of them would be ignored: the plugin is the model.
		return fmt.Errorf("--model %q and --plugin both given: a plugin is the model it serves; give one of them", o.model)
	}
	return nil
}

// emptyRefused are the flags whose value, given empty (most likely a shell
// variable that is not set), would quietly serve other than asked: the
// echo model that answers each item with itself, no token, no checksum, no
// broker, plain HTTP. Each says what to give instead. Those whose empty
// value is their default (--cuda, --ort-lib, --model-name), or whose help
// says "off when empty", are not among them.
var emptyRefused = []struct{ flag, instead string }{
	{"model", "give a model, or leave the flag out to serve the built-in echo"},
	{"plugin", "give the path of a plugin binary"},
	{"plugin-sha256", "give the binary's SHA-256, or leave the flag out to run it unchecked"},
	{"auth-token-file", "give the path of the token's file"},
	{"tls-cert", "give the certificate's PEM file, or leave the flag out to serve plain HTTP"},
	{"tls-key", "give the key's PEM file, or leave the flag out to serve plain HTTP"},
	{"broker", "give a redis:// URL"},
	{"broker-ca", "give the CA's PEM file, or leave the flag out to trust the system's"},
}

// refuseEmpty refuses a flag of emptyRefused given with an empty value to
// command (serve, or bench).
func refuseEmpty(f *pflag.FlagSet, lookupEnv func(string) (string, bool), command string) error {
	for _, e := range emptyRefused {
		if flag := f.Lookup(e.flag); flag != nil && flag.Changed && strings.TrimSpace(flag.Value.String()) == "" {
			return fmt.Errorf("--%s is empty: %s%s", e.flag, e.instead, withoutIt(e.flag, f, lookupEnv, command))
		}
	}
	return nil
}

// withoutIt says what leaving out flag, given empty, would do instead,
// where something else than its absence decides that: the token's and the
// broker's variables; nothing where leaving it out would not do either (a
// token given by its flag too, a front end that needs its broker).
func withoutIt(flag string, f *pflag.FlagSet, lookupEnv func(string) (string, bool), command string) string {
	var env, alone string
	switch {
	case flag == "auth-token-file" && !f.Changed("auth-token"):
		env, alone = envAuthToken, "to serve without a token"
	case flag == "broker" && (f.Lookup("workers") == nil || f.Lookup("workers").Value.String() != "0"):
		env, alone = envBroker, "to serve alone"
	default:
		return ""
	}
	switch v, set := lookupEnv(env); {
	case !set:
		return ", or leave the flag out " + alone
	case strings.TrimSpace(v) == "":
		return fmt.Sprintf("; $%s is set but empty too: unset it and leave the flag out %s", env, alone)
	}
	return fmt.Sprintf("; leaving the flag out takes $%s, and %s, unset it for this command too (env -u %s streamer %s ...)", env, alone, env, command)
}

// checkOrigin says why origin is not one a browser sends in its Origin
// header (scheme://host[:port], no path) nor *, the wildcard: such an entry
// would never match, and the pages meant would get 403.
func checkOrigin(origin string) error {
	if origin == "*" {
		return nil
	}
	u, err := url.Parse(origin)
	switch {
	case err != nil:
		return err
	case u.Scheme == "" || u.Host == "" || u.User != nil:
		return errors.New("want scheme://host[:port] (as https://app.example.com), or * for any origin")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(origin, "?") || strings.HasSuffix(origin, "#"):
		return errors.New("want scheme://host[:port] alone: a browser's Origin has no path, query or fragment")
	case strings.ContainsFunc(u.Host, func(r rune) bool { return r >= utf8.RuneSelf }):
		return errors.New("want the host in ASCII, as a browser sends it: its punycode form (xn--...)")
	case strings.Contains(u.Host, "*"):
		return errors.New("want one origin: * stands alone for any, and matches nothing within a host (list each origin)")
	case !strings.Contains(u.Hostname(), ":") && endsInANumber(u.Hostname()):
		if a, err := netip.ParseAddr(u.Hostname()); err != nil || !a.Is4() {
			return fmt.Errorf("host %s: write an IPv4 address as a browser does, four decimal parts without leading zeros (as 127.0.0.1): it never sends another form", u.Hostname())
		}
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s: want 1 to 65535", port)
		}
	}
	return nil
}

// checkListenAddrs refuses, before anything listens, an address of the
// given flags (flag, address; empty: not given) that is not host:port with
// a port number, or that takes the port another of them takes. Before,
// Go's words said it ("too many colons in address" for an IPv6 address out
// of brackets), or a clash of two of them read as another process holding
// the port; and a port named as a service (http) listened on its number.
func checkListenAddrs(addrs [][2]string) error {
	type bound struct{ flag, host, port string }
	var seen []bound
	for _, a := range addrs {
		flag, addr := a[0], a[1]
		if addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%s %s: want host:port, an IPv6 address in brackets (as 127.0.0.1:5005, [::1]:5005, or :5005 for every interface): %s", flag, addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
		}
		if port != "" {
			n, err := strconv.Atoi(port)
			if err != nil || n < 0 || n > 65535 {
				return fmt.Errorf("%s %s: port %q: want a number from 1 to 65535 (or 0 for one the system picks)", flag, addr, port)
			}
			port = strconv.Itoa(n) // 044319 is 44319
		}
		// Hosts compared as addresses, localhost as loopback's: a clash
		// these miss (a name that resolves alike) is still refused as
		// the second listens, in Go's words.
		same := func(a, b string) bool {
			norm := func(h string) string {
				if strings.EqualFold(h, "localhost") {
					return "127.0.0.1"
				}
				if ip, err := netip.ParseAddr(h); err == nil {
					return ip.Unmap().String()
				}
				return strings.ToLower(h)
			}
			return norm(a) == norm(b)
		}
		for _, b := range seen {
			wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
			if port != "" && port != "0" && b.port == port && (same(b.host, host) || wildcard(b.host) || wildcard(host)) {
				return fmt.Errorf("%s %s: %s takes that port too (%s): give each its own", flag, addr, b.flag, net.JoinHostPort(b.host, b.port))
			}
		}
		seen = append(seen, bound{flag, host, port})
	}
	return nil
}

// endsInANumber says whether a browser takes host for an IPv4 address: its
// last label (a trailing dot aside) is a number, decimal or 0x hex, as in
// 127.1 or 0x7f.0.0.1, which it writes in full (127.0.0.1).
func endsInANumber(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := labels[len(labels)-1]
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// maxIntraOpThreads bounds --intra-op-threads: a worker's threads past
// any machine's cores only cost memory (each has its stack and buffers).
const maxIntraOpThreads = 1024

// loopbackHostOnly refuses requests to a loopback listener that name
// another host than this one (a loopback address or localhost): a web
// page whose name an attacker rebinds to 127.0.0.1 reaches the listener
// from the browser of anyone on this machine, and reads what it answers,
// the command line with its token included, as its own origin's.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip := net.ParseIP(strings.Trim(host, "[]")); ip == nil && !strings.EqualFold(host, "localhost") || ip != nil && !ip.IsLoopback() {
			http.Error(w, fmt.Sprintf("this server answers on loopback only: Host %q names another machine", r.Host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveProfiles serves net/http/pprof's handlers on their own listener, so
// that profiles are never reachable through the API's address.
func serveProfiles(addr string, log *slog.Logger) (*http.Server, error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof %s: %w", addr, err)
	}
	if ip := listener.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("--pprof listens beyond this machine: anyone who can reach it can read the process's memory profiles and command line, and so can any web page opened on a machine that reaches it (a name rebound to its address: no Host check holds off such a page here, as on loopback); keep it on loopback", "pprof", addr, "bound", listener.Addr().String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	var handler http.Handler = mux
	if listener.Addr().(*net.TCPAddr).IP.IsLoopback() {
		handler = loopbackHostOnly(mux)
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: maxHeaderBytes}
	go func() { _ = server.Serve(listener) }()
	log.Info("serving profiles", "pprof", "http://"+listener.Addr().String()+"/debug/pprof/")
	return server, nil
}
