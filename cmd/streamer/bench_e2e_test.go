package main

// Tests of `streamer bench` through the real binary: it starts its own real
// server (or drives one the harness started), loads it for about a second,
// and its report must agree with the model's known cost and the server's
// own counters. The load client's HTTP reader is tested in
// internal/bench/httpclient, the report's arithmetic in internal/bench.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/bench"
	"github.com/streamer-dev/streamer/internal/syncbuf"
)

// benchTimeout bounds one bench run; the runs here load for a second or two.
const benchTimeout = 60 * time.Second

// benchResult is one finished `streamer bench` run.
type benchResult struct {
	code   int
	stdout string
	stderr string
}

// runBenchCmd runs `streamer bench args...` to completion.
func runBenchCmd(t *testing.T, args ...string) benchResult {
	t.Helper()
	return runBenchCmdWithPath(t, os.Getenv("PATH"), args...)
}

// runBenchCmdWithPath runs `streamer bench args...` to completion with PATH
// set to path, where it looks for the plotter.
func runBenchCmdWithPath(t *testing.T, path string, args ...string) benchResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, streamerBin, append([]string{"bench"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run streamer bench %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("streamer bench %s ran past %s\nstderr:\n%s", strings.Join(args, " "), benchTimeout, stderr.String())
	}
	return benchResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// benchJSON runs bench with --json, which must succeed, and returns the
// report both as the decoded struct and as raw keys.
func benchJSON(t *testing.T, args ...string) (bench.Report, map[string]json.RawMessage) {
	t.Helper()
	return benchJSONExiting(t, 0, args...)
}

// benchJSONExiting is benchJSON of a run that exits with code: 1 when no
// request succeeded.
func benchJSONExiting(t *testing.T, code int, args ...string) (bench.Report, map[string]json.RawMessage) {
	t.Helper()
	res := runBenchCmd(t, append([]string{"--json", "--warmup", "0"}, args...)...)
	if res.code != code {
		t.Fatalf("streamer bench exited %d, want %d\nstdout:\n%s\nstderr:\n%s", res.code, code, res.stdout, res.stderr)
	}
	var rep bench.Report
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("--json output is not the report: %v\n%s", err, res.stdout)
	}
	if err := json.Unmarshal([]byte(res.stdout), &keys); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, res.stdout)
	}
	return rep, keys
}

// checkLatencies fails unless the percentiles are positive and ordered.
func checkLatencies(t *testing.T, l bench.Latencies) {
	t.Helper()
	if !(l.P50 > 0 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("latency percentiles not positive and ordered: %+v", l)
	}
}

func TestBenchJSONSleepModel(t *testing.T) {
	const (
		workers     = 2
		batch       = 8
		concurrency = 32
	)
	rep, keys := benchJSON(t, "--model", "sleep:2ms,10us", "--workers", strconv.Itoa(workers),
		"--batch-size", strconv.Itoa(batch), "--concurrency", strconv.Itoa(concurrency), "--duration", "1500ms")
	for _, key := range []string{"requests_per_s", "items_per_s", "latency_ms", "mean_batch_size", "batch_sizes", "errors", "limit_items_per_s", "interrupted"} {
		if _, ok := keys[key]; !ok {
			t.Errorf("--json output lacks %q: %s", key, keys)
		}
	}
	if string(keys["interrupted"]) != "false" {
		t.Errorf("interrupted = %s for a run that was not", keys["interrupted"])
	}
	var lat map[string]float64
	if err := json.Unmarshal(keys["latency_ms"], &lat); err != nil {
		t.Fatalf("latency_ms: %v", err)
	}
	for _, key := range []string{"p50", "p90", "p99", "max"} {
		if _, ok := lat[key]; !ok {
			t.Errorf("latency_ms lacks %q: %s", key, keys["latency_ms"])
		}
	}
	wantLimit := workers * batch / (2*time.Millisecond + batch*10*time.Microsecond).Seconds()
	if math.Abs(rep.LimitItemsPerS-wantLimit) > 1e-6*wantLimit {
		t.Errorf("limit_items_per_s = %v, want workers × batch / cost(batch) = %v", rep.LimitItemsPerS, wantLimit)
	}
	if rep.ItemsPerS <= 0 || rep.ItemsPerS > 1.02*wantLimit {
		t.Errorf("items_per_s = %v: want above 0 and not above the physical limit %v", rep.ItemsPerS, wantLimit)
	}
	if rep.OfLimit == nil || math.Abs(*rep.OfLimit-rep.ItemsPerS/rep.LimitItemsPerS) > 1e-9 {
		t.Errorf("of_limit = %v, want items_per_s / limit = %v", rep.OfLimit, rep.ItemsPerS/rep.LimitItemsPerS)
	}
	if rep.MeanBatchSize <= 1 || rep.MeanBatchSize > batch {
		t.Errorf("mean_batch_size = %v under %d clients: want above 1 and at most %d", rep.MeanBatchSize, concurrency, batch)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	checkLatencies(t, rep.LatencyMS)
	// The histogram is the server's: the items in it are the requests
	// answered, give or take those in flight when the clock started and
	// stopped.
	var items uint64
	for n, c := range rep.BatchSizes {
		if n < 1 || n > batch {
			t.Errorf("batch size %d outside 1..%d", n, batch)
		}
		items += uint64(n) * c
	}
	if diff := int64(items) - int64(rep.Requests); diff < -2*concurrency || diff > 2*concurrency {
		t.Errorf("batch_sizes hold %d items for %d answered requests", items, rep.Requests)
	}
}

// buildPlotter builds the streamer-bench binary into a folder of its own and
// returns the folder.
func buildPlotter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, bench.PlotterName), "../"+bench.PlotterName)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", bench.PlotterName, err, out)
	}
	return dir
}

