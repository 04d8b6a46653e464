package main

// Core integration tests: each drives the real streamer binary and its real
// worker processes through HTTP and signals, and breaks one of the promises
// of the design on purpose (a killed worker, a poison item, a hang, bad
// input, overload, no worker, a deadline, SIGTERM, a chatty model).

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/syncbuf"
	"github.com/streamer-dev/streamer/supervisor"
)

// workerEnv reads one variable from a live process's environment.
func workerEnv(t *testing.T, pid int, name string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatalf("read environment of worker %d: %v", pid, err)
	}
	for kv := range strings.SplitSeq(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

func slotByIndex(t *testing.T, slots []supervisor.SlotStatus, index int) supervisor.SlotStatus {
	t.Helper()
	for _, s := range slots {
		if s.Slot == index {
			return s
		}
	}
	t.Fatalf("no slot %d in %+v", index, slots)
	return supervisor.SlotStatus{}
}

func TestCUDADevicesRoundRobinAndSurviveRestart(t *testing.T) {
	s := startServer(t, "--workers", "8", "--cuda", "0,1,2,3")
	slots := s.waitAllReady(t, 8)
	for i := range 8 {
		slot := slotByIndex(t, slots, i)
		want := strconv.Itoa(i % 4)
		if slot.CUDA != want {
			t.Errorf("slot %d reports CUDA_VISIBLE_DEVICES=%q, want %q", i, slot.CUDA, want)
		}
		if got, ok := workerEnv(t, slot.PID, "CUDA_VISIBLE_DEVICES"); !ok || got != want {
			t.Errorf("slot %d: worker %d runs with CUDA_VISIBLE_DEVICES=%q (set %v), want %q", i, slot.PID, got, ok, want)
		}
	}

	const victim = 5
	old := slotByIndex(t, slots, victim)
	killWorker(t, old.PID)
	var restarted supervisor.SlotStatus
	s.waitFor(t, "slot 5 to run a new worker", readyTimeout, func() bool {
		restarted = slotByIndex(t, s.workers(t), victim)
		return restarted.State == supervisor.SlotReady && restarted.PID > 0 && restarted.PID != old.PID
	})
	if restarted.CUDA != "1" {
		t.Errorf("restarted slot 5 reports CUDA_VISIBLE_DEVICES=%q, want 1", restarted.CUDA)
	}
	if got, _ := workerEnv(t, restarted.PID, "CUDA_VISIBLE_DEVICES"); got != "1" {
		t.Errorf("restarted worker %d runs with CUDA_VISIBLE_DEVICES=%q, want 1", restarted.PID, got)
	}
	if restarted.Restarts < 1 {
		t.Errorf("slot 5 counts %d restarts after its worker was killed", restarted.Restarts)
	}
	if p := s.predictJSON(t, "still", "serving"); p.Status != http.StatusOK {
		t.Errorf("after the restart: %s", p)
	}
}

// clientLoad runs clients goroutines that each send requests requests with
// unique items, checks every answer is 200 and equals its inputs, and counts
// the answered requests in done.
func clientLoad(s *server, clients, requests int, done *atomic.Int64) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			for r := range requests {
				inputs := []any{fmt.Sprintf("c%d-r%d-a", c, r), fmt.Sprintf("c%d-r%d-b", c, r)}
				p, err := s.tryPredictJSON(map[string]any{"inputs": inputs})
				if err == nil && (p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, inputs)) {
					err = fmt.Errorf("inputs %v: %s", inputs, p)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return errs
}

func TestKilledWorkersLoseNoRequest(t *testing.T) {
	s := startServer(t, "--workers", "3", "--model", "sleep:40ms,0s", "--batch-size", "4", "--max-latency", "5ms")
	s.waitAllReady(t, 3)

	const clients, requests, kills = 16, 12, 4
	var answered atomic.Int64
	loadDone := make(chan []error, 1)
	go func() { loadDone <- clientLoad(s, clients, requests, &answered) }()

	// Kill a worker each time another stretch of requests was answered, so
	// that the kills land while batches run.
	killed := map[int]bool{}
	for k := range kills {
		threshold := int64((k + 1) * clients * requests / (kills + 2))
		s.waitFor(t, "load to progress", readyTimeout, func() bool { return answered.Load() >= threshold })
		var victim int
		s.waitFor(t, "a ready worker not killed yet", readyTimeout, func() bool {
			for _, w := range s.readyWorkers(t) {
				if !killed[w.PID] {
					victim = w.PID
					return true
				}
			}
			return false
		})
		killed[victim] = true
		killWorker(t, victim)
	}
	var errs []error
	select {
	case errs = <-loadDone:
	case <-time.After(60 * time.Second):
		t.Fatal("the load did not finish within 60s")
	}
	for _, err := range errs {
		t.Error(err)
	}
	if st := s.stats(t); st.Crashes < kills {
		t.Errorf("stats count %d crashes after %d kills", st.Crashes, kills)
	}
}

// sumRestarts adds up the restarts of every slot.
func sumRestarts(slots []supervisor.SlotStatus) int {
	n := 0
	for _, s := range slots {
		n += s.Restarts
	}
	return n
}

func TestPoisonItemFailsAloneAndIsRemembered(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "chaos:crash=boom", "--batch-size", "8", "--max-latency", "20ms")
	s.waitAllReady(t, 2)

	var answered atomic.Int64
	loadDone := make(chan []error, 1)
	go func() { loadDone <- clientLoad(s, 8, 10, &answered) }()
	s.waitFor(t, "load to start", readyTimeout, func() bool { return answered.Load() >= 5 })

	start := time.Now()
	p := s.predictJSON(t, "fine-1", "boom", "fine-2")
	t.Logf("poison isolated after %s", time.Since(start))
	if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "item 1") {
		t.Errorf("poison request: %s, want 422 naming item 1", p)
	}
	// The log names the item by its size and digest, not its content.
	digest := sha256.Sum256([]byte("\xa4boom")) // the item, in msgpack
	s.waitLogged(t, `msg="poison item isolated"`)
	s.waitLogged(t, "item_bytes=5 item_sha256="+hex.EncodeToString(digest[:8]))
	for _, err := range <-loadDone {
		t.Error(err)
	}

	// Known poison is refused on sight: no new crash.
	s.waitAllReady(t, 2)
	before, restartsBefore := s.stats(t), sumRestarts(s.workers(t))
	if before.Crashes == 0 {
		t.Errorf("no crash counted although the poison item crashed workers")
	}
	start = time.Now()
	p = s.predictJSON(t, "boom")
	if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "item 0") {
		t.Errorf("second poison request: %s, want 422 naming item 0", p)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("known poison took %s to refuse", took)
	}
	after := s.stats(t)
	if after.Crashes != before.Crashes || sumRestarts(s.workers(t)) != restartsBefore {
		t.Errorf("known poison crashed a worker again: crashes %d → %d", before.Crashes, after.Crashes)
	}
	if p := s.predictJSON(t, "fine-3"); p.Status != http.StatusOK {
		t.Errorf("after poison: %s", p)
	}
}

