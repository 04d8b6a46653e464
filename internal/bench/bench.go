// Package bench is the load generator behind `streamer bench`: it sends a
// closed or open loop of requests to a streamer server (one it starts, one
// at a URL, or a supervisor in this process through the Go API) for a
// warm-up and a measured window, and reports throughput, latency
// percentiles, the batch sizes the server formed and errors by kind.
//
// The plot of a run is drawn by the streamer-bench binary (see package
// chart), so this package, which the streamer binary links, links no
// plotting code.
package bench

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// The APIs a run can drive.
const (
	// APIHTTP posts to the server's /predict.
	APIHTTP = "http"
	// APIGo calls Predict on a supervisor in this process; worker
	// processes still run the model.
	APIGo = "go"
)

// Config is one run. Its errors name the `streamer bench` flag of the
// field that is wrong.
type Config struct {
	// Concurrency is the number of clients of a closed loop, or the most
	// requests in flight of an open one (Rate > 0). At least 1.
	Concurrency int
	// Duration is the length of the measured window. Positive.
	Duration time.Duration
	// Warmup is the load sent before the window opens, without a pause
	// between the two. Not negative.
	Warmup time.Duration
	// Rate, when above 0, makes the loop open: requests per second on a
	// fixed schedule, latency counted from the scheduled send.
	Rate float64
	// RequestTimeout bounds each request of an http run, from its send to
	// the end of its answer: a request that takes longer counts as a
	// failure of the kind "timeout". It bounds the reads of the server's
	// /v1/stats too. Positive for an http run; the Go API's requests are
	// bounded by the supervisor's worker timeout.
	RequestTimeout time.Duration
	// Target is the http or https URL of a running server to load; empty,
	// Run starts one with Server.
	Target string
	// Token, when not empty, is sent as "Authorization: Bearer Token" with
	// every request: the server's --auth-token.
	Token string
	// RootCAs, when not nil, are the CAs an https Target's certificate is
	// checked against (its gRPC service's too), rather than the system's.
	RootCAs *x509.CertPool
	// API is APIHTTP (the default when empty) or APIGo.
	API string
	// Protocol is what an http run speaks: ProtocolPredict (the default
	// when empty), ProtocolV2, ProtocolV2Binary or ProtocolGRPC.
	Protocol string
	// GRPCStream sends ProtocolGRPC's requests on Triton's streaming call,
	// ModelStreamInfer: one call on each connection carries the requests
	// of the clients that share it, rather than a call each.
	GRPCStream bool
	// GRPCTarget is the address of the gRPC service of Target (its
	// --grpc-listen), for ProtocolGRPC; a server Run starts is given one.
	// The server's stats are still read from Target over http.
	GRPCTarget string
	// ModelName is the model's name in the v2 routes; required by the v2
	// protocols.
	ModelName string
	// Input is one item, as JSON.
	Input string
	// ItemsPerRequest is how many copies of Input each request carries. At
	// least 1, at most MaxItemsPerRequest, and at most MaxItems.
	ItemsPerRequest int
	// MaxItems is the most items in one request that the server Run starts
	// (or the in-process supervisor) takes: its --max-items. 0 when not
	// known; not looked at for a Target, which says so itself (413).
	MaxItems int
	// MaxQueue is the most items the queue of the server Run starts (or of
	// the in-process supervisor) holds, which a request of more gets 413
	// for. 0 when not known; not looked at for a Target.
	MaxQueue int
	// Progress shows a progress bar on Stderr when it is a terminal, or
	// one line when the load starts when it is not.
	Progress bool
	// Stderr receives progress and notes; nil discards them.
	Stderr io.Writer
	// PlotFile, when set, receives a PNG of the run drawn by the
	// streamer-bench binary; see Plotter. A file already there is replaced
	// only once the new plot is drawn.
	PlotFile string
	// Plotter is the streamer-bench binary; empty, it is looked up next to
	// Server.Binary, then on PATH.
	Plotter string
	// Server starts the server of an http run without a Target.
	Server Server
	// Supervisor makes the config of the in-process supervisor of an
	// APIGo run; it is called once, after the other fields are checked.
	Supervisor func() (supervisor.Config, error)
	// LimitItemsPerS is the physical limit of the model Run's own server
	// runs (see SleepLimit); 0 when it is not known. It is not reported
	// for a Target.
	LimitItemsPerS float64
}