func TestBenchTableAndPlot(t *testing.T) {
	plotter := buildPlotter(t)
	path := filepath.Join(t.TempDir(), "bench.png")
	res := runBenchCmdWithPath(t, plotter+string(os.PathListSeparator)+os.Getenv("PATH"),
		"--model", "echo", "--concurrency", "8", "--duration", "1s", "--warmup", "0", "--plot", path)
	if res.code != 0 {
		t.Fatalf("streamer bench exited %d\nstderr:\n%s", res.code, res.stderr)
	}
	for _, want := range []string{"requests/s", "items/s", "latency ms", "p50", "p99", "mean batch", "batch sizes", "errors        none"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, res.stdout)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("--plot wrote no file: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("--plot %s is not a PNG: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 200 || b.Dy() < 200 {
		t.Errorf("plot is %dx%d pixels; want a readable size", b.Dx(), b.Dy())
	}
	// Something was drawn: a blank image has one colour.
	first, varied := img.At(0, 0), false
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y && !varied; y += 7 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 7 {
			if img.At(x, y) != first {
				varied = true
				break
			}
		}
	}
	if !varied {
		t.Error("the plot is blank")
	}
}

func TestBenchPlotWithoutPlotter(t *testing.T) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(streamerBin), bench.PlotterName)); err == nil {
		t.Skipf("%s lies next to the binary under test: bench would find it", bench.PlotterName)
	}
	// A plot of an earlier run is at the path: it must survive.
	path := filepath.Join(t.TempDir(), "bench.png")
	if err := os.WriteFile(path, []byte("an earlier plot"), 0o644); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res := runBenchCmdWithPath(t, t.TempDir(), "--model", "echo", "--duration", "1s", "--plot", path)
	if res.code == 0 {
		t.Fatalf("exit code 0 without a plotter\nstdout:\n%s", res.stdout)
	}
	for _, want := range []string{"--plot:", "drawn by the " + bench.PlotterName + " binary", "./cmd/" + bench.PlotterName, "make build"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q does not say %q", res.stderr, want)
		}
	}
	if res.stdout != "" {
		t.Errorf("stdout %q: a failed run must not print a report", res.stdout)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "an earlier plot" {
		t.Errorf("the earlier plot holds %q (%v) after a run without a plotter; want it untouched", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("the plot's folder holds %v; want the earlier plot alone", entries)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %s to find the plotter missing; it must fail before the load", d)
	}
}

// TestStreamerLinksNoPlotting holds the line that keeps the plot out of the
// streamer binary, which every worker process runs: no gonum.org package
// and not the chart package may be among its dependencies. The plotter's
// own dependencies are listed the same way and must have them, so that the
// check is seen to see them.
func TestStreamerLinksNoPlotting(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	plotting := func(pkg string) bool {
		return strings.HasPrefix(pkg, "gonum.org/") || strings.HasSuffix(pkg, "/internal/bench/chart")
	}
	for _, pkg := range deps(".") {
		if plotting(pkg) {
			t.Errorf("the streamer binary links %s; the plot belongs in %s", pkg, bench.PlotterName)
		}
	}
	var seen []string
	for _, pkg := range deps("../" + bench.PlotterName) {
		if plotting(pkg) {
			seen = append(seen, pkg)
		}
	}
	if !slices.Contains(seen, "gonum.org/v1/plot") || !slices.ContainsFunc(seen, func(p string) bool { return strings.HasSuffix(p, "/internal/bench/chart") }) {
		t.Errorf("%s's dependencies hold %v; want gonum.org/v1/plot and the chart package, or this check sees nothing", bench.PlotterName, seen)
	}
}

func TestBenchTargetRunningServer(t *testing.T) {
	s := startServer(t, "--model", "echo", "--workers", "1")
	before := s.stats(t)
	rep, keys := benchJSON(t, "--target", s.URL(), "--concurrency", "4", "--duration", "1s")
	after := s.stats(t)
	if rep.Requests == 0 || rep.RequestsPerS <= 0 {
		t.Fatalf("no requests answered: %+v", rep)
	}
	if got := after.Submitted - before.Submitted; got < uint64(rep.Requests) {
		t.Errorf("the server admitted %d items, bench reports %d answered requests", got, rep.Requests)
	}
	if rep.MeanBatchSize < 1 {
		t.Errorf("mean_batch_size = %v: the server's batch counts were not read", rep.MeanBatchSize)
	}
	if _, ok := keys["limit_items_per_s"]; ok {
		t.Errorf("limit_items_per_s reported for a --target whose model bench does not know: %s", keys["limit_items_per_s"])
	}
	checkLatencies(t, rep.LatencyMS)
}

func TestBenchOpenLoop(t *testing.T) {
	t.Run("latency from the schedule", func(t *testing.T) {
		const rate, seconds = 200, 1.5
		rep, _ := benchJSON(t, "--model", "sleep:2ms,0s", "--rate", strconv.Itoa(rate), "--concurrency", "64", "--duration", "1500ms")
		if want := rate * seconds; float64(rep.Requests) < 0.7*want || float64(rep.Requests) > 1.05*want {
			t.Errorf("%d requests at --rate %d for %.1fs; want about %.0f", rep.Requests, rate, seconds, want)
		}
		checkLatencies(t, rep.LatencyMS)
		if rep.LatencyMS.P50 < 2 {
			t.Errorf("p50 %.2fms is below the model's 2ms cost", rep.LatencyMS.P50)
		}
		if len(rep.Errors) != 0 {
			t.Errorf("errors: %v", rep.Errors)
		}
	})
	t.Run("in-flight limit", func(t *testing.T) {
		// One request in flight at most, each taking 20ms, at 200/s: most
		// scheduled sends find no room and are counted, not silently
		// skipped; the run is no measurement of 200/s, and exits 1.
		args := []string{"--model", "sleep:20ms,0s", "--batch-size", "1", "--rate", "200", "--concurrency", "1", "--duration", "1s", "--warmup", "0"}
		rep, keys := benchJSONExiting(t, 1, args...)
		if rep.Skipped < 100 || rep.SkippedFraction < 0.5 || len(rep.Errors) != 0 {
			t.Errorf("skipped %d (%s of the schedule), errors %v: want most of 200 sends skipped by the in-flight limit, and no error", rep.Skipped, keys["skipped_fraction"], rep.Errors)
		}
		if rep.Requests < 10 || rep.Requests > 60 {
			t.Errorf("%d requests answered; one at a time at 20ms each for 1s is about 50", rep.Requests)
		}
		res := runBenchCmd(t, args...)
		if res.code != 1 || !strings.Contains(res.stderr, "the server did not keep up with --rate 200") || !strings.Contains(res.stdout, "!! the server did not keep up") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, the table and the error saying the sends were skipped", res.code, res.stdout, res.stderr)
		}
	})
}