// TestBadItemsAmongGoodOnesDoNotTakeTheServerDown: with one worker and
// --max-restarts 1, two different items that crash the model, each sent
// among good ones, are each refused alone while the others are answered,
// and the server goes on serving: the deaths the bad items explain do not
// use up the restarts. (Before, the second took the slot down and the
// server exited.)
func TestBadItemsAmongGoodOnesDoNotTakeTheServerDown(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "chaos:crash=boom,panic=pan", "--max-restarts", "1", "--batch-size", "8",
		"--unavailable-after", "30s")
	for _, bad := range []string{"boom", "pan"} {
		inputs := []any{"a", "b", "c", "d", "e", bad, "g", "h"}
		p := s.predictJSON(t, inputs...)
		if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "item 5") {
			t.Fatalf("a request with %q at 5: %s; want 422 naming item 5", bad, p)
		}
	}
	if p := s.predictJSON(t, "fine"); p.Status != http.StatusOK {
		t.Fatalf("after two bad items: %s", p)
	}
	if s.exited() {
		t.Fatalf("the server exited:\n%s", s.logs())
	}
}

// TestAModelCrashingAtRandomIsGivenUp: a model that kills its worker on
// every other batch, whatever the items, is given up after about
// --max-restarts deaths. Each crash begins a hunt for a bad item, whose
// pieces are then answered (the next batch of a new worker runs), and the
// deaths the hunt held back count once it ends without a verdict; they
// did not, and the server took three times as many deaths to give up.
func TestAModelCrashingAtRandomIsGivenUp(t *testing.T) {
	const maxRestarts = 3
	s := startServer(t, "--workers", "1", "--model", "chaos:crash-every=2", "--max-restarts", fmt.Sprint(maxRestarts), "--batch-size", "4")
	for i := 0; i < 30 && !s.exited(); i++ {
		// Answered or failed: the server gives up at some point of these.
		if _, err := s.tryPredictJSON(map[string]any{"inputs": []any{"a", "b", "c", "d"}}); err != nil && !s.exited() {
			t.Logf("request %d: %v", i, err)
		}
	}
	code, err := s.wait(stopTimeout)
	if err != nil || code == 0 {
		t.Fatalf("the server of a model crashing on every other batch: exit code %d (%v); want it to give up and exit non-zero:\n%s", code, err, s.logs())
	}
	// A hunt costs three deaths: the batch's, one half's, one item's.
	deaths := strings.Count(s.logs(), "chaos: crashing on batch")
	t.Logf("the worker died %d times before the server gave up", deaths)
	if deaths <= maxRestarts || deaths > 2*maxRestarts {
		t.Errorf("the worker died %d times before the server gave up; want more than --max-restarts %d, and no more than twice that:\n%s", deaths, maxRestarts, s.logs())
	}
}

