package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

// validConfig is a config that check accepts.
func validConfig() Config {
	return Config{Concurrency: 4, Duration: time.Second, Input: `"x"`, ItemsPerRequest: 1, RequestTimeout: 30 * time.Second}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"no clients", func(c *Config) { c.Concurrency = 0 }, "--concurrency 0: want at least 1"},
		{"too many clients", func(c *Config) { c.Concurrency = 10_000_000 }, "--concurrency 10000000: want at most 65536"},
		{"no items", func(c *Config) { c.ItemsPerRequest = 0 }, "--items-per-request 0: want at least 1"},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "--duration 0s: must be positive"},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "--warmup -1s: must not be negative"},
		{"negative rate", func(c *Config) { c.Rate = -5 }, "--rate -5: want a positive number"},
		{"rate not a number", func(c *Config) { c.Rate = math.NaN() }, "--rate NaN: want a positive number"},
		{"infinite rate", func(c *Config) { c.Rate = math.Inf(1) }, "--rate +Inf: want at most 1e+06"},
		{"rate too high", func(c *Config) { c.Rate = 1e9 }, "--rate 1e+09: want at most 1e+06"},
		{"rate below one request", func(c *Config) { c.Rate = 1e-10 }, "--rate 1e-10: less than one request in the 1s"},
		{"rate of one in the load", func(c *Config) { c.Rate, c.Warmup, c.Duration = 0.5, time.Second, time.Second }, ""},
		{"too many items", func(c *Config) { c.ItemsPerRequest = 1e9 }, "--items-per-request 1000000000: want at most 65536"},
		{"more items than its server takes", func(c *Config) { c.ItemsPerRequest, c.MaxItems = 5, 4 }, "--items-per-request 5: more than the server's --max-items 4"},
		{"more items than a target takes", func(c *Config) { c.ItemsPerRequest, c.MaxItems, c.Target = 5, 4, "http://127.0.0.1:26001" }, ""},
		{"a body too large", func(c *Config) { c.ItemsPerRequest, c.Input = 65536, `"`+strings.Repeat("x", 8190)+`"` }, "requests of about 512 MiB; want at most 256 MiB"},
		{"duration overflows", func(c *Config) { c.Duration, c.Warmup = 2562047*time.Hour, time.Hour }, "--duration 2562047h0m0s with --warmup 1h0m0s: together they overflow"},
		{"target port too high", func(c *Config) { c.Target = "http://127.0.0.1:99999" }, `port 99999: want 1 to 65535`},
		{"target port zero", func(c *Config) { c.Target = "http://127.0.0.1:0" }, `port 0: want 1 to 65535`},
		{"target with a query", func(c *Config) { c.Target = "http://127.0.0.1:22001?x=1" }, "want no query or fragment"},
		{"target with an empty query", func(c *Config) { c.Target = "http://127.0.0.1:22001/?" }, "want no query or fragment"},
		{"target with a fragment", func(c *Config) { c.Target = "http://127.0.0.1:22001/#top" }, "want no query or fragment"},
		{"target with a user", func(c *Config) { c.Target = "http://u:p@127.0.0.1:22001" }, `--target "http://u:xxxxx@127.0.0.1:22001": want no user or password`},
		{"target with a user and a query", func(c *Config) { c.Target = "http://u:s3cret@127.0.0.1:22001?x=1" }, `--target "http://u:xxxxx@127.0.0.1:22001?x=1": want no query`},
		{"target with a user, its scheme forgotten", func(c *Config) { c.Target = "u:s3cret@127.0.0.1:22001" }, `--target "…@127.0.0.1:22001": want an http:// or https:// URL`},
		{"target with a user, not a URL", func(c *Config) { c.Target = "http://u:s3cret@127.0.0.1:22%01" }, `--target "http://…@127.0.0.1:22%01": want an http:// or https:// URL`},
		{"target with a path", func(c *Config) { c.Target = "http://127.0.0.1:22001/models/a/" }, ""},
		{"unknown api", func(c *Config) { c.API = "grpc" }, `--api "grpc": want http or go`},
		{"no request timeout", func(c *Config) { c.RequestTimeout = 0 }, "--request-timeout 0s: must be positive"},
		{"go api with target", func(c *Config) { c.API, c.Target = APIGo, "http://127.0.0.1:1" }, "--api go runs its own supervisor"},
		{"target not http", func(c *Config) { c.Target = "ftp://h:21" }, "want an http:// or https:// URL"},
		{"target without host", func(c *Config) { c.Target = "http://" }, "want an http:// or https:// URL"},
		{"target without a scheme", func(c *Config) { c.Target = "127.0.0.1:5005" }, `--target "127.0.0.1:5005": want an http:// or https:// URL such as http://127.0.0.1:5005`},
		{"input not JSON", func(c *Config) { c.Input = "hello" }, `--input "hello" is not JSON`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			tc.change(&cfg)
			item, err := cfg.check()
			if tc.want == "" {
				if err != nil || item != "x" || cfg.API != APIHTTP {
					t.Fatalf("check() = %v, %v, API %q; want the item, no error, API http", item, err, cfg.API)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("check() error %v; want one that says %q", err, tc.want)
			}
		})
	}
}