func TestBenchGoAPI(t *testing.T) {
	rep, _ := benchJSON(t, "--api", "go", "--model", "echo", "--workers", "1", "--concurrency", "16", "--items-per-request", "3", "--duration", "1s")
	if rep.Requests == 0 {
		t.Fatalf("no requests answered: %+v", rep)
	}
	if math.Abs(rep.ItemsPerS-3*rep.RequestsPerS) > 1e-6*rep.ItemsPerS {
		t.Errorf("items_per_s %v is not 3 × requests_per_s %v", rep.ItemsPerS, rep.RequestsPerS)
	}
	if rep.MeanBatchSize < 1 || len(rep.BatchSizes) == 0 {
		t.Errorf("no batch figures from the Go API's stats: mean %v, sizes %v", rep.MeanBatchSize, rep.BatchSizes)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	checkLatencies(t, rep.LatencyMS)
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown api", []string{"--api", "foo"}, `--api "foo": want http or go`},
		{"input not JSON", []string{"--input", "hello"}, `--input "hello" is not JSON`},
		{"no clients", []string{"--concurrency", "0"}, "--concurrency 0: want at least 1"},
		{"too many clients", []string{"--concurrency", "10000000"}, "--concurrency 10000000: want at most 65536"},
		{"a listen address", []string{"--listen", "127.0.0.1:1"}, "--listen: bench starts its server on a free loopback port"},
		{"negative rate", []string{"--rate", "-5"}, "--rate -5: want a positive number"},
		{"rate not a number", []string{"--rate", "NaN"}, "--rate NaN: want a positive number"},
		{"infinite rate", []string{"--rate", "Inf"}, "--rate +Inf: want at most"},
		{"rate below one request", []string{"--rate", "1e-10"}, "--rate 1e-10: less than one request"},
		{"too many items", []string{"--items-per-request", "1000000000"}, "--items-per-request 1000000000: want at most 65536"},
		{"more items than its server takes", []string{"--items-per-request", "5000"}, "--items-per-request 5000: more than the server's --max-items 4096"},
		{"more items than its server's queue holds", []string{"--items-per-request", "100", "--max-queue", "50"}, "--items-per-request 100: more than its server's queue holds (50 items: --max-queue, or its default), which refuses such a request whole (413)"},
		{"more items than its server's default queue holds", []string{"--items-per-request", "200", "--batch-size", "1"}, "--items-per-request 200: more than its server's queue holds (100 items"},
		{"more items than the shared backlog holds", []string{"--broker", "redis://127.0.0.1:1/0", "--workers", "2", "--batch-size", "2", "--items-per-request", "300"}, "--items-per-request 300: more than its server's queue holds (200 items"},
		{"more items than its supervisor takes", []string{"--api", "go", "--max-items", "1", "--items-per-request", "2"}, "--items-per-request 2: more than the server's --max-items 1"},
		{"duration overflows", []string{"--duration", "2562047h", "--warmup", "1h"}, "together they overflow"},
		{"target port out of range", []string{"--target", "http://127.0.0.1:99999"}, "port 99999: want 1 to 65535"},
		{"target with a query", []string{"--target", "http://127.0.0.1:26001?x=1"}, "want no query or fragment"},
		{"zero duration", []string{"--duration", "0s"}, "--duration 0s: must be positive"},
		{"target not http", []string{"--target", "ftp://127.0.0.1:21"}, "want an http:// or https:// URL"},
		{"target without a scheme", []string{"--target", "127.0.0.1:5005"}, `--target "127.0.0.1:5005": want an http:// or https:// URL such as http://127.0.0.1:5005`},
		{"go api with target", []string{"--api", "go", "--target", "http://127.0.0.1:1"}, "--api go runs its own supervisor"},
		{"a CA without an https target", []string{"--ca", "ca.pem", "--target", "http://127.0.0.1:1"}, "--ca: it checks the certificate of an https --target, and there is none"},
		{"plot not writable", []string{"--plot", filepath.Join(t.TempDir(), "missing", "x.png")}, "--plot:"},
		{"unknown flag", []string{"--concurency", "8"}, "unknown flag: --concurency"},
		{"no request timeout", []string{"--request-timeout", "0s"}, "--request-timeout 0s: must be positive"},
		{"a sweep with no clients", []string{"--sweep-concurrency", "2,0"}, "--sweep-concurrency 0: want 1 to 65536 clients"},
		{"a sweep with too many clients", []string{"--sweep-concurrency", "1,70000"}, "--sweep-concurrency 70000: want 1 to 65536 clients"},
		{"a sweep of an unknown policy", []string{"--sweep-concurrency", "2", "--sweep-batching", "greedy,bogus"}, `--sweep-batching "bogus": want adaptive or greedy`},
		{"policies without a sweep", []string{"--sweep-batching", "greedy"}, "--sweep-batching goes with --sweep-concurrency"},
		{"an empty broker with a target", []string{"--target", "http://127.0.0.1:26001", "--broker", ""}, "--broker: --target drives a server started with flags of its own"},
		{"serve flags with a target", []string{"--target", "http://127.0.0.1:26001", "--model", "echo", "--workers", "2", "--batch-size", "8", "--auth-token", "t"}, "--batch-size, --model, --workers: --target drives a server started with flags of its own"},
		{"a model named for a v2 target", []string{"--target", "http://127.0.0.1:1", "--protocol", "v2", "--model", "echo", "--auth-token", "t"}, "--protocol v2: read the model's metadata (bench asks for model \"echo\"; --model-name NAME asks for the one the target serves)"},
		{"a model with a target, not v2", []string{"--target", "http://127.0.0.1:26001", "--model-name", "echo"}, "--model-name: --target drives a server"},
		{"a sweep of a target", []string{"--sweep-concurrency", "2", "--target", "http://127.0.0.1:26001"}, "it takes no --rate, --target or --plot"},
		{"request timeout with the go api", []string{"--api", "go", "--request-timeout", "1s"}, "--request-timeout bounds the requests of an http run"},
		{"grpc with a target but no grpc target", []string{"--target", "http://127.0.0.1:1", "--protocol", "grpc", "--model", "echo"}, "--protocol grpc with --target: give the target's gRPC address with --grpc-target"},
		{"a grpc target with another protocol", []string{"--target", "http://127.0.0.1:1", "--grpc-target", "127.0.0.1:2"}, "--grpc-target goes with --protocol grpc, not predict"},
		{"grpc streams with another protocol", []string{"--protocol", "v2", "--grpc-stream"}, "--grpc-stream goes with --protocol grpc, not v2"},
		{"a gRPC listen address", []string{"--protocol", "grpc", "--grpc-listen", "127.0.0.1:1"}, "--grpc-listen: with --protocol grpc, bench starts its server's gRPC service"},
		{"a certificate for its own server", []string{"--tls-cert", "cert.pem", "--tls-key", "key.pem"}, "--tls-cert, --tls-key: bench speaks plain http to the server it starts"},
		{"a key alone for its own server", []string{"--tls-key", "key.pem"}, "--tls-cert, --tls-key: bench speaks plain http to the server it starts"},
		{"a certificate for its Go API run", []string{"--api", "go", "--tls-cert", "cert.pem", "--tls-key", "key.pem"}, "--tls-cert, --tls-key: bench speaks plain http to the server it starts"},
		{"a zero latency for its Go API run", []string{"--api", "go", "--max-latency", "0"}, "--max-latency 0s: want a positive duration"},
		{"too many workers for its Go API run", []string{"--api", "go", "--workers", "5000"}, "--workers 5000: want at most 1024"},
		{"a server's flags for its Go API run", []string{"--api", "go", "--broker", "redis://127.0.0.1:1/0", "--log-level", "debug", "--max-body", "1"}, "--broker, --log-level, --max-body: --api go runs the supervisor in this process, with no HTTP server, broker, token or log, and would ignore these"},
		{"an empty model", []string{"--model", ""}, "--model is empty"},
		{"a model and a plugin for its Go API run", []string{"--api", "go", "--model", "sleep:10ms,100us", "--plugin", "/bin/true"}, `--model "sleep:10ms,100us" and --plugin both given`},
		{"a grpc target without a target", []string{"--protocol", "grpc", "--grpc-target", "127.0.0.1:2"}, "--grpc-target goes with --target"},
		{"a grpc target that is a URL", []string{"--target", "http://127.0.0.1:1", "--protocol", "grpc", "--grpc-target", "http://127.0.0.1:2"}, `--grpc-target "http://127.0.0.1:2": want host:port`},
		{"an unknown protocol", []string{"--protocol", "soap"}, `--protocol "soap": want predict, v2, v2-binary or grpc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			res := runBenchCmd(t, tc.args...)
			if res.code == 0 {
				t.Fatalf("exit code 0; want an error\nstdout:\n%s", res.stdout)
			}
			if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", res.stderr, tc.want)
			}
			if res.stdout != "" {
				t.Errorf("stdout %q: a failed run must not print a report", res.stdout)
			}
			// Flags are checked before any server starts.
			if d := time.Since(began); d > 5*time.Second {
				t.Errorf("took %s to reject the flags", d)
			}
		})
	}
}

// Clients that could not all open their connections, under the process's
// limit of open files, failed each request at once, counted as the
// server's connection errors, and the run exited 0, measuring fewer
// clients than it said: bench refuses such a --concurrency at once.
func TestBenchRefusesMoreClientsThanItMayOpenFiles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -n 200 && exec "$0" bench "$@"`, streamerBin,
		"--model", "sleep:1ms,1us", "--concurrency", "500", "--duration", "1s", "--warmup", "0")
	out, err := cmd.CombinedOutput()
	want := "--concurrency 500: each client holds a connection, and this process may open 200 files (ulimit -n), fewer than the 564 it needs"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("bench with 500 clients and 200 files: %v\n%s\nwant it refused, saying %q", err, out, want)
	}
}