// TestWorkersFailingAsTheyAgeDoNotConvictAnItem: two workers that die at
// the same age (here their 20th batch: a leak, a count of batches) kill
// the one item a client sends again and again twice in a row, alone, on a
// model that answered every other batch. The item is not taken for
// poison: neither worker was fresh, and it runs on a restarted one,
// which answers it. (Before, it was convicted at the first two deaths and
// refused on sight, 422, for ten minutes.)
func TestWorkersFailingAsTheyAgeDoNotConvictAnItem(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "chaos:crash-every=20,delay=1ms", "--max-restarts", "1000")
	s.waitAllReady(t, 2)
	codes := map[int]int{}
	for i := 0; i < 150 && !s.exited(); i++ {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"a"}})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		codes[p.Status]++
		if p.Status != http.StatusOK {
			t.Errorf("request %d: %s; want it answered", i, p)
		}
	}
	st := s.stats(t)
	if st.Crashes < 4 || st.Poisoned != 0 {
		t.Errorf("%d deaths, %d items poisoned (answers by code %v); want 4 deaths or more, and none poisoned", st.Crashes, st.Poisoned, codes)
	}
	if strings.Contains(s.logs(), "poison item isolated") {
		t.Errorf("an item was taken for poison:\n%s", s.logs())
	}
}

// TestEightWorkersDyingTogetherDoNotConvictTheItemTheyRan: eight workers
// that die at the same age (their tenth batch) can kill the item one client
// sends again and again, alone, three times in a row before any death was
// recorded. The model answered it before, so it is not taken for poison.
// (Before, answers were hashed only once the record held a death, and the
// item was convicted and refused on sight in about half the runs.)
func TestEightWorkersDyingTogetherDoNotConvictTheItemTheyRan(t *testing.T) {
	s := startServer(t, "--workers", "8", "--model", "chaos:crash-every=10", "--max-restarts", "1000")
	s.waitAllReady(t, 8)
	for i := 0; i < 300 && !s.exited(); i++ {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"same"}})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if p.Status == http.StatusUnprocessableEntity {
			t.Fatalf("request %d: %s; want the item answered:\n%s", i, p, s.logs())
		}
	}
	if st := s.stats(t); st.Poisoned != 0 || st.Crashes == 0 {
		t.Errorf("%d deaths, %d items poisoned; want deaths, and none poisoned", st.Crashes, st.Poisoned)
	}
}