// Server is how Run starts a server: Binary serve --listen ADDR Args...,
// on a free loopback port.
type Server struct {
	// Binary is the streamer binary.
	Binary string
	// Args are serve flags, without --listen.
	Args []string
	// Workers is how many workers must be ready before the load starts.
	Workers int
	// Env is added to the server's environment ("NAME=value").
	Env []string
}

// Result is what Run measured.
type Result struct {
	// Report is the figures of the measured window; its Interrupted says
	// that ctx ended before the window did, and that it covers the part
	// that was measured.
	Report Report
	// Err, when not nil, says why Report does not stand as a measurement
	// of the load asked for: the run was interrupted (ErrInterrupted), no
	// request succeeded, an open loop skipped more than 1% of its sends,
	// or the server stopped answering its stats. The report is still worth reading, and a
	// command that prints it must not then exit 0.
	Err error
}

// ErrInterrupted is in a Result's Err when the run was interrupted.
var ErrInterrupted = errors.New("interrupted")

// maxSkippedFraction is the share of an open loop's sends that may be
// skipped for the in-flight limit before the run is no measurement of the
// rate asked for: the server was loaded at a lower one, and the latency of
// the sends skipped, which would have waited longest, is in no figure.
const maxSkippedFraction = 0.01

// MaxConcurrency bounds the clients of a run: each holds a connection, and
// one machine has about that many ports to open them from. Ten million
// took memory by the hundred megabytes a second before a request went.
const MaxConcurrency = 1 << 16

// MaxRate bounds --rate, in requests per second: a send every microsecond
// is beyond what one process's timers keep to, and past it the open loop
// only spins.
const MaxRate = 1e6

// MaxItemsPerRequest bounds the items of one request, as a server's
// --max-items would; a billion copies of the input ran out of memory
// building the body.
const MaxItemsPerRequest = 1 << 16

// maxBodyBytes bounds the body bench builds: ItemsPerRequest copies of
// Input, held once and sent by every client.
const maxBodyBytes = 256 << 20