// $STREAMER_BROKER set but empty, which the server bench starts refuses,
// is refused before that server starts.
func TestBenchRefusesAnEmptyBrokerVariable(t *testing.T) {
	t.Setenv("STREAMER_BROKER", "")
	began := time.Now()
	res := runBenchCmd(t, "--duration", "1s", "--warmup", "0s")
	if res.code == 0 || !strings.Contains(res.stderr, "$STREAMER_BROKER is set but empty") || strings.Contains(res.stderr, "server exited") {
		t.Errorf("exit code %d, stderr %q; want bench itself to refuse the empty variable", res.code, res.stderr)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %s to refuse it", d)
	}
	// A --target's server was started with its own environment, and the
	// Go API starts none.
	res = runBenchCmd(t, "--target", "http://127.0.0.1:1", "--duration", "1s", "--warmup", "0s")
	if strings.Contains(res.stderr, "STREAMER_BROKER") {
		t.Errorf("bench of a --target refused the empty variable, which is no matter of its: %q", res.stderr)
	}
	res = runBenchCmd(t, "--api", "go", "--duration", "500ms", "--warmup", "0s", "--concurrency", "2")
	if res.code != 0 {
		t.Errorf("bench of the Go API: exit %d, %q; want the run, which starts no server", res.code, res.stderr)
	}
}

