package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamer-dev/streamer/supervisor"
)

func TestMetrics(t *testing.T) {
	backend := &fakeBackend{
		ready: true,
		stats: supervisor.Stats{
			Answered: 11, Failed: 4, Expired: 1, Poisoned: 1, Canceled: 1, Rejected: 2, Batches: 3, Queued: 4,
			BatchSizes: []uint64{0, 2, 0, 1},
			Dispatch:   supervisor.DispatchStats{Full: 4, Waited: 2, WaitAddedMs: 1500},
			Cost:       supervisor.CostStats{Fitted: true, FixedMs: 10, PerItemMs: 0.5},
			Returns:    supervisor.ReturnStats{Share: 0.75},
			Latency: supervisor.LatencyStats{EndToEnd: supervisor.Histogram{
				BoundsSeconds: []float64{0.001, 0.002}, Counts: []uint64{1, 2, 3}, SumSeconds: 1.5,
			}},
		},
		slots: []supervisor.SlotStatus{
			{Slot: 0, State: supervisor.SlotReady, CUDA: "1", Device: "cpu", Restarts: 2, Crashes: 3, Batches: 7, InFlight: 2, InitSeconds: 0.25},
			{Slot: 1, State: supervisor.SlotBackoff, Device: "cpu", InFlight: 1},
			// Slot 0 replaced by a reload, draining: its number's
			// series are sent once.
			{Slot: 0, State: supervisor.SlotDraining, CUDA: "1", Device: "cpu", Restarts: 2, Crashes: 3, Batches: 7, InFlight: 1},
		},
	}
	backend.submit = func(ctx context.Context, req supervisor.Request) (*answer, error) {
		if len(req.Items) > 1 {
			return nil, fmt.Errorf("%w: go away", supervisor.ErrOverloaded)
		}
		return echoAnswer(req), nil
	}
	h := New(Config{Backend: backend})
	for _, body := range []string{`{"inputs": ["a"]}`, `{"inputs": ["b"]}`, `{"inputs": ["c", "d"]}`, `{"inputs": 3}`} {
		do(t, h, http.MethodPost, "/predict", "application/json", []byte(body))
	}
	rec := do(t, h, http.MethodGet, "/metrics", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	for _, want := range []string{
		`streamer_requests_total{outcome="ok"} 2`,
		`streamer_requests_total{outcome="rejected"} 2`,
		`streamer_requests_total{outcome="timed_out"} 0`,
		`streamer_items_total{outcome="ok"} 7`,
		`streamer_items_total{outcome="failed"} 1`,
		`streamer_items_total{outcome="timed_out"} 1`,
		`streamer_items_total{outcome="poisoned"} 1`,
		`streamer_items_total{outcome="rejected"} 2`,
		`streamer_items_total{outcome="canceled"} 1`,
		`streamer_batches_total 3`,
		`streamer_batch_size_items_bucket{le="1"} 2`,
		`streamer_batch_size_items_bucket{le="2"} 2`,
		`streamer_batch_size_items_bucket{le="4"} 3`,
		`streamer_batch_size_items_sum 5`,
		`streamer_batch_size_items_count 3`,
		`streamer_end_to_end_seconds_bucket{le="0.001"} 1`,
		`streamer_end_to_end_seconds_bucket{le="0.002"} 3`,
		`streamer_end_to_end_seconds_bucket{le="+Inf"} 6`,
		`streamer_end_to_end_seconds_sum 1.5`,
		`streamer_queue_wait_seconds_count 0`,
		`streamer_compute_seconds_count 0`,
		`streamer_queue_depth_items 4`,
		`streamer_batches_in_flight 4`,
		`streamer_ready 1`,
		`streamer_worker_restarts_total{slot="0"} 2`,
		`streamer_worker_crashes_total{slot="0"} 3`,
		`streamer_worker_batches_total{slot="0"} 7`,
		`streamer_worker_init_seconds{slot="0"} 0.25`,
		`streamer_worker_state{device="cuda:1",slot="0",state="ready"} 1`,
		`streamer_worker_state{device="cuda:1",slot="0",state="backoff"} 0`,
		`streamer_worker_state{device="cuda:1",slot="0",state="draining"} 1`,
		`streamer_worker_state{device="unset",slot="1",state="backoff"} 1`,
		`streamer_dispatches_total{reason="full"} 4`,
		`streamer_dispatches_total{reason="waited"} 2`,
		`streamer_dispatches_total{reason="idle"} 0`,
		`streamer_dispatch_wait_added_seconds_total 1.5`,
		`streamer_batch_cost_fitted 1`,
		`streamer_batch_cost_fixed_seconds 0.01`,
		`streamer_batch_cost_per_item_seconds 0.0005`,
		`streamer_return_ratio 0.75`,
		"# TYPE streamer_items_total counter",
		"# TYPE streamer_end_to_end_seconds histogram",
		"go_goroutines ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// A backend with no slots and empty counters (a front end behind a broker)
// still has every metric, at zero.
func TestMetricsOfAnEmptyBackend(t *testing.T) {
	rec := do(t, New(Config{Backend: &fakeBackend{}}), http.MethodGet, "/metrics", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	for _, want := range []string{"streamer_items_total{outcome=\"ok\"} 0\n", "streamer_batch_size_items_count 0\n", "streamer_batches_in_flight 0\n", "streamer_ready 0\n"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestCollectorServesAnEmbeddersRegistry: Collector gives an embedder's
// own registry the backend's streamer_ metrics, those /metrics serves
// (TestMetrics checks their values), but the count of HTTP requests,
// which it does not serve.
func TestCollectorServesAnEmbeddersRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(&fakeBackend{ready: true, stats: supervisor.Stats{Answered: 5, Batches: 2}}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"streamer_items_total", "streamer_batches_total", "streamer_ready", "streamer_end_to_end_seconds"} {
		if !names[want] {
			t.Errorf("the registry lacks %s; it has %v", want, names)
		}
	}
	if names["streamer_requests_total"] {
		t.Errorf("the registry counts HTTP requests, though none is served: %v", names)
	}
}

// A Collector of no backend panics at once, as New does, rather than at
// every scrape.
func TestCollectorOfNoBackendPanicsAtOnce(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil Backend") {
			t.Errorf("Collector(nil) recovered %v; want a panic naming the nil Backend", r)
		}
	}()
	Collector(nil)
}

func TestStatusPageIsServedWhole(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{}})
	rec := do(t, h, http.MethodGet, "/", "", nil)
	body := rec.Body.String()
	switch {
	case rec.Code != http.StatusOK:
		t.Fatalf("GET /: %d %s", rec.Code, body)
	case !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html"):
		t.Errorf("GET /: Content-Type %q", rec.Header().Get("Content-Type"))
	case !strings.Contains(body, "v1/workers") || !strings.Contains(body, "</html>"):
		t.Errorf("GET /: not the status page: %.200s", body)
	case strings.Contains(body, "http://") || strings.Contains(body, "https://"):
		t.Errorf("GET /: the page loads something from elsewhere")
	}
	if rec := do(t, h, http.MethodPost, "/", "", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", rec.Code)
	}
	if rec := do(t, h, http.MethodGet, "/nowhere", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d, want 404", rec.Code)
	}
}

// halfBody is a request body whose client went away before its end.
type halfBody struct{ sent bool }

func (b *halfBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, `{"inputs": ["a`), nil
	}
	return 0, io.ErrUnexpectedEOF
}

// A body that ends before the length it announced is a bad request, and
// says so: the server cannot tell a client that left from one that sent
// less than it said, which reads the answer.
func TestABodyCutShortIsRefusedAsSuch(t *testing.T) {
	h := New(Config{Backend: &fakeBackend{ready: true}})
	req := httptest.NewRequest(http.MethodPost, "/predict", &halfBody{})
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	// Answered, then the connection closed: where the body would have
	// ended is unknown (see TestABodyThatCannotBeReadEndsItsConnection).
	aborted := func() (aborted bool) {
		defer func() { aborted = recover() == http.ErrAbortHandler }()
		h.ServeHTTP(rec, req)
		return false
	}()
	if !aborted {
		t.Error("a body cut short left its connection open")
	}
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "ended before the length its Content-Length announced") {
		t.Errorf("a body cut short: %d %s; want 400 saying it ended early", rec.Code, rec.Body)
	}
	metrics := do(t, h, http.MethodGet, "/metrics", "", nil).Body.String()
	if want := `streamer_requests_total{outcome="rejected"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