// check validates cfg before anything is started, so that a typo fails at
// once rather than after a server start, and returns the decoded Input.
func (cfg *Config) check() (item any, err error) {
	if cfg.API == "" {
		cfg.API = APIHTTP
	}
	switch {
	case cfg.Concurrency < 1:
		return nil, fmt.Errorf("--concurrency %d: want at least 1", cfg.Concurrency)
	case cfg.Concurrency > MaxConcurrency:
		return nil, fmt.Errorf("--concurrency %d: want at most %d (each client holds a connection of its own)", cfg.Concurrency, MaxConcurrency)
	case cfg.ItemsPerRequest < 1:
		return nil, fmt.Errorf("--items-per-request %d: want at least 1", cfg.ItemsPerRequest)
	case cfg.ItemsPerRequest > MaxItemsPerRequest:
		return nil, fmt.Errorf("--items-per-request %d: want at most %d", cfg.ItemsPerRequest, MaxItemsPerRequest)
	case cfg.Target == "" && cfg.MaxItems > 0 && cfg.ItemsPerRequest > cfg.MaxItems:
		return nil, fmt.Errorf("--items-per-request %d: more than the server's --max-items %d, which refuses such a request whole (413); raise --max-items",
			cfg.ItemsPerRequest, cfg.MaxItems)
	case cfg.Target == "" && cfg.MaxQueue > 0 && cfg.ItemsPerRequest > cfg.MaxQueue:
		return nil, fmt.Errorf("--items-per-request %d: more than its server's queue holds (%d items: --max-queue, or its default), which refuses such a request whole (413)",
			cfg.ItemsPerRequest, cfg.MaxQueue)
	case (len(cfg.Input)+1)*cfg.ItemsPerRequest > maxBodyBytes:
		return nil, fmt.Errorf("--items-per-request %d of an --input of %d bytes: requests of about %d MiB; want at most %d MiB",
			cfg.ItemsPerRequest, len(cfg.Input), (len(cfg.Input)+1)*cfg.ItemsPerRequest>>20, maxBodyBytes>>20)
	case cfg.Duration <= 0:
		return nil, fmt.Errorf("--duration %s: must be positive", cfg.Duration)
	case cfg.Warmup < 0:
		return nil, fmt.Errorf("--warmup %s: must not be negative", cfg.Warmup)
	case cfg.Duration > math.MaxInt64-cfg.Warmup:
		return nil, fmt.Errorf("--duration %s with --warmup %s: together they overflow a duration (about 292 years)", cfg.Duration, cfg.Warmup)
	case cfg.API == APIHTTP && cfg.RequestTimeout <= 0:
		return nil, fmt.Errorf("--request-timeout %s: must be positive", cfg.RequestTimeout)
	case cfg.API != APIHTTP && cfg.API != APIGo:
		return nil, fmt.Errorf("--api %q: want http or go", cfg.API)
	case cfg.API == APIGo && cfg.Target != "":
		return nil, errors.New("--api go runs its own supervisor; it cannot drive --target")
	}
	if err := cfg.checkRate(); err != nil {
		return nil, err
	}
	if err := cfg.checkProtocol(); err != nil {
		return nil, err
	}
	if cfg.Target != "" {
		if _, err := parseTarget(cfg.Target); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal([]byte(cfg.Input), &item); err != nil {
		return nil, fmt.Errorf("--input %q is not JSON: %w", cfg.Input, err)
	}
	return item, nil
}

// checkRate checks Rate: 0 (a closed loop), or a finite rate up to MaxRate
// that schedules at least one send in the load. NaN compares false with
// everything and would run a closed loop; a rate so low that its interval
// overflows a duration would schedule its sends in the past.
func (cfg *Config) checkRate() error {
	load := (cfg.Warmup + cfg.Duration).Seconds()
	switch {
	case cfg.Rate == 0:
		return nil
	case math.IsNaN(cfg.Rate) || cfg.Rate < 0:
		return fmt.Errorf("--rate %g: want a positive number of requests per second (0 is closed loop)", cfg.Rate)
	case cfg.Rate > MaxRate:
		return fmt.Errorf("--rate %g: want at most %g requests per second", cfg.Rate, MaxRate)
	case cfg.Rate*load < 1:
		return fmt.Errorf("--rate %g: less than one request in the %s of --warmup and --duration", cfg.Rate, cfg.Warmup+cfg.Duration)
	}
	return nil
}

// IsHTTPS reports whether target is an https:// URL, its scheme in any case
// (ParseTarget takes HTTPS:// too).
func IsHTTPS(target string) bool {
	return len(target) >= len("https://") && strings.EqualFold(target[:len("https://")], "https://")
}

// parseTarget is ParseTarget of bench's --target, whose token is
// --auth-token's.
func parseTarget(target string) (*url.URL, error) { return ParseTarget(target, "--auth-token") }

// redactTarget is target, parsed as u (or failing to parse with err), as
// its errors show it: with the password of a user in it replaced by
// xxxxx, or, where it does not parse and may hold one, its scheme alone.
func redactTarget(target string, u *url.URL, err error) string {
	switch {
	case !strings.Contains(target, "@"):
		return target
	case err == nil && u.Opaque == "":
		return u.Redacted()
	}
	// A target that does not parse, or parses as a scheme and an opaque
	// rest (u:pw@host:port, its scheme forgotten), might hold a password
	// anywhere before its last @: shown as its scheme, if any, and what
	// follows that @.
	scheme := ""
	if i := strings.Index(target, "://"); i >= 0 && i < strings.Index(target, "@") {
		scheme = target[:i+3]
	}
	return scheme + "…@" + target[strings.LastIndex(target, "@")+1:]
}

// ParseTarget checks that target, the URL of a running server's HTTP API,
// is an http or https URL with a host, a port that can be dialled, and
// nothing that a client could not pass on: the paths it asks for are
// appended to the target's, so a query or a fragment would end up in the
// middle of them, and the token goes in a header of its own, given by
// tokenFlag, not as a user and password.
func ParseTarget(target, tokenFlag string) (*url.URL, error) {
	// A target without its scheme (127.0.0.1:5005) fails to parse, as a
	// first path segment with a colon: url.Parse's words would not say
	// what is missing.
	u, err := url.Parse(target)
	shown := redactTarget(target, u, err)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--target %q: want an http:// or https:// URL such as http://127.0.0.1:5005", shown)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--target %q: port %s: want 1 to 65535", shown, port)
		}
	}
	switch {
	case u.RawQuery != "" || u.ForceQuery || strings.Contains(target, "#"):
		return nil, fmt.Errorf("--target %q: want no query or fragment: the paths asked for (/predict, /v1/stats) are appended to the target's", shown)
	case u.User != nil:
		return nil, fmt.Errorf("--target %q: want no user or password in the URL: give the server's token with %s", shown, tokenFlag)
	}
	return u, nil
}