func TestInWindow(t *testing.T) {
	const warmup = 100 * time.Millisecond
	samples := []sample{
		{at: 10 * time.Millisecond, latency: 20 * time.Millisecond}, // answered in the warm-up
		{at: 90 * time.Millisecond, latency: 20 * time.Millisecond}, // sent in the warm-up, answered after
		{at: 150 * time.Millisecond, latency: 1 * time.Millisecond}, // inside
		{at: 100 * time.Millisecond, latency: 0},                    // at the edge
	}
	got := inWindow(samples, warmup)
	want := []time.Duration{-10 * time.Millisecond, 50 * time.Millisecond, 0}
	if len(got) != len(want) {
		t.Fatalf("kept %d samples %+v; want %d", len(got), got, len(want))
	}
	for i, s := range got {
		if s.at != want[i] {
			t.Errorf("sample %d at %s; want %s from the window's start", i, s.at, want[i])
		}
	}
}

func TestNewReport(t *testing.T) {
	kinds := newErrorKinds()
	refused := kinds.id("http 429", nil)
	refusedConn := kinds.id(kindConnection, errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	var samples []sample
	for i := 1; i <= 100; i++ {
		samples = append(samples, sample{latency: time.Duration(i) * time.Millisecond})
	}
	counted := tally{failures: map[uint16]uint64{refused: 2, refusedConn: 7}, cutShort: 3, oldest: 1500 * time.Microsecond}
	before := supervisor.Stats{BatchSizes: []uint64{0, 5, 0, 1}}
	after := supervisor.Stats{BatchSizes: []uint64{0, 15, 0, 11, 4}}
	r := newReport(samples, counted, kinds, 2*time.Second, 3)
	r.BatchFigures = batchFigures(serverStats{Stats: before}, serverStats{Stats: after})
	if r.Requests != 100 || r.RequestsPerS != 50 || r.ItemsPerS != 150 {
		t.Errorf("requests %d, %v/s, items %v/s; want 100, 50, 150", r.Requests, r.RequestsPerS, r.ItemsPerS)
	}
	if want := (Latencies{P50: 50, P90: 90, P99: 99, Max: 100}); r.LatencyMS != want {
		t.Errorf("latencies %+v; want %+v", r.LatencyMS, want)
	}
	if want := map[int]uint64{1: 10, 3: 10, 4: 4}; !mapsEqual(r.BatchSizes, want) {
		t.Errorf("batch sizes %v; want the difference %v", r.BatchSizes, want)
	}
	if want := (10.0 + 30 + 16) / 24; r.MeanBatchSize != want {
		t.Errorf("mean batch %v; want %v", r.MeanBatchSize, want)
	}
	if r.InFlightAtEnd != 3 || r.OldestInFlightMS != 1.5 {
		t.Errorf("in flight at the end %d, the oldest %v ms; want 3 and 1.5", r.InFlightAtEnd, r.OldestInFlightMS)
	}
	if r.Errors["http 429"] != 2 || r.Errors[kindConnection] != 7 || len(r.Errors) != 2 {
		t.Errorf("errors %v; want 2 of http 429 and 7 of connection", r.Errors)
	}
	if want := map[string]string{kindConnection: "dial tcp 127.0.0.1:1: connect: connection refused"}; !maps.Equal(r.FirstErrors, want) {
		t.Errorf("first errors %v; want %v, and nothing for the kind that says it all", r.FirstErrors, want)
	}
	r.setLimit(300)
	if r.LimitItemsPerS != 300 || r.OfLimit == nil || *r.OfLimit != 0.5 {
		t.Errorf("limit %v, of limit %v; want 300, 0.5", r.LimitItemsPerS, r.OfLimit)
	}
	// A run that answered nothing reached 0 of its limit, and says so.
	var none Report
	none.setLimit(300)
	encoded, err := json.Marshal(none)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(encoded, []byte(`"limit_items_per_s":300,"of_limit":0`)) {
		t.Errorf("a run that answered nothing: %s; want of_limit 0 beside its limit", encoded)
	}
}

// The nearest rank: the pth percentile of n sorted values is the
// ⌈p/100·n⌉th, whether p/100·n is whole or not.
func TestNearestRank(t *testing.T) {
	for _, tc := range []struct {
		perTenThousand, n, want int
	}{
		{9900, 100, 98}, // p99 of 100 is the 99th, not the slowest
		{9000, 100, 89},
		{5000, 100, 49},
		{10000, 100, 99},
		{9900, 101, 99}, // 99.99 rounds up to the 100th
		{5000, 1, 0},
		{5000, 3, 1},
		{9000, 10, 8},
		{9900, 1000, 989},
		{0, 10, 0}, // the least, never index -1
	} {
		if got := nearestRank(tc.perTenThousand, tc.n); got != tc.want {
			t.Errorf("nearestRank(%d, %d) = %d; want %d", tc.perTenThousand, tc.n, got, tc.want)
		}
	}
}

func mapsEqual(a, b map[int]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestReportPrint(t *testing.T) {
	var out strings.Builder
	Report{Requests: 3, Seconds: 1, BatchFigures: &BatchFigures{BatchSizes: map[int]uint64{2: 1, 8: 4}}, Errors: map[string]uint64{"connection": 1}}.Print(&out)
	for _, want := range []string{"requests      3 in 1.0s", "batch sizes", "     2         1  " + strings.Repeat("#", 10) + "\n", "     8         4  " + strings.Repeat("#", 40), "connection"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSleepLimit(t *testing.T) {
	for _, tc := range []struct {
		spec           string
		workers, batch int
		want           float64
	}{
		{"sleep:10ms,100us", 4, 64, 4 * 64 / (16.4e-3)},
		{"sleep:2ms,0s", 1, 1, 500},
		{"echo", 4, 64, 0},
		{"sleep:bad", 1, 8, 0},
		{"sleep:0s,0s", 1, 8, 0},
	} {
		if got := SleepLimit(tc.spec, tc.workers, tc.batch); got < tc.want*(1-1e-9) || got > tc.want*(1+1e-9) {
			t.Errorf("SleepLimit(%q, %d, %d) = %v; want %v", tc.spec, tc.workers, tc.batch, got, tc.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	k := newErrorKinds()
	if k.id("", nil) != 0 || k.kind(0).name != "" {
		t.Error("success is not kind 0")
	}
	a, b := k.id("a", nil), k.id("b", nil)
	if a == b || k.id("a", nil) != a || k.kind(a).name != "a" || k.kind(b).name != "b" {
		t.Errorf("ids a=%d b=%d do not name their kinds", a, b)
	}
	// The first failure that says something is kept, not the later ones.
	k.id("a", errors.New("first"))
	k.id("a", errors.New("second"))
	if got := k.kind(a).first; got != "first" {
		t.Errorf("kind a's first text %q; want %q", got, "first")
	}
	if got := k.kind(b).first; got != "" {
		t.Errorf("kind b's first text %q; want none", got)
	}
}

func TestLoops(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		var inFlight, most atomic.Int32
		send := func(ctx context.Context) (uint16, bool) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // a request's cost, not a wait for a state
			return 0, false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		counted := closedLoop(ctx, loadRun{send: send, start: time.Now()}, 3)
		if len(counted.samples) < 10 || most.Load() > 3 {
			t.Errorf("%d samples, at most %d in flight; want many, and never more than 3 clients", len(counted.samples), most.Load())
		}
	})
	t.Run("open, in-flight limit", func(t *testing.T) {
		release := make(chan struct{})
		send := func(ctx context.Context) (uint16, bool) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return 0, false
		}
		ctx, cancel := context.WithCancel(context.Background())
		run := loadRun{send: send, start: time.Now()}
		done := make(chan tally)
		go func() { done <- openLoop(ctx, run, 1000, 1, time.Minute) }()
		time.AfterFunc(100*time.Millisecond, cancel)
		counted := <-done
		close(release)
		if len(counted.samples) != 0 || len(counted.failures) != 0 || counted.cutShort != 1 {
			t.Fatalf("samples %v, failures %v, %d cut short: the one request in flight never returned before the end, so every other send must be skipped", counted.samples, counted.failures, counted.cutShort)
		}
		if counted.skipped < 50 || counted.scheduled != counted.skipped+1 {
			t.Errorf("%d of %d scheduled sends skipped in 100ms at 1000/s; want most of 100, all but the first", counted.skipped, counted.scheduled)
		}
	})
}

// A schedule whose next send lies past the end of the load sends nothing
// more: at 1e-12 requests a second the second send's time does not fit a
// duration, and converted it comes out in the past.
func TestOpenLoopSchedulesNothingPastTheEnd(t *testing.T) {
	var sent atomic.Int32
	send := func(context.Context) (uint16, bool) {
		sent.Add(1)
		return 0, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	counted := openLoop(ctx, loadRun{send: send, start: time.Now()}, 1e-12, 4, 10*time.Millisecond)
	if sent.Load() != 1 || len(counted.samples) != 1 || counted.samples[0].at != 0 {
		t.Errorf("%d sent, samples %+v; want the one send at 0", sent.Load(), counted.samples)
	}
}

// A closed-loop client that meets connection errors pauses after each,
// longer each time up to maxBackoff, and counts every failure rather than
// keeping a sample of it: against a port nobody listens on, a few clients
// without the pause sent a million requests in three seconds.
func TestClosedLoopBacksOffAfterConnectionErrors(t *testing.T) {
	const connection = 1
	var sent atomic.Int64
	send := func(context.Context) (uint16, bool) {
		sent.Add(1)
		return connection, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	counted := closedLoop(ctx, loadRun{send: send, start: time.Now(), backOffAfter: []uint16{connection}}, 4)
	// 1+2+4+8+16+32+64+100 ms: at most nine sends of each client in 300ms.
	if n := sent.Load(); n < 4 || n > 4*10 {
		t.Errorf("%d sends of 4 clients in 300ms against connection errors; want at most 40", n)
	}
	// A send the end of the load cut short is not counted: one per client.
	if f, n := counted.failures[connection], uint64(sent.Load()); len(counted.samples) != 0 || f > n || f+4 < n {
		t.Errorf("samples %v, failures %v; want the %d failures counted, but for the last of each client, and no sample kept", counted.samples, counted.failures, n)
	}
}

// A closed-loop client refused for want of room pauses as after a
// connection error, whatever API said so. Before, it sent again at once:
// against a server with --max-queue 10, 64 clients sent two million
// requests in two seconds, their loop took the CPU the server's workers
// ran on, and the figures were the load client's.
func TestClosedLoopBacksOffWhenTheServerIsFull(t *testing.T) {
	for _, kind := range overloadKinds {
		t.Run(kind, func(t *testing.T) {
			cfg := Config{Concurrency: 4, Duration: 300 * time.Millisecond}
			var sent atomic.Int64
			send := func(ctx context.Context) (string, error) {
				if ctx.Err() != nil {
					return "", nil
				}
				sent.Add(1)
				return kind, errors.New("the queue is full")
			}
			_, _, refused := cfg.load(context.Background(), send)
			// 1+2+4+8+16+32+64+100 ms: at most nine sends of each client
			// in 300 ms.
			if n := sent.Load(); refused != nil || n < 4 || n > 4*10 {
				t.Errorf("%d sends of 4 clients in 300ms, all refused for want of room (%v); want at most 40, and the load not stopped", n, refused)
			}
		})
	}
}

// The report says when more than a few requests were refused for want of
// room: the figures are those of a server overloaded.
func TestTheReportWarnsOfAnOverloadedServer(t *testing.T) {
	for _, tc := range []struct {
		refused int
		warned  bool
	}{{1, false}, {20, true}} {
		var out strings.Builder
		Report{Requests: 980, Errors: map[string]uint64{"http 429": uint64(tc.refused)}}.Print(&out)
		if got := strings.Contains(out.String(), "of the requests were refused for want of room"); got != tc.warned {
			t.Errorf("%d of %d refused: warned %v, want %v:\n%s", tc.refused, 980+tc.refused, got, tc.warned, out.String())
		}
	}
	// An open loop's clients do not pause: the warning says so.
	var out strings.Builder
	Report{Requests: 980, Errors: map[string]uint64{"http 429": 20}, openLoop: true}.Print(&out)
	if !strings.Contains(out.String(), "the schedule sent on regardless") || strings.Contains(out.String(), "paused") {
		t.Errorf("an open loop's warning:\n%s\nwant it to say the schedule sent on", out.String())
	}
	// Nor is a sweep's row over the bound left unmarked.
	out.Reset()
	PrintSweep(&out, 1, []SweepRow{{Batching: "adaptive", Clients: 32, Report: Report{Requests: 400, Errors: map[string]uint64{"http 429": 200}}}})
	if !strings.Contains(out.String(), "!! 33.3% of the requests were refused for want of room") {
		t.Errorf("a sweep with a third of a row's requests refused:\n%s\nwant the row warned of", out.String())
	}
}

func TestBackoffDoublesToItsBoundAndResets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // each wait returns at once: only the pauses are looked at
	var b backoff
	defer b.stop()
	var got []time.Duration
	for range 9 {
		b.wait(ctx)
		got = append(got, b.pause)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 100, 100}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Errorf("pauses %v; want %v", got, want)
	}
	b.reset()
	if b.wait(ctx); b.pause != minBackoff {
		t.Errorf("pause after a reset %s; want %s", b.pause, minBackoff)
	}
}

// Against a port nobody listens on, the report counts the refusals, a few
// of them, and says what they were.
func TestRunAgainstAClosedPortSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := validConfig()
	cfg.Target = "http://" + addr
	cfg.Duration, cfg.Warmup = 300*time.Millisecond, 0
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := res.Report.Errors[kindConnection]
	if res.Report.Requests != 0 || n == 0 || n > 100 || len(res.Report.Errors) != 1 {
		t.Errorf("%d requests, errors %v; want a few dozen connection errors at most, from 4 clients pausing after each", res.Report.Requests, res.Report.Errors)
	}
	if first := res.Report.FirstErrors[kindConnection]; !strings.Contains(first, "connection refused") || !strings.Contains(first, addr) {
		t.Errorf("first connection error %q; want the refusal, naming %s", first, addr)
	}
	var out strings.Builder
	res.Report.Print(&out)
	if !strings.Contains(out.String(), "first: dial tcp "+addr) {
		t.Errorf("the table does not give the first error's text:\n%s", out.String())
	}
}

// A server that takes the requests and never answers them: with a request
// timeout shorter than the run, the requests fail as timeouts; with a
// longer one, none is answered, and the report says how many were still
// waiting at the end and for how long. Either way the run is no
// measurement, and says where to look.
func TestRunAgainstAServerThatDoesNotAnswer(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		// Read to the end, so that the server notices the client leave.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"batch_sizes": []}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(release)
	for _, tc := range []struct {
		name       string
		timeout    time.Duration
		wantErrors bool
		wantErr    string
	}{
		{"timed out", 100 * time.Millisecond, true, "no request succeeded: "},
		{"still waiting", time.Minute, false, "none was answered in the window, and 4 were still waiting for an answer at its end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Target, cfg.RequestTimeout = srv.URL, tc.timeout
			cfg.Duration, cfg.Warmup = 400*time.Millisecond, 0
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if rep.Requests != 0 || (rep.Errors[kindTimeout] > 0) != tc.wantErrors || len(rep.Errors) > 1 {
				t.Errorf("%d requests, errors %v; want none answered, and timeouts: %v", rep.Requests, rep.Errors, tc.wantErrors)
			}
			if tc.wantErrors && !strings.Contains(rep.FirstErrors[kindTimeout], "timed out after 100ms") {
				t.Errorf("first timeout %q; want it to say after how long", rep.FirstErrors[kindTimeout])
			}
			// Each of the 4 clients has a request out at the end; without a
			// timeout, it has waited the whole load.
			if rep.InFlightAtEnd != 4 || rep.OldestInFlightMS > 1.5*ms(max(min(tc.timeout, cfg.Duration), 0)) ||
				!tc.wantErrors && rep.OldestInFlightMS < 0.9*ms(cfg.Duration) {
				t.Errorf("%d in flight at the end, the oldest for %.1f ms; want 4, none older than the timeout or the load", rep.InFlightAtEnd, rep.OldestInFlightMS)
			}
			if res.Err == nil || !strings.Contains(res.Err.Error(), tc.wantErr) {
				t.Errorf("Err = %v; want one that says %q", res.Err, tc.wantErr)
			}
			var out strings.Builder
			rep.Print(&out)
			if !strings.Contains(out.String(), "in flight     4 at the end") {
				t.Errorf("the table does not say what was in flight at the end:\n%s", out.String())
			}
		})
	}
}

// The first failure of each kind says what went wrong, so that a refused
// connection, a certificate not trusted, https spoken to an http server and
// http spoken to an https one tell themselves apart, and the server's own
// words on a refused request show.
func TestRunSaysWhyRequestsFail(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "5000 items: more than --max-items 4096", http.StatusRequestEntityTooLarge)
	})
	quiet := func(tls bool) *httptest.Server {
		srv := httptest.NewUnstartedServer(mux)
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes that fail on purpose
		if tls {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		return srv
	}
	plain, tlsSrv := quiet(false), quiet(true)
	for _, tc := range []struct {
		name, target, kind, want string
	}{
		{"refused by the server", plain.URL, "http 413", "5000 items: more than --max-items 4096"},
		{"certificate not trusted", tlsSrv.URL, kindConnection, "certificate"},
		{"https to an http server", "https://" + plain.Listener.Addr().String(), kindConnection, "server gave HTTP response to HTTPS client"},
		{"http to an https server", "http://" + tlsSrv.Listener.Addr().String(), "http 400", "Client sent an HTTP request to an HTTPS server."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Target = tc.target
			cfg.Duration, cfg.Warmup = 200*time.Millisecond, 0
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if rep.Errors[tc.kind] == 0 || len(rep.Errors) != 1 || !strings.Contains(rep.FirstErrors[tc.kind], tc.want) {
				t.Errorf("errors %v, first %q; want %s alone, the first saying %q", rep.Errors, rep.FirstErrors, tc.kind, tc.want)
			}
		})
	}
}