// TestTwoBadItemsSentAgainAndAgainToAQuietServer: a client that sends two
// different bad items again and again to a server of one worker, which
// nothing else keeps busy, has both refused (422) and the server up. The
// second could not be told from a model turned bad (nothing was answered
// since the first was convicted): the server asks the model with an item
// it answered before. (Before, the second's deaths counted, and the
// server gave up and exited 1 with requests answered 503.)
func TestTwoBadItemsSentAgainAndAgainToAQuietServer(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "chaos:crash=X,panic=Y")
	s.waitAllReady(t, 1)
	for i := range 30 {
		if p := s.predictJSON(t, fmt.Sprint("warm", i)); p.Status != http.StatusOK {
			t.Fatalf("warming up: %s", p)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[string]int{}
	)
	for range 3 {
		wg.Go(func() {
			for range 3 {
				for _, bad := range []string{"X", "Y"} {
					p, err := s.tryPredictJSON(map[string]any{"inputs": []any{bad}})
					mu.Lock()
					if err != nil {
						codes[bad+" "+err.Error()]++
					} else {
						codes[fmt.Sprint(bad, " ", p.Status)]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if want := map[string]int{"X 422": 9, "Y 422": 9}; !reflect.DeepEqual(codes, want) {
		t.Errorf("answers %v; want %v", codes, want)
	}
	if s.exited() {
		t.Fatalf("the server exited:\n%s", s.logs())
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Errorf("a good request after them: %s", p)
	}
}

func TestHangingBatchKillsWorker(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "chaos:hang=zzz", "--worker-timeout", "500ms")
	before := s.waitAllReady(t, 2)
	s.seenWorking(t)

	start := time.Now()
	// The request's own deadline is far beyond the worker timeout: it must
	// fail because the worker was killed, not because the client gave up.
	const requestTimeout = 8 * time.Second
	p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"zzz"}, "timeout_ms": requestTimeout.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if p.Status != http.StatusUnprocessableEntity && p.Status != http.StatusGatewayTimeout {
		t.Errorf("hanging request: %s, want 422 or 504", p)
	}
	if took < 500*time.Millisecond || took >= requestTimeout-time.Second {
		t.Errorf("hanging request answered after %s, want after the 500ms worker timeout and well before its own %s", took, requestTimeout)
	}
	oldPIDs := map[int]bool{before[0].PID: true, before[1].PID: true}
	s.waitFor(t, "a replaced worker", 10*time.Second, func() bool {
		for _, w := range s.readyWorkers(t) {
			if !oldPIDs[w.PID] {
				return true
			}
		}
		return false
	})
	if st := s.stats(t); st.Crashes == 0 {
		t.Error("no crash counted for the timed-out batch")
	}
	if p := s.predictJSON(t, "after", "hang"); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"after", "hang"}) {
		t.Errorf("after the hang: %s", p)
	}
}

// A worker whose batch hangs gives back the batch sent ahead to it before
// it was late: that batch runs on the other worker within a few batches'
// time, rather than wait for --worker-timeout to kill the hung worker.
func TestABatchSentAheadToAHungWorkerRunsOnTheOther(t *testing.T) {
	const workerTimeout = 8 * time.Second
	s := startServer(t, "--workers", "2", "--model", "chaos:hang=zzz,delay=1s", "--batch-size", "4", "--worker-timeout", workerTimeout.String())
	s.waitAllReady(t, 2)
	// Batches of 1 s, measured: a worker runs late 2.02 s into a batch,
	// time enough for the load below to come and have a batch sent ahead
	// to the hung worker, even on a loaded machine.
	var warm sync.WaitGroup
	for i := range 8 {
		warm.Go(func() {
			if p := s.predictJSON(t, fmt.Sprint("warm", i)); p.Status != http.StatusOK {
				t.Errorf("warming up: %s", p)
			}
		})
	}
	warm.Wait()
	hung := make(chan prediction, 1)
	go func() {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"zzz"}, "timeout_ms": 1000})
		if err != nil {
			p = prediction{Body: []byte(err.Error())}
		}
		hung <- p
	}()
	s.waitFor(t, "the hanging batch sent", readyTimeout, func() bool {
		return slices.ContainsFunc(s.workers(t), func(w supervisor.SlotStatus) bool { return w.InFlight == 1 })
	})
	// Four batches: one for the idle worker, then one ahead for each.
	start := time.Now()
	var load sync.WaitGroup
	for i := range 16 {
		load.Go(func() {
			if p := s.predictJSON(t, fmt.Sprint("load", i)); p.Status != http.StatusOK || len(p.Outputs) != 1 || p.Outputs[0] != fmt.Sprint("load", i) {
				t.Errorf("request %d under load: %s", i, p)
			}
		})
	}
	load.Wait()
	took := time.Since(start)
	// Four batches of 1 s on the other worker, where waiting for the hung
	// one to be killed takes the worker timeout and a batch more.
	if limit := workerTimeout - time.Second; took > limit {
		t.Errorf("16 requests beside a hung worker took %s; want under %s: the batch sent ahead to it should run on the other worker, not wait for the worker timeout (%s)", took, limit, workerTimeout)
	}
	if st := s.stats(t); st.Dispatch.Recalled == 0 {
		t.Errorf("no batch recalled (dispatch %+v): none was sent ahead to the hung worker, so the test tested nothing", st.Dispatch)
	}
	if p := <-hung; p.Status != http.StatusGatewayTimeout {
		t.Errorf("the hanging request: %s; want 504 at its deadline", p)
	}
}

