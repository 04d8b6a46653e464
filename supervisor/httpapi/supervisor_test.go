package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// startStreamer runs an in-process supervisor with fn as the model and
// serves it over a loopback HTTP server; both stop when the test ends.
func startStreamer(t *testing.T, cfg supervisor.Config) (*supervisor.Streamer, *httptest.Server) {
	t.Helper()
	return startStreamerWith(t, cfg, func(st *supervisor.Streamer) Backend { return st })
}

// startStreamerWith is startStreamer with the handler's Backend made by wrap.
func startStreamerWith(t *testing.T, cfg supervisor.Config, wrap func(*supervisor.Streamer) Backend) (*supervisor.Streamer, *httptest.Server) {
	t.Helper()
	st, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Config{Backend: wrap(st)}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := st.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return st, srv
}

func echoBatch(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }

// postJSON sends body to /predict and decodes the answer; safe from any
// goroutine.
func postJSON(srv *httptest.Server, body string, header ...string) (int, map[string]any, http.Header, error) {
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/predict", strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var answer map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return resp.StatusCode, nil, resp.Header, fmt.Errorf("answer is not JSON: %w", err)
	}
	return resp.StatusCode, answer, resp.Header, nil
}

func TestSupervisorEchoUnderConcurrency(t *testing.T) {
	_, srv := startStreamer(t, supervisor.Config{InProcess: model.Func(echoBatch), Workers: 2, BatchSize: 8, MaxLatency: time.Millisecond})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			for r := range 10 {
				in := []any{fmt.Sprintf("c%d-r%d", c, r), float64(c*100 + r), map[string]any{"c": float64(c)}}
				body, _ := json.Marshal(map[string]any{"inputs": in})
				status, answer, _, err := postJSON(srv, string(body))
				if err != nil || status != 200 || !reflect.DeepEqual(answer["outputs"], in) {
					t.Errorf("inputs %v: status %d, answer %v, %v", in, status, answer, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestSupervisorModelErrorNamesItem(t *testing.T) {
	reject := func(_ context.Context, items [][]byte) ([][]byte, error) {
		bad, _ := msgpack.Marshal("bad")
		errs := make([]error, len(items))
		failed := false
		for i, it := range items {
			if string(it) == string(bad) {
				errs[i], failed = fmt.Errorf("the model cannot read %q", "bad"), true
			}
		}
		if failed {
			return items, &model.ItemErrors{Errs: errs}
		}
		return items, nil
	}
	_, srv := startStreamer(t, supervisor.Config{InProcess: model.Func(reject), Workers: 1})
	status, answer, _, err := postJSON(srv, `{"inputs": ["ok", "ok", "bad"]}`)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := answer["error"].(string)
	if status != http.StatusUnprocessableEntity || !strings.Contains(msg, "item 2") || !strings.Contains(msg, "cannot read") {
		t.Errorf("status %d, error %q; want 422 naming item 2 and the model's reason", status, msg)
	}
	if status, _, _, _ := postJSON(srv, `{"inputs": ["ok"]}`); status != 200 {
		t.Errorf("a good request after a model error: status %d", status)
	}
}

// gate is a model that holds every batch until released, and records what
// it ran.
type gate struct {
	release chan struct{}
	started chan struct{} // receives once per batch
	mu      sync.Mutex
	seen    []string
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), started: make(chan struct{}, 100)}
}

func (g *gate) run(ctx context.Context, items [][]byte) ([][]byte, error) {
	g.mu.Lock()
	for _, it := range items {
		var s string
		_ = msgpack.Unmarshal(it, &s)
		g.seen = append(g.seen, s)
	}
	g.mu.Unlock()
	g.started <- struct{}{}
	select {
	case <-g.release:
		return items, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (g *gate) ran() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// waitUntil polls cond every millisecond for up to 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func waitStarted(t *testing.T, g *gate) {
	t.Helper()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch started")
	}
}

func TestSupervisorOverloadIs429(t *testing.T) {
	g := newGate()
	st, srv := startStreamer(t, supervisor.Config{InProcess: model.Func(g.run), Workers: 1, BatchSize: 1, MaxQueue: 2})
	defer close(g.release)

	go func() { _, _, _, _ = postJSON(srv, `{"inputs": ["running"]}`) }()
	waitStarted(t, g)
	// Add one item at a time: each is either admitted (and waits behind the
	// gate) or refused at once. With a queue of 2 the refusal comes within a
	// few items, however many batches the slot takes ahead.
	type answer struct {
		status int
		retry  string
	}
	for i := range 6 {
		submitted := st.Stats().Submitted
		answers := make(chan answer, 1)
		go func() {
			status, _, hdr, err := postJSON(srv, fmt.Sprintf(`{"inputs": ["extra-%d"]}`, i))
			if err != nil {
				t.Error(err)
			}
			answers <- answer{status, hdr.Get("Retry-After")}
		}()
		var refused *answer
		waitUntil(t, "the item to be admitted or refused", func() bool {
			select {
			case a := <-answers:
				refused = &a
				return true
			default:
				return st.Stats().Submitted > submitted
			}
		})
		if refused != nil {
			if refused.status != http.StatusTooManyRequests || refused.retry != "1" {
				t.Errorf("refused item %d: status %d, Retry-After %q; want 429 and 1", i, refused.status, refused.retry)
			}
			return
		}
	}
	t.Errorf("6 items past a queue of 2 were all admitted: %+v", st.Stats())
}

func TestSupervisorDeadlineIs504(t *testing.T) {
	g := newGate()
	_, srv := startStreamer(t, supervisor.Config{InProcess: model.Func(g.run), Workers: 1})
	defer close(g.release)
	start := time.Now()
	status, answer, _, err := postJSON(srv, `{"inputs": ["slow"], "timeout_ms": 100}`)
	took := time.Since(start)
	if err != nil || status != http.StatusGatewayTimeout {
		t.Errorf("status %d, answer %v, %v; want 504", status, answer, err)
	}
	if took < 100*time.Millisecond || took > 5*time.Second {
		t.Errorf("answered after %s, want at the 100ms deadline", took)
	}
}

// contextRecorder passes requests on to a Streamer and hands the test each
// request's context.
type contextRecorder struct {
	*supervisor.Streamer
	ctxs chan context.Context
}

func (r contextRecorder) PredictRequest(ctx context.Context, req supervisor.Request) ([][]byte, error) {
	r.ctxs <- ctx
	return r.Streamer.PredictRequest(ctx, req)
}

func TestSupervisorClientGoneDropsUndispatchedItems(t *testing.T) {
	g := newGate()
	ctxs := make(chan context.Context, 10)
	st, srv := startStreamerWith(t, supervisor.Config{InProcess: model.Func(g.run), Workers: 1, BatchSize: 1},
		func(st *supervisor.Streamer) Backend { return contextRecorder{st, ctxs} })
	first := make(chan int, 1)
	go func() { s, _, _, _ := postJSON(srv, `{"inputs": ["first"]}`); first <- s }()
	waitStarted(t, g)

	// "second" may be handed to the busy slot ahead of time; "abandoned"
	// waits in the queue behind both, and its client leaves.
	second := make(chan int, 1)
	go func() { s, _, _, _ := postJSON(srv, `{"inputs": ["second"]}`); second <- s }()
	waitUntil(t, "the second request to be admitted", func() bool { return st.Stats().Submitted >= 2 })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/predict", strings.NewReader(`{"inputs": ["abandoned"]}`))
	gone := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitUntil(t, "the abandoned request to be queued", func() bool { return st.Stats().Submitted >= 3 })
	<-ctxs // first
	<-ctxs // second
	abandonedCtx := <-ctxs
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the abandoned request got an answer")
	}
	select {
	case <-abandonedCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not notice the client leaving")
	}
	close(g.release)
	if s1, s2 := <-first, <-second; s1 != 200 || s2 != 200 {
		t.Errorf("first and second requests: status %d and %d", s1, s2)
	}
	if status, _, _, _ := postJSON(srv, `{"inputs": ["after"]}`); status != 200 {
		t.Errorf("request after: status %d", status)
	}
	for _, item := range g.ran() {
		if item == "abandoned" {
			t.Errorf("the model ran an item whose client had gone: %v", g.ran())
		}
	}
}

func TestSupervisorShutdownIs503(t *testing.T) {
	st, err := supervisor.New(supervisor.Config{InProcess: model.Func(echoBatch)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h := New(Config{Backend: st})
	if rec := do(t, h, http.MethodGet, "/readyz", "", nil); rec.Code != 200 {
		t.Errorf("/readyz of a running streamer: %d", rec.Code)
	}
	if err := st.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rec := do(t, h, http.MethodPost, "/predict", "", []byte(`{"inputs": [1]}`))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(errorOf(t, rec), "shutting down") {
		t.Errorf("predict after shutdown: %d %s", rec.Code, rec.Body.String())
	}
	if rec := do(t, h, http.MethodGet, "/readyz", "", nil); rec.Code != http.StatusServiceUnavailable || errorOf(t, rec) != ShuttingDown {
		t.Errorf("/readyz after shutdown: %d %s; want 503 saying %q", rec.Code, rec.Body, ShuttingDown)
	}
	if rec := do(t, h, http.MethodGet, "/healthz", "", nil); rec.Code != 200 {
		t.Errorf("/healthz after shutdown: %d", rec.Code)
	}
}

func TestSupervisorStatsAndWorkers(t *testing.T) {
	st, srv := startStreamer(t, supervisor.Config{InProcess: model.Func(echoBatch), Workers: 3})
	// Start returns once one worker is ready; the others may be starting.
	deadline := time.Now().Add(10 * time.Second)
	for slices.ContainsFunc(st.Slots(), func(s supervisor.SlotStatus) bool { return s.State != supervisor.SlotReady }) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, not every worker is ready: %+v", st.Slots())
		}
		time.Sleep(time.Millisecond)
	}
	for range 5 {
		if status, _, _, err := postJSON(srv, `{"inputs": [1, 2]}`); err != nil || status != 200 {
			t.Fatalf("status %d: %v", status, err)
		}
	}
	var stats struct {
		supervisor.Stats
		MeanBatchSize float64 `json:"mean_batch_size"`
	}
	getJSON(t, srv.URL+"/v1/stats", &stats)
	if stats.Submitted != 10 || stats.Answered != 10 || stats.MeanBatchSize < 1 {
		t.Errorf("stats after 5 requests of 2 items: %+v", stats)
	}
	var slots []supervisor.SlotStatus
	getJSON(t, srv.URL+"/v1/workers", &slots)
	if len(slots) != 3 {
		t.Fatalf("%d slots, want 3: %+v", len(slots), slots)
	}
	for i, s := range slots {
		if s.Slot != i || s.State != supervisor.SlotReady {
			t.Errorf("slot %d: %+v", i, s)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