// TestBenchWithNoRequestAnsweredFails: a run in which every request
// failed prints its report, errors and all, and exits 1, so that a script
// does not take it for a measurement.
func TestBenchWithNoRequestAnsweredFails(t *testing.T) {
	res := runBenchCmd(t, "--api", "go", "--model", "chaos:reject=x", "--input", `"x"`,
		"--duration", "500ms", "--warmup", "0", "--concurrency", "2")
	if res.code != 1 || !strings.Contains(res.stderr, "no request succeeded") {
		t.Fatalf("exit code %d, stderr:\n%s\nwant 1 saying no request succeeded", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "requests      0") || !strings.Contains(res.stdout, `first: item 0: model error: chaos: item "x" rejected`) {
		t.Errorf("stdout does not report the run and its errors:\n%s", res.stdout)
	}
}

// A --target that refuses every request alike, here for more items than
// its --max-items, stops the load early rather than fail it for the whole
// --duration, and the error gives the server's words.
func TestBenchStopsWhenTheTargetRefusesEveryRequest(t *testing.T) {
	s := startServer(t, "--model", "echo", "--workers", "1", "--max-items", "4")
	began := time.Now()
	res := runBenchCmd(t, "--target", s.URL(), "--items-per-request", "8", "--duration", "10m", "--warmup", "0", "--concurrency", "4")
	if d := time.Since(began); d > benchTimeout/2 {
		t.Errorf("ran %s of its 10 minutes against a server refusing every request", d)
	}
	if res.code != 1 || !strings.Contains(res.stderr, "the first 100 requests were all answered http 413, the server saying") || !strings.Contains(res.stderr, "the limit per request is 4") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, saying every request was refused, and why", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "http 413") {
		t.Errorf("the report does not count the refusals:\n%s", res.stdout)
	}
}

func TestBenchServerFailsToStart(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.onnx")
	res := runBenchCmd(t, "--model", missing, "--duration", "1s", "--json")
	if res.code == 0 {
		t.Fatalf("exit code 0 for a model that does not exist\nstdout:\n%s", res.stdout)
	}
	if !strings.Contains(res.stderr, "server exited before it was ready") || !strings.Contains(res.stderr, "missing.onnx") {
		t.Errorf("stderr does not say the server failed and why:\n%s", res.stderr)
	}
}

// childPIDs lists the children of pid (Linux: each thread lists the
// children it started).
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var pids []int
	for _, path := range tasks {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// benchRun is a streamer bench run in the background, with its output.
type benchRun struct {
	cmd            *exec.Cmd
	stdout, stderr *syncbuf.Buffer
	exited         chan struct{} // closed once it has exited
}

// startBench starts streamer bench with args; the test's end kills it if
// it still runs.
func startBench(t *testing.T, args ...string) *benchRun {
	t.Helper()
	return startBenchWith(t, nil, args...)
}

// startBenchWith is startBench with the process attributes attr.
func startBenchWith(t *testing.T, attr *syscall.SysProcAttr, args ...string) *benchRun {
	t.Helper()
	b := &benchRun{cmd: exec.Command(streamerBin, append([]string{"bench"}, args...)...),
		stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr, b.cmd.SysProcAttr = b.stdout, b.stderr, attr
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.exited
	})
	return b
}

// waitExit waits up to timeout for the run to end, after what.
func (b *benchRun) waitExit(t *testing.T, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-b.exited:
	case <-time.After(timeout):
		t.Fatalf("bench still running %s after %s\nstderr:\n%s", timeout, what, b.stderr.String())
	}
}

// An interrupt stops the load, reports what was measured with its batch
// figures, and stops the server bench started: sent to bench alone, or to
// its whole process group, as a terminal's Ctrl-C is. The server is in a
// group of its own, or the Ctrl-C stopped it too, before bench read its
// figures (reported missing, the server blamed for it) and while requests
// were still coming (503s counted as the load's errors).
func TestBenchInterruptStopsItsServer(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("needs /proc to find the server bench starts")
	}
	t.Run("to bench", func(t *testing.T) { testBenchInterrupt(t, false) })
	t.Run("to its process group", func(t *testing.T) { testBenchInterrupt(t, true) })
}