// An open loop that the server does not keep up with skips sends; the
// report says how many and what share of the schedule, and past 1% the run
// is no measurement of the rate asked for.
func TestRunOpenLoopSaysWhatItSkipped(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // a request's cost, not a wait for a state
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"batch_sizes": []}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cfg := validConfig()
	cfg.Target, cfg.Rate, cfg.Concurrency = srv.URL, 200, 1
	cfg.Duration, cfg.Warmup = 500*time.Millisecond, 0
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	// One at a time at 20ms each, for 100 sends: about 25 sent.
	if rep.Requests < 5 || rep.Skipped < 50 || rep.SkippedFraction < 0.5 || rep.SkippedFraction > 1 || len(rep.Errors) != 0 {
		t.Errorf("%d requests, %d skipped (%.2f of the schedule), errors %v; want most of 100 sends skipped, and no error", rep.Requests, rep.Skipped, rep.SkippedFraction, rep.Errors)
	}
	if res.Err == nil || !strings.Contains(res.Err.Error(), "were skipped, --concurrency 1 requests being out already") {
		t.Errorf("Err = %v; want one that says the sends were skipped", res.Err)
	}
	var out strings.Builder
	rep.Print(&out)
	if !strings.Contains(out.String(), fmt.Sprintf("skipped       %d sends (", rep.Skipped)) || !strings.Contains(out.String(), "!! the server did not keep up") {
		t.Errorf("the table does not say loudly what was skipped:\n%s", out.String())
	}
}