// TestAStoppedSupervisorKillsNoHealthyWorker: a supervisor stopped
// (SIGSTOP: a debugger, a paused machine) while its worker runs a batch,
// for longer than the worker timeout, finds the batch answered when it
// resumes: the time it did not run is not time the batch ran, and the
// worker is not killed for it.
func TestAStoppedSupervisorKillsNoHealthyWorker(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "sleep:1s,0s", "--worker-timeout", "1500ms")
	before := s.waitAllReady(t, 1)
	answered := make(chan prediction, 1)
	go func() {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"a"}})
		if err != nil {
			p = prediction{Body: []byte(err.Error())}
		}
		answered <- p
	}()
	s.waitFor(t, "the batch sent to the worker", readyTimeout, func() bool { return s.stats(t).Submitted == 1 })
	if err := s.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Stopped past the batch's end and past the worker timeout.
	time.Sleep(2500 * time.Millisecond)
	if err := s.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if p := <-answered; p.Status != http.StatusOK {
		t.Errorf("the request whose batch ran while the supervisor was stopped: %s; want 200", p)
	}
	if st := s.stats(t); st.Crashes != 0 {
		t.Errorf("%d crashes counted; want none: the worker was healthy", st.Crashes)
	}
	if after := s.readyWorkers(t); len(after) != 1 || after[0].PID != before[0].PID {
		t.Errorf("workers %+v after the stop; want the same one, pid %d", after, before[0].PID)
	}
}

func TestBadInputAnsweredAndServerKeepsServing(t *testing.T) {
	s := startServer(t, "--max-body", "1000")
	tests := []struct {
		name        string
		method      string
		contentType string
		body        string
		wantStatus  int
		wantMsg     string
	}{
		{"malformed JSON", http.MethodPost, "application/json", `{"inputs": [`, 400, "malformed JSON"},
		{"missing inputs", http.MethodPost, "application/json", `{"input": [1]}`, 400, `missing "inputs"`},
		{"empty inputs", http.MethodPost, "application/json", `{"inputs": []}`, 400, `empty "inputs"`},
		{"malformed msgpack", http.MethodPost, "application/msgpack", "\xc1\xc1", 400, "msgpack"},
		{"wrong content type", http.MethodPost, "text/csv", "a,b", 415, `"text/csv"`},
		{"body over --max-body", http.MethodPost, "application/json", `{"inputs": ["` + strings.Repeat("x", 4000) + `"]}`, 413, "1000 bytes"},
		{"wrong method", http.MethodPut, "application/json", `{"inputs": [1]}`, 405, "POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, _, err := s.do(context.Background(), tt.method, "/predict", tt.contentType, []byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			var answer struct{ Error string }
			if status != tt.wantStatus || json.Unmarshal(body, &answer) != nil || !strings.Contains(answer.Error, tt.wantMsg) {
				t.Errorf("status %d, body %s; want %d with an error naming %q", status, body, tt.wantStatus, tt.wantMsg)
			}
			if p := s.predictJSON(t, "good", 1); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"good", 1.0}) {
				t.Errorf("good request right after: %s", p)
			}
		})
	}
}

