package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
	"github.com/streamer-dev/streamer/supervisor"
)

// closedLoop keeps clients sending one request after another, each checked
// by one (client c's request r), until the returned stop is called; stop
// fails the test if any request failed or none was answered.
func closedLoop(t *testing.T, clients int, one func(c, r int) error) (stop func()) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
		answered int
		done     = make(chan struct{})
	)
	for c := range clients {
		wg.Go(func() {
			for r := 0; ; r++ {
				select {
				case <-done:
					return
				default:
				}
				err := one(c, r)
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					answered++
				}
				mu.Unlock()
			}
		})
	}
	return func() {
		t.Helper()
		close(done)
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d of %d requests failed under load; the first: %v", len(failures), answered+len(failures), failures[0])
		}
		if answered == 0 {
			t.Fatal("the load got no answer")
		}
	}
}

// adminToken is the bearer token of the servers startAdminServer runs.
const adminToken = "admin-test-token"

// startAdminServer runs a server with --admin, which needs a token, and
// sends that token with every request the test makes to it.
func startAdminServer(t *testing.T, args ...string) *server {
	t.Helper()
	s := startServer(t, append(args, "--admin", "--auth-token", adminToken)...)
	s.token = adminToken
	return s
}

// echoRequest sends one text to the echo model and checks it comes back.
func (s *server) echoRequest(c, r int) error {
	text := fmt.Sprintf("client %d request %d", c, r)
	p, err := s.tryPredictJSON(map[string]any{"inputs": []any{text}})
	if err != nil {
		return err
	}
	if p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != text {
		return fmt.Errorf("%q: %s", text, p)
	}
	return nil
}