func TestVerdictOnSkippedSends(t *testing.T) {
	cfg := validConfig()
	for _, tc := range []struct {
		fraction float64
		fails    bool
	}{{0, false}, {0.01, false}, {0.0101, true}, {0.5, true}} {
		err := cfg.verdict(Report{Requests: 1, Skipped: 1, SkippedFraction: tc.fraction})
		if (err != nil) != tc.fails {
			t.Errorf("%.4f of the sends skipped: verdict %v; want a failure: %v", tc.fraction, err, tc.fails)
		}
	}
}

// A server that dies during the window loses only its batch figures: the
// report keeps what the clients measured, says why the batch figures are
// missing rather than print them as zeros, and the run is no measurement.
// A --target without /v1/stats at all misses only its batch figures, and
// so does one whose counters went back between the reads (restarted, or
// two servers behind one address), which wrapped to counts of 2^64.
func TestRunWhenTheServerStatsCannotBeRead(t *testing.T) {
	const answersBeforeDeath = 50
	statsRead := make(chan struct{})
	var readOnce sync.Once
	var answered atomic.Int64
	dying := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-statsRead:
			if answered.Add(1) == answersBeforeDeath {
				close(dying)
			}
		default:
		}
		_, _ = w.Write([]byte(`{"outputs":["x"]}`))
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"batch_sizes": [0, 3]}`))
		readOnce.Do(func() { close(statsRead) })
	})
	dies := httptest.NewServer(mux)
	defer dies.Close()
	go func() {
		<-dying
		dies.Close()
	}()
	lacksStats := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/predict" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"outputs":["x"]}`))
	}))
	defer lacksStats.Close()
	// Two servers behind one address, or one restarted: the second read
	// of the counters is below the first.
	var statsReads atomic.Int64
	twoReplicas := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/stats" && statsReads.Add(1) == 1:
			_, _ = w.Write([]byte(`{"answered": 900, "batches": 300, "batch_sizes": [0, 100, 200]}`))
		case r.URL.Path == "/v1/stats":
			_, _ = w.Write([]byte(`{"answered": 40, "batches": 20, "batch_sizes": [0, 0, 20]}`))
		default:
			_, _ = w.Write([]byte(`{"outputs":["x"]}`))
		}
	}))
	defer twoReplicas.Close()
	for _, tc := range []struct {
		name, target, why, wantErr string
	}{
		{"dies in the window", dies.URL, "read the server's stats at the window's end", "the server stopped answering"},
		{"has no stats", lacksStats.URL, "read the server's stats at the window's start", ""},
		{"counts back", twoReplicas.URL, "the server's counters went back", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Target, cfg.Duration, cfg.Warmup = tc.target, 300*time.Millisecond, 0
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if rep.Requests == 0 || rep.BatchFigures != nil || !strings.Contains(rep.BatchesUnavailable, tc.why) {
				t.Errorf("%d requests, batch figures %+v, unavailable %q; want the requests answered, and no batch figures because of %q", rep.Requests, rep.BatchFigures, rep.BatchesUnavailable, tc.why)
			}
			if (res.Err != nil) != (tc.wantErr != "") || res.Err != nil && !strings.Contains(res.Err.Error(), tc.wantErr) {
				t.Errorf("Err = %v; want %q", res.Err, tc.wantErr)
			}
			encoded, _ := json.Marshal(rep)
			var keys map[string]json.RawMessage
			if err := json.Unmarshal(encoded, &keys); err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"mean_batch_size", "batch_sizes", "dispatch", "cost", "returns"} {
				if v, ok := keys[key]; ok {
					t.Errorf("the JSON report has %s: %s; want it absent, as it is not known", key, v)
				}
			}
			if _, ok := keys["batches_unavailable"]; !ok {
				t.Errorf("the JSON report does not say why the batch figures are missing: %s", encoded)
			}
			var out strings.Builder
			rep.Print(&out)
			if !strings.Contains(out.String(), "batch figures unavailable: "+tc.why) || strings.Contains(out.String(), "mean batch") || strings.Contains(out.String(), "dispatched") {
				t.Errorf("the table shows batch figures it does not have, or not why:\n%s", out.String())
			}
		})
	}
}