func testBenchInterrupt(t *testing.T, group bool) {
	var serverPID int
	t.Cleanup(func() { // after the run's own, which kills bench
		if serverPID > 0 && t.Failed() {
			_ = syscall.Kill(serverPID, syscall.SIGKILL) // do not leave it behind
		}
	})
	var attr *syscall.SysProcAttr
	if group {
		attr = &syscall.SysProcAttr{Setpgid: true} // a group of bench's, as a shell's job
	}
	run := startBenchWith(t, attr, "--model", "echo", "--workers", "1", "--concurrency", "4", "--duration", "10m", "--warmup", "0")
	cmd, stdout, stderr := run.cmd, run.stdout, run.stderr
	// Without a terminal, bench says in one line when the load starts.
	waitFor(t, "the load to run", readyTimeout, func() bool { return strings.Contains(stderr.String(), "loading for") })
	children := childPIDs(cmd.Process.Pid)
	if len(children) != 1 {
		t.Fatalf("bench has children %v; want its one server", children)
	}
	serverPID = children[0]
	if pgid, err := syscall.Getpgid(serverPID); err != nil || pgid == cmd.Process.Pid {
		t.Fatalf("the server (pid %d) is in process group %d (%v); want one of its own, not bench's", serverPID, pgid, err)
	}
	target := cmd.Process.Pid
	if group {
		target = -target
	}
	if err := syscall.Kill(target, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	run.waitExit(t, stopTimeout, "SIGINT")
	if strings.Contains(stdout.String(), "batch figures unavailable") || !strings.Contains(stdout.String(), "mean batch") {
		t.Errorf("the report of an interrupted run lacks its batch figures:\n%s", stdout.String())
	}
	if cmd.ProcessState.ExitCode() == 0 {
		t.Errorf("an interrupted run exited 0")
	}
	if !strings.Contains(stderr.String(), "interrupted after") {
		t.Errorf("stderr does not say the run was interrupted:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "requests/s") {
		t.Errorf("no report of the load measured before the interrupt:\n%s", stdout.String())
	}
	if err := syscall.Kill(serverPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the server bench started (pid %d) outlived it (kill 0: %v)", serverPID, err)
	}
}

// --sweep-concurrency runs one server per row, for each policy asked, and
// reports each row beside the best possible for the sleep model; the
// adaptive server's stats say why it sent its batches and what it measured.
func TestBenchSweep(t *testing.T) {
	res := runBenchCmd(t, "--model", "sleep:2ms,10us", "--workers", "1", "--duration", "1s", "--warmup", "300ms",
		"--sweep-concurrency", "1,4", "--sweep-batching", "greedy,adaptive", "--json")
	if res.code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", res.code, res.stderr)
	}
	var rows []bench.SweepRow
	if err := json.Unmarshal([]byte(res.stdout), &rows); err != nil {
		t.Fatalf("output is not a JSON array of rows: %v\n%s", err, res.stdout)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 2 clients × 2 policies", len(rows))
	}
	for i, want := range []struct {
		clients  int
		batching string
	}{{1, "greedy"}, {1, "adaptive"}, {4, "greedy"}, {4, "adaptive"}} {
		r := rows[i]
		if r.Clients != want.clients || r.Batching != want.batching {
			t.Errorf("row %d is %d clients %s, want %d %s", i, r.Clients, r.Batching, want.clients, want.batching)
		}
		best, bestP50 := bench.SleepBest("sleep:2ms,10us", 1, 64, r.Clients, 1)
		if r.BestItemsPerS != best || r.BestP50MS != bestP50 || best <= 0 {
			t.Errorf("row %d: best %.0f items/s p50 %.2f ms, want %.0f and %.2f", i, r.BestItemsPerS, r.BestP50MS, best, bestP50)
		}
		if r.Report.ItemsPerS <= 0 || r.Report.ItemsPerS > 1.05*best {
			t.Errorf("row %d: %.0f items/s against a best of %.0f", i, r.Report.ItemsPerS, best)
		}
		if d := r.Report.Dispatch; d.Full+d.Idle+d.Waited+d.MaxLatency+d.Deadline == 0 {
			t.Errorf("row %d: no batch counted by why it was sent: %+v", i, d)
		}
		if r.Batching == "greedy" && r.Report.Dispatch.Waited != 0 {
			t.Errorf("row %d: greedy waited %d times", i, r.Report.Dispatch.Waited)
		}
	}
	// A loaded machine runs the 2ms sleep late, never early: the whole
	// suite's tests beside this one have had it measure 3.4ms.
	if c := rows[3].Report.Cost; !c.Fitted || c.FixedMs < 1.5 || c.FixedMs > 5 {
		t.Errorf("adaptive at 4 clients fitted %+v, want about 2ms fixed (at most 5 on a loaded machine)", c)
	}
}

// A server started with --auth-token is loaded with its token, and so is a
// --target that wants one; without it every request is a 401, and the run
// exits 1.
func TestBenchSendsTheAuthToken(t *testing.T) {
	rep, _ := benchJSON(t, "--model", "echo", "--workers", "1", "--concurrency", "4", "--duration", "500ms", "--auth-token", "bench-tok")
	if rep.Requests == 0 || len(rep.Errors) != 0 || rep.MeanBatchSize == 0 {
		t.Errorf("bench of its own server with a token: %d requests, errors %v, mean batch %.2f; want answers, no errors and batch figures", rep.Requests, rep.Errors, rep.MeanBatchSize)
	}
	s := startServer(t, "--workers", "1", "--auth-token", "target-tok")
	rep, _ = benchJSON(t, "--target", s.URL(), "--concurrency", "4", "--duration", "500ms", "--auth-token", "target-tok")
	if rep.Requests == 0 || len(rep.Errors) != 0 {
		t.Errorf("bench of a target with its token: %d requests, errors %v", rep.Requests, rep.Errors)
	}
	rep, _ = benchJSONExiting(t, 1, "--target", s.URL(), "--concurrency", "4", "--duration", "300ms")
	if rep.Requests != 0 || rep.Errors["http 401"] == 0 {
		t.Errorf("bench of a target without its token: %d requests, errors %v; want only 401s", rep.Requests, rep.Errors)
	}
}

// hangingServer answers /v1/stats but takes every /predict and never
// answers it, until the test ends.
func hangingServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so that the server notices the client leave
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"batch_sizes": []}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv
}

// A server that never answers is no run: its requests time out, are
// counted as such, and the ones still out at the end are reported; the
// exit status says so. Without a timeout short enough to see, the report
// says how many requests were waiting, and for how long.
func TestBenchAgainstAServerThatDoesNotAnswer(t *testing.T) {
	srv := hangingServer(t)
	rep, keys := benchJSONExiting(t, 1, "--target", srv.URL, "--concurrency", "4", "--duration", "1s", "--request-timeout", "300ms")
	if rep.Requests != 0 || rep.Errors["timeout"] < 4 || !strings.Contains(rep.FirstErrors["timeout"], "timed out after 300ms") {
		t.Errorf("%d requests, errors %v, first %v; want timeouts alone, saying after how long", rep.Requests, rep.Errors, rep.FirstErrors)
	}
	if rep.InFlightAtEnd != 4 || string(keys["in_flight_at_end"]) != "4" {
		t.Errorf("in_flight_at_end %s; want the 4 clients' last requests", keys["in_flight_at_end"])
	}
	res := runBenchCmd(t, "--target", srv.URL, "--concurrency", "4", "--duration", "1s", "--warmup", "0")
	if res.code != 1 || !strings.Contains(res.stderr, "none was answered in the window, and 4 were still waiting for an answer at its end") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, saying that 4 requests were still waiting", res.code, res.stderr)
	}
	if !strings.Contains(res.stdout, "in flight     4 at the end") || !strings.Contains(res.stdout, "errors        none") {
		t.Errorf("the table does not say what was in flight at the end:\n%s", res.stdout)
	}
}

// statsOnceTarget is a target that answers its first GET /v1/stats, then
// takes every request and answers none: a server that hangs between the
// window's start and its end. It sends the path of each request it leaves
// unanswered on hung.
func statsOnceTarget(t *testing.T) (url string, hung <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	paths := make(chan string, 64)
	var answered atomic.Bool
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	stats := `{"batch_sizes": []}`
	serve := func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.URL.Path == "/v1/stats" && answered.CompareAndSwap(false, true) {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(stats))+"\r\n\r\n"+stats)
				continue
			}
			select {
			case paths <- req.URL.Path:
			default:
			}
			_, _ = io.Copy(io.Discard, c) // unanswered until the client leaves
			return
		}
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	return "http://" + l.Addr().String(), paths
}