// admin posts body to an admin path and returns the status and the JSON
// answer decoded.
func (s *server) admin(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	status, data, _, err := s.do(context.Background(), http.MethodPost, path, "application/json", []byte(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	var answer map[string]any
	if err := json.Unmarshal(data, &answer); err != nil {
		t.Fatalf("POST %s: answer %q is not JSON: %v", path, data, err)
	}
	return status, answer
}

// answersGrow waits until the server has answered more items than now.
func (s *server) answersGrow(t *testing.T) {
	t.Helper()
	before := s.stats(t).Answered
	s.waitFor(t, "answers to the load", readyTimeout, func() bool { return s.stats(t).Answered > before+5 })
}

// replacedAll waits until n workers are ready, none of them with a pid in
// old and none draining, and returns them.
func (s *server) replacedAll(t *testing.T, n int, old []supervisor.SlotStatus) []supervisor.SlotStatus {
	t.Helper()
	var now []supervisor.SlotStatus
	s.waitFor(t, "every worker replaced", readyTimeout, func() bool {
		now = s.workers(t)
		if len(now) != n {
			return false
		}
		for _, w := range now {
			if w.State != supervisor.SlotReady || slices.ContainsFunc(old, func(o supervisor.SlotStatus) bool { return o.PID == w.PID }) {
				return false
			}
		}
		return true
	})
	return now
}

func TestReloadByAdminAndSIGHUPLosesNoRequest(t *testing.T) {
	s := startAdminServer(t, "--workers", "2", "--batch-size", "8", "--max-latency", "2ms")
	first := s.waitAllReady(t, 2)
	stop := closedLoop(t, 6, s.echoRequest)
	s.answersGrow(t)

	status, answer := s.admin(t, "/admin/reload", "")
	if status != http.StatusOK || answer["reloaded"] != float64(2) {
		t.Fatalf("POST /admin/reload: %d %v, want 200 {\"reloaded\": 2}", status, answer)
	}
	// Replaced by the time the answer came: no polling needed for that.
	second := s.workers(t)
	if len(second) != 2 {
		t.Fatalf("workers after the reload: %+v", second)
	}
	s.replacedAll(t, 2, first)
	s.answersGrow(t)

	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.replacedAll(t, 2, second)
	s.waitFor(t, "the SIGHUP reload to be logged done", readyTimeout, func() bool {
		return strings.Count(s.logs(), "reload done") == 2
	})
	s.answersGrow(t)
	stop()
	if st := s.stats(t); st.Failed != 0 || st.Crashes != 0 {
		t.Errorf("after two reloads: %d failed items, %d crashes", st.Failed, st.Crashes)
	}
	for _, want := range []string{"reload begun", "worker replaced", "worker drained; stopping it", "worker stopped"} {
		s.waitLogged(t, want)
	}
}

// TestSIGHUPDuringScalingReloadsOnceItIsDone: a SIGHUP that comes while
// the workers scale (an operator swapped the model and signalled) is not
// dropped as busy: the workers are reloaded once the scaling is done, and
// two SIGHUPs then make one reload.
func TestSIGHUPDuringScalingReloadsOnceItIsDone(t *testing.T) {
	s := startAdminServer(t, "--model", "chaos:init-delay=1500ms", "--workers", "1", "--unavailable-after", "30s")
	s.waitAllReady(t, 1)
	scaled := make(chan int, 1)
	go func() {
		status, _ := s.admin(t, "/admin/workers", `{"workers": 2}`)
		scaled <- status
	}()
	s.waitFor(t, "the scaling to begin", readyTimeout, func() bool { return strings.Contains(s.logs(), "scaling workers") })
	for range 2 {
		if err := s.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if status := <-scaled; status != http.StatusOK {
		t.Fatalf("POST /admin/workers: %d", status)
	}
	before := s.workers(t)
	s.waitFor(t, "the reload to be logged done", readyTimeout, func() bool { return strings.Contains(s.logs(), "reload done") })
	s.replacedAll(t, 2, before)
	logs := s.logs()
	if !strings.Contains(logs, "reloading once it is done") || strings.Contains(logs, "reload failed") {
		t.Errorf("the log does not say the reload waited for the scaling, or says one failed:\n%s", logs)
	}
	if n := strings.Count(logs, "reload begun"); n != 1 {
		t.Errorf("%d reloads begun for two SIGHUPs during one scaling; want 1", n)
	}
}

// A model file replaced by garbage fails the reload at the first slot: the
// answer says so and why, and the old workers keep serving.
func TestReloadOfABrokenModelKeepsTheOldWorkers(t *testing.T) {
	src, ref := onnxModel(t, onnxtest.MLP)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "model.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startAdminServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "2")
	before := s.waitAllReady(t, 2)
	rng := rand.New(rand.NewPCG(3, 3))
	var mu sync.Mutex // guards rng
	stop := closedLoop(t, 4, func(int, int) error {
		mu.Lock()
		x := features(rng)
		mu.Unlock()
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{x}})
		if err == nil && (p.Status != http.StatusOK || len(p.Outputs) != 1) {
			err = fmt.Errorf("%s", p)
		}
		if err == nil {
			err = nearJSON(p.Outputs[0], ref.MLP(x))
		}
		return err
	})
	s.answersGrow(t)
	if err := os.WriteFile(path, []byte("this is not an ONNX model"), 0o644); err != nil {
		t.Fatal(err)
	}
	status, answer := s.admin(t, "/admin/reload", "{}")
	msg, _ := answer["error"].(string)
	if status != http.StatusInternalServerError || !strings.Contains(msg, "slot 0: new worker failed to start") {
		t.Fatalf("POST /admin/reload of a broken model: %d %v, want 500 naming slot 0", status, answer)
	}
	if !strings.Contains(msg, "model.onnx") {
		t.Errorf("the reload error %q does not name the model file", msg)
	}
	s.answersGrow(t)
	stop()
	after := s.workers(t)
	if len(after) != 2 || after[0].PID != before[0].PID || after[1].PID != before[1].PID {
		t.Fatalf("workers after a failed reload: %+v, want the old ones %+v", after, before)
	}
	s.waitLogged(t, "reload failed")
	// The metrics count it, and the stats say why.
	status, body, err := s.get("/metrics")
	if err != nil || status != http.StatusOK || !strings.Contains(string(body), `streamer_reloads_total{outcome="failed"} 1`) {
		t.Errorf("GET /metrics: %d %v; want streamer_reloads_total{outcome=\"failed\"} 1 in:\n%s", status, err, body)
	}
	var st supervisor.Stats
	if status, body, err := s.get("/v1/stats"); err != nil || status != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET /v1/stats: %d %v", status, err)
	}
	if st.ReloadFailures != 1 || !strings.Contains(st.LastReloadError, "slot 0: new worker failed to start") {
		t.Errorf("stats: %d reload failures, last error %q; want 1, naming slot 0", st.ReloadFailures, st.LastReloadError)
	}
}

func TestScaleUnderLoadLosesNoRequest(t *testing.T) {
	s := startAdminServer(t, "--workers", "1", "--cuda", "0,1", "--batch-size", "8", "--max-latency", "2ms")
	stop := closedLoop(t, 6, s.echoRequest)
	s.answersGrow(t)
	for _, n := range []int{3, 1, 2} {
		status, answer := s.admin(t, "/admin/workers", fmt.Sprintf(`{"workers": %d}`, n))
		if status != http.StatusOK || answer["workers"] != float64(n) {
			t.Fatalf("POST /admin/workers %d: %d %v", n, status, answer)
		}
		workers := s.workers(t)
		if len(workers) != n {
			t.Fatalf("after scaling to %d: /v1/workers lists %+v", n, workers)
		}
		for i, w := range workers {
			if w.Slot != i || w.State != supervisor.SlotReady || w.CUDA != fmt.Sprint(i%2) {
				t.Errorf("after scaling to %d, slot %d: %+v, want ready on CUDA %d", n, i, w, i%2)
			}
		}
		s.answersGrow(t)
	}
	stop()
	if st := s.stats(t); st.Failed != 0 || st.Crashes != 0 {
		t.Errorf("after scaling: %d failed items, %d crashes", st.Failed, st.Crashes)
	}
	status, answer := s.admin(t, "/admin/workers", `{"workers": "many"}`)
	if status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(answer["error"]), "workers") {
		t.Errorf(`POST /admin/workers {"workers": "many"}: %d %v, want 400 naming the field`, status, answer)
	}
}