func TestRefusalWatch(t *testing.T) {
	repeat := func(kind string, n int) []string { return slices.Repeat([]string{kind}, n) }
	for _, tc := range []struct {
		name     string
		outcomes []string
		stopAt   int // the outcome that stops the load, counted from 1; 0: none
	}{
		{"every request refused alike", repeat("http 413", 150), maxRefusals},
		{"refused, as 401", repeat("http 401", maxRefusals), maxRefusals},
		{"a success first", append([]string{""}, repeat("http 413", 150)...), 0},
		{"a success among them", append(append(repeat("http 413", 50), ""), repeat("http 413", 100)...), 0},
		{"two refusals", append(repeat("http 413", 50), repeat("http 400", 100)...), 0},
		{"too many requests passes", repeat("http 429", 150), 0},
		{"a timeout on the server passes", repeat("http 408", 150), 0},
		{"server errors pass", repeat("http 503", 150), 0},
		{"connection errors pass", repeat(kindConnection, 150), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kinds := newErrorKinds()
			var w refusalWatch
			stoppedAt := 0
			for i, kind := range tc.outcomes {
				if w.refused(kind, kinds.id(kind, nil)) {
					if stoppedAt != 0 {
						t.Fatalf("stopped twice, at %d and %d", stoppedAt, i+1)
					}
					stoppedAt = i + 1
				}
			}
			if stoppedAt != tc.stopAt {
				t.Errorf("stopped at outcome %d; want %d", stoppedAt, tc.stopAt)
			}
		})
	}
}