// startBenchWaitingForStats starts bench against a statsOnceTarget and
// returns once bench waits for the target's stats at the window's end.
// --request-timeout, which bounds that read otherwise, is a minute.
func startBenchWaitingForStats(t *testing.T) *benchRun {
	t.Helper()
	url, hung := statsOnceTarget(t)
	run := startBench(t, "--target", url, "--concurrency", "2", "--duration", "300ms", "--warmup", "0", "--request-timeout", "1m")
	deadline := time.After(benchTimeout)
	for {
		select {
		case path := <-hung:
			if path == "/v1/stats" {
				return run
			}
		case <-run.exited:
			t.Fatalf("bench exited before reading the stats at the window's end\nstderr:\n%s", run.stderr.String())
		case <-deadline:
			t.Fatalf("bench did not read the stats at the window's end within %s\nstderr:\n%s", benchTimeout, run.stderr.String())
		}
	}
}

// Ctrl-C while bench waits for a target's stats at the window's end gives
// the read up within seconds, not --request-timeout, and the report of the
// window still comes; a second Ctrl-C, once the first has ended the run,
// kills bench as it would any program.
func TestBenchInterruptedWhileTheTargetHangs(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		run := startBenchWaitingForStats(t)
		if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		run.waitExit(t, 10*time.Second, "SIGINT, waiting for the stats of a target that does not answer")
		stderr := run.stderr.String()
		if code := run.cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr, "did not answer its stats within 2s") {
			t.Errorf("exit %d, stderr:\n%s\nwant 1, saying the stats read was given up after the interrupt", code, stderr)
		}
		if !strings.Contains(run.stdout.String(), "requests/s") {
			t.Errorf("no report of the window:\n%s", run.stdout.String())
		}
	})
	t.Run("twice", func(t *testing.T) {
		run := startBenchWaitingForStats(t)
		// Interrupts until bench ends: the first ends the run, and one
		// after it must kill bench well before the 2s its stats read
		// still has. SIGTERM, which bench takes as it takes SIGINT: a
		// test run in the background of a shell without job control
		// starts bench with SIGINT ignored, as its parent was, and a
		// process lets go of a signal back to what it inherited.
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for sent := 0; ; sent++ {
			if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil && sent == 0 {
				t.Fatal(err)
			}
			select {
			case <-run.exited:
			case <-tick.C:
				continue
			}
			break
		}
		ws, _ := run.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Errorf("bench ended with %v after repeated interrupts; want killed by SIGTERM\nstderr:\n%s", run.cmd.ProcessState, run.stderr.String())
		}
	})
}

// A server killed in the middle of the window: the report still comes,
// with what the clients measured and the batch figures said to be missing
// rather than printed as zeros, and the exit status says the run failed.
func TestBenchServerDiesMidRun(t *testing.T) {
	s := startServer(t, "--model", "echo", "--workers", "1")
	run := startBench(t, "--target", s.URL(), "--concurrency", "4", "--duration", "3s", "--warmup", "0")
	cmd, stdout, stderr := run.cmd, run.stdout, run.stderr
	// The window's first read of the stats comes before this line.
	waitFor(t, "the load to run", readyTimeout, func() bool { return strings.Contains(stderr.String(), "loading for") })
	if err := s.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	run.waitExit(t, benchTimeout, "its server died")
	if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "the server stopped answering") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, saying the server stopped answering", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"requests/s", "batch figures unavailable: read the server's stats at the window's end", "connection"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mean batch") || strings.Contains(out, "dispatched") {
		t.Errorf("the report prints batch figures it does not have:\n%s", out)
	}
}

// A sweep in which every request of a run failed says so: an errors column,
// the errors by kind below the table, and exit status 1, as a single run.
func TestBenchSweepWithFailedRuns(t *testing.T) {
	res := runBenchCmd(t, "--sweep-concurrency", "1,2", "--model", "chaos:reject=x", "--input", `"x"`, "--duration", "500ms", "--warmup", "0")
	if res.code != 1 || !strings.Contains(res.stderr, "1 clients, adaptive: no request succeeded") || !strings.Contains(res.stderr, "2 clients, adaptive: no request succeeded") {
		t.Errorf("exit %d, stderr:\n%s\nwant 1, naming each run that failed", res.code, res.stderr)
	}
	lines := strings.Split(res.stdout, "\n")
	if len(lines) < 3 || !strings.HasSuffix(lines[0], "errors") {
		t.Fatalf("stdout:\n%s\nwant the table with an errors column", res.stdout)
	}
	for _, row := range lines[1:3] {
		if f := strings.Fields(row); len(f) == 0 || f[len(f)-1] == "0" {
			t.Errorf("row %q counts no errors", row)
		}
	}
	if !strings.Contains(res.stdout, "errors of 1 clients, adaptive:") || !strings.Contains(res.stdout, `chaos: item \"x\" rejected`) {
		t.Errorf("the errors are not listed by kind below the table:\n%s", res.stdout)
	}
}