// TestALargeRequestWaitsForItsRoom: a request larger than most that finds
// no room in the queue has room kept for it and waits for it, and a
// smaller one that would fit is refused meanwhile; the large one is
// answered once a batch has left room for it.
func TestALargeRequestWaitsForItsRoom(t *testing.T) {
	// The first batch runs 3 s: room is kept for the large request while
	// it runs, and made as it ends. Until a batch has told what one costs,
	// a request waits for room as long as it may wait at all, and after
	// that twice a batch. The steps below, each a poll of the stats, must
	// all be done within the first batch: a loaded machine took more than
	// 0.7 s for them.
	s := startServer(t, "--workers", "1", "--batch-size", "4", "--max-queue", "4", "--model", "sleep:3s,0s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	send := func(items string) {
		_, _, _, _ = s.do(ctx, http.MethodPost, "/predict", "application/json", []byte(`{"inputs": [`+items+`]}`))
	}
	go send(`"running"`)
	s.waitFor(t, "the first request running", 10*time.Second, func() bool { st := s.stats(t); return st.Submitted == 1 && st.Queued == 0 })
	for i := range 3 {
		go send(strconv.Quote(fmt.Sprint("queued", i)))
	}
	s.waitFor(t, "3 items queued", 10*time.Second, func() bool { return s.stats(t).Queued == 3 })
	large := make(chan prediction, 1)
	go func() {
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"large0", "large1"}})
		if err != nil {
			t.Error(err)
		}
		large <- p
	}()
	s.waitFor(t, "room kept for the large request", 10*time.Second, func() bool { return s.stats(t).RoomKept == 2 })
	status, body, hdr, err := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["small"]}`))
	if err != nil {
		t.Fatal(err)
	}
	// The room counts as taken: the queue is full for it, refused unread.
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || !strings.Contains(string(body), "unread") {
		t.Fatalf("1 item with 3 of 4 places taken and room kept for 2: %d %s (Retry-After %q); want 429 with Retry-After 1, refused unread", status, body, hdr.Get("Retry-After"))
	}
	if p := <-large; p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"large0", "large1"}) {
		t.Errorf("the large request, room made for it: %s; want its outputs", p)
	}
}

func TestOverloadAnswers429(t *testing.T) {
	s := startServer(t, "--workers", "1", "--batch-size", "1", "--max-queue", "2", "--model", "sleep:200ms,0s")
	const burst = 12
	type result struct {
		status int
		retry  string
		took   time.Duration
		err    error
	}
	results := make(chan result, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Go(func() {
			start := time.Now()
			status, _, hdr, err := s.tryPost("application/json", []byte(`{"inputs": ["burst-`+strconv.Itoa(i)+`"]}`))
			results <- result{status: status, retry: hdr.Get("Retry-After"), took: time.Since(start), err: err}
		})
	}
	wg.Wait()
	close(results)
	counts := map[int]int{}
	for r := range results {
		if r.err != nil {
			t.Error(r.err)
			continue
		}
		counts[r.status]++
		switch r.status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			if r.retry != "1" {
				t.Errorf("429 with Retry-After %q, want 1", r.retry)
			}
			if r.took > time.Second {
				t.Errorf("429 took %s; refusal should be at once", r.took)
			}
		default:
			t.Errorf("status %d in an overload burst, want 200 or 429", r.status)
		}
	}
	if counts[http.StatusOK] == 0 || counts[http.StatusTooManyRequests] == 0 {
		t.Errorf("statuses %v: want some 200 and some 429", counts)
	}
	if p := s.predictJSON(t, "after the burst"); p.Status != http.StatusOK {
		t.Errorf("after the burst: %s", p)
	}
}

// TestJSONLogEndsWithJSON: with --log-format json, every line a server
// that gives up writes is JSON, the error it exits with too: that line,
// the one a log pipeline most needs, was plain text.
func TestJSONLogEndsWithJSON(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--model", "chaos:init-fail", "--max-restarts", "1"}, "init failed as asked"},
		// Refused by the checks of the flags, before the server starts.
		{[]string{"--memory-limit", "1KB"}, "--memory-limit"},
		{[]string{"--model", "", "--log-level", "info"}, "--model is empty"},
	} {
		out := runServeToFailure(t, nil, append([]string{"--log-format", "json"}, tc.args...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for i, line := range lines {
			if !json.Valid([]byte(line)) {
				t.Errorf("%s: line %d is not JSON: %s", tc.args, i+1, line)
			}
		}
		var last struct{ Level, Msg, Err string }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Level != "ERROR" || last.Msg != "exiting" || !strings.Contains(last.Err, tc.says) {
			t.Errorf("%s: last line %s (%v); want an ERROR saying why the server exits", tc.args, lines[len(lines)-1], err)
		}
	}
}

func TestNoLiveWorkerFailsFast(t *testing.T) {
	for _, tt := range []struct{ model, reason string }{
		{"chaos:init-fail", "init failed as asked"},
		{"chaos:init-exit", "exiting during init as asked"},
	} {
		model := tt.model
		t.Run(model, func(t *testing.T) {
			s := launchServer(t, "--model", model, "--max-restarts", "2")
			// Either the server answers 503 quickly while it is up, or it gives
			// up and exits non-zero; it must never hang a client.
			var served bool
			waitFor(t, "the server to refuse work or exit", 10*time.Second, func() bool {
				if s.exited() {
					return true
				}
				// A server that accepts connections but never answers them
				// is the hang this test is about: each probe is bounded.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				status, _, _, err := s.do(ctx, http.MethodGet, "/readyz", "", nil)
				if err != nil {
					return false // not listening yet, or not answering
				}
				if status != http.StatusServiceUnavailable {
					t.Fatalf("/readyz answered %d with no worker able to start", status)
				}
				start := time.Now()
				pstatus, body, _, err := s.do(ctx, http.MethodPost, "/predict", "application/json", []byte(`{"inputs": [1]}`))
				if err != nil {
					return s.exited() // the server may have quit meanwhile
				}
				if pstatus != http.StatusServiceUnavailable || time.Since(start) > time.Second {
					t.Fatalf("/predict with no worker: status %d after %s (%s), want 503 within 1s", pstatus, time.Since(start), body)
				}
				served = true
				return true
			})
			if served {
				return
			}
			code, err := s.wait(stopTimeout)
			if err != nil || code == 0 {
				t.Errorf("server with no possible worker: exit code %d (%v), want non-zero", code, err)
			}
			if !strings.Contains(s.logs(), tt.reason) {
				t.Errorf("the server's output does not say why the workers failed (%q)", tt.reason)
			}
		})
	}
}

func TestDeadlineAnswers504(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "sleep:800ms,0s")
	tests := []struct {
		name   string
		body   any
		header []string
	}{
		{"timeout_ms", map[string]any{"inputs": []any{"slow"}, "timeout_ms": 150}, nil},
		{"header", map[string]any{"inputs": []any{"slow"}}, []string{"X-Timeout-Ms", "150"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			p, err := s.tryPredictJSON(tt.body, tt.header...)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if p.Status != http.StatusGatewayTimeout {
				t.Errorf("%s, want 504", p)
			}
			if took < 150*time.Millisecond || took > 700*time.Millisecond {
				t.Errorf("answered after %s, want at the 150ms deadline, before the 800ms batch ends", took)
			}
		})
	}
	p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"patient"}, "timeout_ms": 20000})
	if err != nil || p.Status != http.StatusOK {
		t.Errorf("a request with room for the batch: %s %v", p, err)
	}
}

func TestSIGTERMDrainsAdmittedRequests(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "sleep:1s,0s", "--batch-size", "4", "--grace", "10s")
	const inflight = 6
	var completed atomic.Int64
	type answer struct {
		p   prediction
		err error
		in  []any
	}
	answers := make(chan answer, inflight)
	for i := range inflight {
		go func() {
			in := []any{"drain-" + strconv.Itoa(i)}
			p, err := s.tryPredictJSON(map[string]any{"inputs": in})
			completed.Add(1)
			answers <- answer{p, err, in}
		}()
	}
	s.waitFor(t, "the requests to be admitted", readyTimeout, func() bool { return s.stats(t).Submitted >= inflight })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	doneBeforeSignal := completed.Load()

	// New work is refused once the signal is handled: 503, or no listener.
	waitFor(t, "new requests to be refused", 5*time.Second, func() bool {
		status, _, _, err := s.tryPost("application/json", []byte(`{"inputs": ["late"]}`))
		return err != nil || status == http.StatusServiceUnavailable
	})
	for range inflight {
		a := <-answers
		if a.err != nil || a.p.Status != http.StatusOK || !reflect.DeepEqual(a.p.Outputs, a.in) {
			t.Errorf("admitted request %v during drain: %s %v", a.in, a.p, a.err)
		}
	}
	if doneBeforeSignal == inflight {
		t.Error("every request finished before SIGTERM; the test proved nothing")
	}
	code, err := s.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGTERM, want 0", code, err)
	}
	// Every worker's end is a lifecycle event of its own.
	if got := strings.Count(s.logs(), `msg="worker stopped"`); got != 2 || !strings.Contains(s.logs(), "reason=shutdown") {
		t.Errorf("%d lines say a worker stopped, for the shutdown; want one for each of the 2:\n%s", got, s.logs())
	}
}

// Workers slow to open their model, and a SIGTERM while they start, are
// no errors: the server refuses requests meanwhile, says so, stops the
// workers as asked and exits 0, without an error line. (Before, a start
// longer than --unavailable-after logged "no worker is able to run" at
// ERROR level, and each slot "worker failed to start" for its start cut
// short.)
func TestSIGTERMWhileWorkersStartIsNoError(t *testing.T) {
	s := launchServer(t, "--workers", "2", "--model", "chaos:init-delay=5s", "--unavailable-after", "100ms")
	s.waitFor(t, "both workers to be starting, past --unavailable-after", readyTimeout, func() bool {
		return strings.Count(s.logs(), `msg="worker started"`) == 2 && strings.Contains(s.logs(), "the workers are still starting")
	})
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := s.wait(stopTimeout)
	if err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGTERM while starting, want 0", code, err)
	}
	if strings.Contains(s.logs(), "level=ERROR") {
		t.Errorf("a SIGTERM while starting logged an error:\n%s", s.logs())
	}
}

// TestServerOutlivesItsLogReader: a server whose log reader goes away (a
// `| tee` that died, a log shipper restarted) loses the lines it writes
// from then on, not its life: a worker killed, which it logs, comes back,
// requests are answered, and SIGTERM ends it with status 0.
func TestServerOutlivesItsLogReader(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{
		addr:   freePort(t),
		out:    &syncbuf.Buffer{},
		done:   make(chan struct{}),
		client: &http.Client{Timeout: requestTimeout},
	}
	s.cmd = exec.Command(streamerBin, "serve", "--listen", s.addr, "--workers", "1", "--model", "echo")
	s.cmd.Stdout, s.cmd.Stderr = w, w
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	// The reader leaves once the server has said something.
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("the server's first line: %v", err)
	}
	r.Close()

	before := s.waitAllReady(t, 1)
	killWorker(t, before[0].PID)
	s.waitFor(t, "the killed worker to be replaced", readyTimeout, func() bool {
		if s.exited() {
			t.Fatalf("the server died with its log reader gone: %v", s.cmd.ProcessState)
		}
		after := s.readyWorkers(t)
		return len(after) == 1 && after[0].PID != before[0].PID
	})
	if got := s.predictJSON(t, "still here"); got.Status != http.StatusOK {
		t.Errorf("a request with the log reader gone: %d %s", got.Status, got.Body)
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := s.wait(stopTimeout); err != nil || code != 0 {
		t.Errorf("exit code %d (%v) after SIGTERM with the log reader gone, want 0", code, err)
	}
}

func TestModelStdoutGoesToLogNotProtocol(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "chaos:stdout", "--log-format", "json")
	pid := s.waitAllReady(t, 1)[0].PID
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Go(func() {
			for r := range 5 {
				in := []any{fmt.Sprintf("noisy-%d-%d", c, r), map[string]any{"n": float64(r)}}
				p, err := s.tryPredictJSON(map[string]any{"inputs": in})
				if err != nil || p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, in) {
					t.Errorf("inputs %v: %s %v", in, p, err)
				}
			}
		})
	}
	wg.Wait()

	var tagged bool
	s.waitFor(t, "the model's stdout in the log", 5*time.Second, func() bool {
		tagged = false
		found := false
		for _, line := range logLinesContaining(s.logs(), "chaos: a batch of") {
			found = true
			if slot, ok := line["slot"].(float64); ok && slot == 0 && line["pid"] == float64(pid) {
				tagged = true
			}
		}
		return found
	})
	if !tagged {
		t.Errorf("the model's stdout lines are not tagged with slot 0 and pid %d:\n%s", pid,
			strings.Join(rawLinesContaining(s.logs(), "chaos: a batch of"), "\n"))
	}
}

// logLinesContaining decodes the JSON log lines that mention text.
func logLinesContaining(logs, text string) []map[string]any {
	var out []map[string]any
	for _, raw := range rawLinesContaining(logs, text) {
		var line map[string]any
		if json.Unmarshal([]byte(raw), &line) == nil {
			out = append(out, line)
		}
	}
	return out
}

func rawLinesContaining(logs, text string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), text) {
			out = append(out, sc.Text())
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		out = append(out, "(reading the log: "+err.Error()+")")
	}
	return out
}

func TestMsgpackAndFormClients(t *testing.T) {
	s := startServer(t, "--workers", "2")

	body, err := msgpack.Marshal(map[string]any{"inputs": []any{"a", []byte{1, 2}, 3.5, map[string]any{"k": int8(1)}}})
	if err != nil {
		t.Fatal(err)
	}
	status, data, hdr := s.post(t, "application/msgpack", body)
	var answer struct {
		Outputs []any `msgpack:"outputs"`
	}
	if status != http.StatusOK || hdr.Get("Content-Type") != "application/msgpack" || msgpack.Unmarshal(data, &answer) != nil {
		t.Fatalf("msgpack request: status %d, Content-Type %q, body %x", status, hdr.Get("Content-Type"), data)
	}
	want := []any{"a", []byte{1, 2}, 3.5, map[string]any{"k": int8(1)}}
	if !reflect.DeepEqual(answer.Outputs, want) {
		t.Errorf("msgpack outputs %#v, want %#v", answer.Outputs, want)
	}

	// The original service-streamer clients post one form field s per item.
	form := url.Values{"s": {"I love [MASK].", "second & last"}}.Encode()
	status, data, _ = s.post(t, "application/x-www-form-urlencoded", []byte(form))
	p, err := decodePrediction(status, data, nil)
	if err != nil || !reflect.DeepEqual(p.Outputs, []any{"I love [MASK].", "second & last"}) {
		t.Errorf("form request: %s %v", p, err)
	}
}

// TestServeWithoutModelSaysItServesEcho: a server started without --model
// serves the built-in echo model, and says so in its log, as a command
// line that lost its --model would otherwise answer every item with itself
// silently; one given --model echo says nothing of it.
func TestServeWithoutModelSaysItServesEcho(t *testing.T) {
	const warning = "no --model: serving the built-in echo model"
	bare := startServer(t, "--workers", "1")
	named := startServer(t, "--workers", "1", "--model", "echo")
	if !strings.Contains(bare.logs(), warning) {
		t.Errorf("a server without --model logged no warning:\n%s", bare.logs())
	}
	if strings.Contains(named.logs(), warning) {
		t.Errorf("a server given --model echo warned of it:\n%s", named.logs())
	}
}