// The refusal that stops a load was answered, and is counted so, not as a
// request the end of the load cut short: the report then counts the
// refusals the error speaks of. One client (or one request in flight) is
// the whole load, so that no other request is out when it stops; the open
// loop's schedule may yet start one as it stops, cut short at once.
func TestLoadCountsTheRefusalThatStopsIt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rate         float64
		mostCutShort int
	}{{"closed", 0, 0}, {"open", 10_000, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Concurrency: 1, Duration: time.Minute, Rate: tc.rate}
			var sent atomic.Int64
			send := func(ctx context.Context) (string, error) {
				if ctx.Err() != nil {
					return "", nil // cut short, as the real senders say
				}
				sent.Add(1)
				return "http 401", errors.New("no token")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			counted, kinds, refused := cfg.load(ctx, send)
			if ctx.Err() != nil || !errors.Is(refused, errRefused) {
				t.Fatalf("load ended with %v after %d sends; want it stopped at the %dth refusal", refused, sent.Load(), maxRefusals)
			}
			id := kinds.id("http 401", nil)
			if n := counted.failures[id]; n != maxRefusals || sent.Load() != maxRefusals || counted.cutShort > tc.mostCutShort {
				t.Errorf("%d refusals, %d counted as http 401, %d cut short; want the %d the error speaks of counted, and at most %d cut short: %q",
					sent.Load(), n, counted.cutShort, maxRefusals, tc.mostCutShort, refused)
			}
		})
	}
}