// Run sends the load cfg describes and reports on it. When ctx ends, the
// load stops, the server Run started is stopped, and what was measured is
// still returned, with Report.Interrupted set; an end during the warm-up is an
// error, as nothing was measured. The plot, when asked for, is written
// before Run returns; a plot that could not be drawn leaves the report,
// with the failure in Result.Err.
func Run(ctx context.Context, cfg Config) (Result, error) {
	item, err := cfg.check()
	if err != nil {
		return Result{}, err
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	// The plotter and the plot's folder are checked first: a missing
	// plotter or a folder that cannot be written fails now, not after the
	// whole run.
	plot, err := cfg.openPlot()
	if err != nil {
		return Result{}, err
	}
	defer plot.abandon()
	send, stats, stop, err := cfg.setUp(ctx, item)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	res, samples, err := cfg.measure(ctx, send, stats)
	if err != nil {
		return Result{}, err
	}
	var batchSizes map[int]uint64
	if res.Report.BatchFigures != nil {
		batchSizes = res.Report.BatchSizes
	}
	if err := plot.draw(samples, batchSizes); err != nil {
		// The load is measured: its report stands, and the failure is
		// the run's verdict, as a measurement that does not stand is.
		res.Err = errors.Join(res.Err, err)
	}
	return res, nil
}

// verdict says why rep does not stand as a measurement, if it does not.
func (cfg *Config) verdict(rep Report) error {
	var errs []error
	if rep.Interrupted {
		errs = append(errs, fmt.Errorf("%w after %.1fs of load; the figures above cover that part", ErrInterrupted, rep.Seconds))
	}
	if rep.Requests == 0 {
		errs = append(errs, cfg.noSuccess(rep))
	}
	if rep.SkippedFraction > maxSkippedFraction {
		errs = append(errs, fmt.Errorf("open loop: %.1f%% of the sends scheduled in the window were skipped, --concurrency %d requests being out already; the server did not keep up with --rate %g, and the figures above leave those sends out: raise --concurrency, or lower --rate",
			100*rep.SkippedFraction, cfg.Concurrency, cfg.Rate))
	}
	return errors.Join(errs...)
}

// noSuccess says that no request succeeded, and where to look for why.
func (cfg *Config) noSuccess(rep Report) error {
	failed := rep.failed()
	switch {
	case failed > 0:
		return fmt.Errorf("no request succeeded: %d failed, see the errors above", failed)
	case rep.InFlightAtEnd > 0:
		return fmt.Errorf("no request succeeded: none was answered in the window, and %d were still waiting for an answer at its end, the oldest for %.1fs (a server that does not answer? --request-timeout counts a request that waits longer as a failure)",
			rep.InFlightAtEnd, rep.OldestInFlightMS/1000)
	}
	return errors.New("no request succeeded: none was answered in the window")
}