// An interrupted sweep prints the runs that completed before the
// interrupt, and exits non-zero.
func TestBenchSweepInterrupted(t *testing.T) {
	run := startBench(t, "--model", "echo", "--workers", "1", "--sweep-concurrency", "1,2,4", "--duration", "1s", "--warmup", "0")
	cmd, stdout, stderr := run.cmd, run.stdout, run.stderr
	waitFor(t, "the first run to end", readyTimeout, func() bool { return strings.Contains(stderr.String(), "streamer bench: 1 clients, adaptive:") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	run.waitExit(t, stopTimeout, "SIGINT")
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(stderr.String(), "interrupted in the run of 2 clients, adaptive") {
		t.Errorf("exit %d, stderr:\n%s\nwant an error saying where the sweep was interrupted", cmd.ProcessState.ExitCode(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(strings.TrimSpace(lines[1]), "1        1  adaptive") {
		t.Errorf("stdout:\n%s\nwant the table of the one run that completed", stdout.String())
	}
}

// TestBenchOverGRPC: --protocol grpc loads the gRPC service of the server
// bench starts, and of a --target through --grpc-target, with its token;
// the server admits what bench reports answered.
func TestBenchOverGRPC(t *testing.T) {
	rep, _ := benchJSON(t, "--model", "echo", "--workers", "1", "--protocol", "grpc", "--concurrency", "4", "--duration", "500ms", "--auth-token", "tok")
	if rep.Requests == 0 || len(rep.Errors) != 0 || rep.MeanBatchSize == 0 {
		t.Errorf("bench over gRPC of its own server: %d requests, errors %v, mean batch %.2f", rep.Requests, rep.Errors, rep.MeanBatchSize)
	}
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--workers", "1", "--grpc-listen", addr, "--auth-token", "target-tok")
	s.token = "target-tok"
	before := s.stats(t)
	rep, _ = benchJSON(t, "--target", s.URL(), "--grpc-target", addr, "--protocol", "grpc", "--model", "echo", "--items-per-request", "3",
		"--concurrency", "4", "--duration", "500ms", "--auth-token", "target-tok")
	after := s.stats(t)
	if rep.Requests == 0 || len(rep.Errors) != 0 {
		t.Fatalf("bench over gRPC of a target: %d requests, errors %v", rep.Requests, rep.Errors)
	}
	if got := after.Submitted - before.Submitted; got < 3*uint64(rep.Requests) {
		t.Errorf("the server admitted %d items, bench reports %d answered requests of 3", got, rep.Requests)
	}
	// The same on Triton's streaming call: 70 clients, so two connections
	// of 64 at most, each one call.
	before = s.stats(t)
	rep, _ = benchJSON(t, "--target", s.URL(), "--grpc-target", addr, "--protocol", "grpc", "--grpc-stream", "--model", "echo", "--items-per-request", "3",
		"--concurrency", "70", "--duration", "500ms", "--auth-token", "target-tok")
	after = s.stats(t)
	if rep.Requests == 0 || len(rep.Errors) != 0 {
		t.Fatalf("bench over gRPC streams of a target: %d requests, errors %v", rep.Requests, rep.Errors)
	}
	if got := after.Submitted - before.Submitted; got < 3*uint64(rep.Requests) {
		t.Errorf("the server admitted %d items, bench reports %d answered requests of 3 on streams", got, rep.Requests)
	}
	if got := metricValue(t, s, `streamer_requests_total{outcome="ok"}`); got < float64(rep.Requests) {
		t.Errorf("the server counted %v requests answered, bench %d on streams", got, rep.Requests)
	}
	// A server that refuses every call alike stops the load early, as over
	// http.
	refuser := freePort(t)
	r := startServer(t, "--model", "echo", "--workers", "1", "--grpc-listen", refuser, "--max-items", "2")
	res := runBenchCmd(t, "--target", r.URL(), "--grpc-target", refuser, "--protocol", "grpc", "--model", "echo", "--items-per-request", "3",
		"--concurrency", "2", "--duration", "20s")
	if res.code != 1 || !strings.Contains(res.stderr, "the server refuses the requests as they are") || !strings.Contains(res.stderr, "grpc ResourceExhausted") {
		t.Errorf("bench over gRPC of a server that refuses every call: exit %d, stderr %q; want the load stopped early", res.code, res.stderr)
	}
	// The model's metadata is read over http, with the token too.
	res = runBenchCmd(t, "--target", s.URL(), "--grpc-target", addr, "--protocol", "grpc", "--model", "echo",
		"--concurrency", "2", "--duration", "300ms", "--auth-token", "wrong")
	if res.code == 0 || !strings.Contains(res.stderr, "read the model's metadata") || !strings.Contains(res.stderr, "401") {
		t.Errorf("bench over gRPC with the wrong token: exit %d, stderr %q; want the metadata's 401", res.code, res.stderr)
	}
}

// TestBenchTrustsTheCAItIsGiven: bench loads a server whose certificate a
// private CA signed once --ca names that CA, over http and gRPC, and
// without it fails every request on the certificate.
func TestBenchTrustsTheCAItIsGiven(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "bench")
	pair := writeCertPair(t, dir, ca, 9)
	caFile := ca.write(t, dir)
	grpcAddr := freePort(t)
	s := launchServer(t, "--workers", "1", "--model", "echo", "--tls-cert", pair.cert, "--tls-key", pair.key, "--grpc-listen", grpcAddr)
	target := "https://" + s.addr
	s.waitFor(t, "status to answer over https", readyTimeout, func() bool {
		_, err := runStatusWith(t, nil, "--target", target, "--ca", caFile)
		return err == nil
	})
	for _, args := range [][]string{{"--protocol", "predict"}, {"--protocol", "grpc", "--grpc-target", grpcAddr, "--model", "echo"}} {
		rep, _ := benchJSON(t, append([]string{"--target", target, "--ca", caFile, "--concurrency", "2", "--duration", "500ms"}, args...)...)
		if rep.Requests == 0 {
			t.Errorf("bench --ca %v: no request answered", args)
		}
	}
	rep, _ := benchJSONExiting(t, 1, "--target", target, "--concurrency", "2", "--duration", "500ms")
	if rep.Requests != 0 || !strings.Contains(fmt.Sprint(rep.FirstErrors), "certificate") {
		t.Errorf("bench without the CA: %d answered, first errors %v; want none, refused on the certificate", rep.Requests, rep.FirstErrors)
	}
}

// The limit a run is measured against is the sleep model's at the largest
// batch the server can form: fewer items than --batch-size when
// --max-queue (a multiple of --items-per-request) or --max-batch-bytes
// allow fewer. At --batch-size, a server
// whose batches could never be that large seemed to reach a fifth of its
// best.
func TestBenchLimitIsAtTheLargestBatchTheServerCanForm(t *testing.T) {
	const model = "sleep:2ms,10us"
	for _, tc := range []struct {
		args  []string
		batch int
	}{
		{[]string{"--max-queue", "16"}, 16},
		{[]string{"--max-batch-bytes", "200"}, 200 / 16}, // --input's item, 16 bytes encoded
		// The queue admits whole requests: 5 of 3 items at most, not 16.
		{[]string{"--max-queue", "16", "--items-per-request", "3"}, 15},
	} {
		rep, _ := benchJSON(t, append([]string{"--model", model, "--workers", "1", "--batch-size", "64", "--concurrency", "4",
			"--duration", "300ms", "--warmup", "0", "--input", `"fifteen chars.."`}, tc.args...)...)
		if want := bench.SleepLimit(model, 1, tc.batch); rep.LimitItemsPerS != want {
			t.Errorf("%v: limit %.0f items/s, want %.0f, at batches of %d", tc.args, rep.LimitItemsPerS, want, tc.batch)
		}
	}
}