// A server that refuses every request alike, as a --target does an
// --items-per-request above its --max-items, stops the load long before
// its --duration: in the window, with a report and an error that says
// what the server said; in the warm-up, with an error alone.
func TestRunStopsWhenEveryRequestIsRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/stats" {
			_, _ = w.Write([]byte(`{"batch_sizes": []}`))
			return
		}
		http.Error(w, "8 items: more than --max-items 4", http.StatusRequestEntityTooLarge)
	}))
	defer srv.Close()
	cfg := validConfig()
	cfg.Target, cfg.Duration, cfg.Warmup = srv.URL, time.Minute, 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil || res.Report.Interrupted || res.Report.Seconds >= 30 {
		t.Fatalf("the load ran %.1fs of its minute; want it stopped at the %dth refusal", res.Report.Seconds, maxRefusals)
	}
	// The other clients' requests out as the load stopped count as in
	// flight.
	if n := res.Report.Errors["http 413"]; n < maxRefusals-uint64(cfg.Concurrency) || res.Report.Requests != 0 {
		t.Errorf("%d requests, %d refused; want none and about %d", res.Report.Requests, n, maxRefusals)
	}
	if res.Err == nil || !errors.Is(res.Err, errRefused) || !strings.Contains(res.Err.Error(), "answered http 413, the server saying 8 items: more than --max-items 4") {
		t.Errorf("Err = %v; want one that says what the server answered", res.Err)
	}
	cfg.Warmup = time.Minute
	if _, err := Run(ctx, cfg); err == nil || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "in the warm-up, nothing measured") {
		t.Errorf("refused in the warm-up: Run = %v; want the refusal, and that nothing was measured", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the two runs took more than 30s of their two minutes")
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"hello, ", "streamer", "!"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "treamer!" {
		t.Errorf("kept %q; want the last 8 bytes %q", got, "treamer!")
	}
}

func TestFindPlotter(t *testing.T) {
	dir := t.TempDir()
	streamer := filepath.Join(dir, "streamer")
	t.Setenv("PATH", t.TempDir())
	if _, err := findPlotter("", streamer); !errors.Is(err, ErrNoPlotter) || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), dir) {
		t.Errorf("no plotter: err %v; want ErrNoPlotter saying where it looked and how to build it", err)
	}
	beside := filepath.Join(dir, PlotterName)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findPlotter("", streamer); err != nil || got != beside {
		t.Errorf("findPlotter = %q, %v; want the one beside streamer, %q", got, err, beside)
	}
	if got, _ := findPlotter("/given", streamer); got != "/given" {
		t.Errorf("findPlotter with a given path = %q; want it", got)
	}
}