func TestAdminRoutesNeedTheAdminFlag(t *testing.T) {
	s := startServer(t)
	for _, path := range []string{"/admin/reload", "/admin/workers"} {
		status, answer := s.admin(t, path, `{"workers": 2}`)
		if status != http.StatusNotFound || answer["error"] == nil {
			t.Errorf("POST %s without --admin: %d %v, want 404 with a JSON error", path, status, answer)
		}
	}
	if n := len(s.workers(t)); n != 1 {
		t.Errorf("workers after refused admin requests: %d, want 1", n)
	}
}

func TestAdminNeedsAToken(t *testing.T) {
	out := runServeToFailure(t, nil, "--workers", "1", "--admin")
	for _, want := range []string{"--admin needs --auth-token", "reload and scale"} {
		if !strings.Contains(out, want) {
			t.Errorf("output does not contain %q:\n%s", want, out)
		}
	}
}

// TestSIGHUPWhileDrainingEndsNothing: SIGHUPs that come once SIGTERM's
// drain has begun are logged, once for a storm of them, and ignored: the
// request admitted before is answered, and the server exits 0. (Before,
// the drain stopped the catching of SIGHUP, whose default then ended the
// process with every admitted request unanswered.)
func TestSIGHUPWhileDrainingEndsNothing(t *testing.T) {
	s := startServer(t, "--model", "sleep:2s,0", "--grace", "10s", "--log-level", "debug")
	answered := make(chan prediction, 1)
	go func() {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"held"}})
		if err != nil {
			p.Status = 0
		}
		answered <- p
	}()
	s.waitFor(t, "the request to be admitted", readyTimeout, func() bool { return s.stats(t).Submitted >= 1 })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the drain to begin", stopTimeout, func() bool { return strings.Contains(s.logs(), "signal received: draining") })
	for i := 1; i <= 3; i++ {
		if err := s.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "the SIGHUP to be taken", stopTimeout, func() bool { return strings.Count(s.logs(), "SIGHUP while draining") == i })
	}
	if p := <-answered; p.Status != http.StatusOK {
		t.Errorf("the request admitted before SIGTERM: %s; want 200", p)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGTERM and SIGHUP, want 0", code, err)
	}
	if logs := s.logs(); strings.Count(logs, `level=INFO msg="SIGHUP while draining`) != 1 || strings.Contains(logs, "reload begun") {
		t.Errorf("the log does not say once, the others held back to debug, that the SIGHUPs were ignored while draining, or says a reload began:\n%s", logs)
	}
}

// TestSIGTERMDuringASIGHUPReloadIsNoFailure: a SIGTERM that comes while
// a SIGHUP's reload starts its workers (systemctl reload, then stop) stops
// the reload as the shutdown does one asked over HTTP: no ERROR line
// saying the reload failed and the server serves on, as it does not. (The
// reload ran on the context SIGTERM cancels, before the shutdown began,
// and took its cancellation for the model's failure.)
func TestSIGTERMDuringASIGHUPReloadIsNoFailure(t *testing.T) {
	s := startServer(t, "--model", "chaos:init-delay=1500ms", "--workers", "1")
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the reload to begin", readyTimeout, func() bool { return strings.Contains(s.logs(), "reload begun") })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGHUP and SIGTERM, want 0", code, err)
	}
	logs := s.logs()
	if strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "reload failed") || !strings.Contains(logs, "SIGHUP: reload stopped by the shutdown") {
		t.Errorf("the log does not say the reload was stopped by the shutdown, or says it failed:\n%s", logs)
	}
}

// TestSIGHUPBeforeServingIsHeld: a SIGHUP as soon as the server writes
// its first line (it checks the model, then listens, then starts the
// workers, here for two seconds) does not end it: it serves, and reloads
// its workers once it does, since they may have opened the model before
// it changed. (Before, SIGHUP was caught only once the server listened.)
func TestSIGHUPBeforeServingIsHeld(t *testing.T) {
	s := launchServer(t, "--model", "chaos:init-delay=2s")
	s.waitFor(t, "the server's first line", readyTimeout, func() bool { return s.logs() != "" })
	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the server to serve and reload its workers", readyTimeout, func() bool {
		if s.exited() {
			t.Fatalf("the server exited on a SIGHUP before it served:\n%s", s.logs())
		}
		return strings.Contains(s.logs(), "reload done")
	})
	if !strings.Contains(s.logs(), "SIGHUP before the server serves") {
		t.Errorf("the log does not say the SIGHUP was held:\n%s", s.logs())
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Errorf("a request after the reload: %s", p)
	}
}