// fakeServer answers /predict with 200, every fifth with 429, and counts
// one batch of one item per request in /v1/stats.
func fakeServer(t *testing.T) *httptest.Server {
	var answered atomic.Uint64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
		if answered.Add(1)%5 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{"outputs":["x"]}`))
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(supervisor.Stats{BatchSizes: []uint64{0, answered.Load()}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestRunAgainstTarget(t *testing.T) {
	cfg := validConfig()
	cfg.Target = fakeServer(t).URL
	cfg.Duration, cfg.Warmup = 300*time.Millisecond, 50*time.Millisecond
	cfg.LimitItemsPerS = 1000 // not reported for a target
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	if res.Report.Interrupted || rep.Requests == 0 || rep.Seconds != 0.3 {
		t.Fatalf("report %+v, interrupted %v; want requests over 0.3s", rep, res.Report.Interrupted)
	}
	if rep.Errors["http 429"] == 0 || len(rep.Errors) != 1 {
		t.Errorf("errors %v; want http 429 only", rep.Errors)
	}
	if rep.MeanBatchSize != 1 || rep.BatchSizes[1] == 0 {
		t.Errorf("batches %v mean %v; want single items read from /v1/stats", rep.BatchSizes, rep.MeanBatchSize)
	}
	if rep.LimitItemsPerS != 0 {
		t.Errorf("limit %v reported for a target", rep.LimitItemsPerS)
	}
}

// A front end behind Redis forms no batches: its nodes do. The report
// says so rather than print a mean batch of 0; a node, which forms its
// own, gets its batch figures.
func TestRunAgainstAFrontEndSaysTheNodesFormTheBatches(t *testing.T) {
	for _, tc := range []struct {
		name, broker string
		frontEnd     bool
	}{
		{"a front end", `{"front_end": {"redis_up": true}}`, true},
		{"a node", `{"front_end": {"redis_up": true}, "node": {"read": 3}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("POST /predict", func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(`{"outputs":["x"]}`))
			})
			mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(`{"answered": 1, "batch_sizes": [0, 1], "broker": ` + tc.broker + `}`))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			cfg := validConfig()
			cfg.Target = srv.URL
			cfg.Duration, cfg.Warmup = 200*time.Millisecond, 0
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Report.FrontEnd != tc.frontEnd {
				t.Errorf("FrontEnd = %v; want %v", res.Report.FrontEnd, tc.frontEnd)
			}
			var out strings.Builder
			res.Report.Print(&out)
			says := strings.Contains(out.String(), "formed by the nodes behind this front end")
			if says != tc.frontEnd || strings.Contains(out.String(), "mean batch") == tc.frontEnd {
				t.Errorf("the report:\n%s\nwant the nodes named: %v, a mean batch: %v", out.String(), tc.frontEnd, !tc.frontEnd)
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	cfg := validConfig()
	cfg.Target = fakeServer(t).URL
	cfg.Duration = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.Interrupted || res.Report.Requests == 0 || res.Report.Seconds >= 10 {
		t.Errorf("interrupted %v after %.1fs with %d requests; want the part measured, marked interrupted", res.Report.Interrupted, res.Report.Seconds, res.Report.Requests)
	}
	encoded, err := json.Marshal(res.Report)
	if err != nil || !strings.Contains(string(encoded), `"interrupted":true`) {
		t.Errorf("the JSON report %s (%v) does not say it was interrupted", encoded, err)
	}
	cfg.Warmup = time.Minute
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, cfg); err == nil || !strings.Contains(err.Error(), "during the warm-up") {
		t.Errorf("interrupted in the warm-up: %v; want an error saying nothing was measured", err)
	}
}

func TestRunPlotFailsBeforeTheLoad(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg := validConfig()
	cfg.Target = "http://127.0.0.1:1" // never dialled: the plot fails first
	cfg.PlotFile = filepath.Join(t.TempDir(), "x.png")
	cfg.Server.Binary = filepath.Join(t.TempDir(), "streamer")
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "--plot:") || !strings.Contains(err.Error(), PlotterName) {
		t.Fatalf("Run = %v; want a --plot error naming %s", err, PlotterName)
	}
	if _, statErr := os.Stat(cfg.PlotFile); !os.IsNotExist(statErr) {
		t.Errorf("plot file left behind: %v", statErr)
	}
}

// A plot file already at --plot's path stays as it was until the new plot
// is drawn: not when there is no plotter, nor when the run is interrupted
// in the warm-up, nor when the plotter fails. Nothing else is left beside it.
func TestRunPlotKeepsAnExistingFileUntilDrawn(t *testing.T) {
	target := fakeServer(t).URL
	cat, err := exec.LookPath("cat") // before PATH is emptied
	if err != nil {
		t.Skip("no cat to read the plot data with")
	}
	plotter := func(t *testing.T, script string) string {
		script = strings.ReplaceAll(script, "cat", cat)
		path := filepath.Join(t.TempDir(), PlotterName)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name      string
		plotter   string // a script; empty: none on PATH
		warmup    time.Duration
		interrupt time.Duration
		want      string // the file's content afterwards
		wantErr   string
	}{
		{"no plotter", "", 0, 0, "old", "--plot:"},
		{"interrupted in the warm-up", "cat >/dev/null; printf drawn", time.Minute, 100 * time.Millisecond, "old", "during the warm-up"},
		{"the plotter fails", "cat >/dev/null; printf partial; exit 1", 0, 0, "old", "plot: exit status 1"},
		{"drawn", "cat >/dev/null; printf drawn", 0, 0, "drawn", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			dir := t.TempDir()
			cfg := validConfig()
			cfg.Target, cfg.Duration, cfg.Warmup = target, 200*time.Millisecond, tc.warmup
			cfg.PlotFile = filepath.Join(dir, "bench.png")
			cfg.Server.Binary = filepath.Join(t.TempDir(), "streamer")
			if tc.plotter != "" {
				cfg.Plotter = plotter(t, tc.plotter)
			}
			if err := os.WriteFile(cfg.PlotFile, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.interrupt > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.interrupt)
				defer cancel()
			}
			res, err := Run(ctx, cfg)
			if measured := tc.warmup == 0 && tc.plotter != ""; measured {
				// The load ran: its report stands, whatever became of the plot.
				if err != nil || res.Report.Requests == 0 {
					t.Errorf("Run = %v with %d requests; want the report of the load it measured", err, res.Report.Requests)
				}
				err = res.Err
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Run = %v; want an error saying %q", err, tc.wantErr)
			}
			if got, err := os.ReadFile(cfg.PlotFile); err != nil || string(got) != tc.want {
				t.Errorf("the plot file holds %q (%v); want %q", got, err, tc.want)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("the plot's folder holds %v; want the plot alone", entries)
			}
		})
	}
}
