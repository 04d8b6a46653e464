package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
	"github.com/streamer-dev/streamer/supervisor"
)

// installModel writes the test model name at path, as an operator
// replaces a served file, and returns its bytes.
func installModel(t *testing.T, path, name string) []byte {
	t.Helper()
	data, err := onnxtest.Build(name)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, path, data, 0o644)
	return data
}

// TestONNXReloadRefusesAModelWithOtherInputs replaces the served model file
// by one with other inputs and outputs: the reload fails, saying to restart
// the server, and the old workers keep answering as before. A worker that
// crashes meanwhile refuses the file too. A file with the same inputs and
// outputs (new weights) then reloads, and its answers are served.
func TestONNXReloadRefusesAModelWithOtherInputs(t *testing.T) {
	_, ref := onnxModel(t, onnxtest.MLP)
	path := filepath.Join(t.TempDir(), "model.onnx")
	install := func(name string) { installModel(t, path, name) }
	install(onnxtest.MLP)
	s := startAdminServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "2")
	before := s.waitAllReady(t, 2)
	x := []float32{0.5, -1, 2, 0.25}
	answers := func(want []float64) {
		t.Helper()
		p := s.predictJSON(t, x)
		if p.Status != http.StatusOK {
			t.Fatalf("%s", p)
		}
		if err := nearJSON(p.Outputs[0], want); err != nil {
			t.Fatal(err)
		}
	}
	answers(ref.MLP(x))

	install(onnxtest.Seq)
	status, answer := s.admin(t, "/admin/reload", "{}")
	msg, _ := answer["error"].(string)
	if status != http.StatusInternalServerError || !strings.Contains(msg, "inputs or outputs changed") || !strings.Contains(msg, "restart the server") {
		t.Fatalf("POST /admin/reload of a model with other inputs: %d %v, want 500 telling to restart the server", status, answer)
	}
	if st := s.stats(t); !strings.Contains(st.LastReloadError, "restart the server") {
		t.Errorf("last reload error %q does not say to restart the server", st.LastReloadError)
	}
	after := s.workers(t)
	if len(after) != 2 || after[0].PID != before[0].PID || after[1].PID != before[1].PID {
		t.Fatalf("workers after a refused reload: %+v, want the old ones %+v", after, before)
	}
	answers(ref.MLP(x))

	killWorker(t, before[1].PID)
	s.waitFor(t, "the restarted worker to refuse the changed model", readyTimeout, func() bool {
		return strings.Count(s.logs(), "restart the server to serve a model with other inputs or outputs") >= 2
	})
	answers(ref.MLP(x))

	install(onnxtest.Demo)
	if status, answer := s.admin(t, "/admin/reload", "{}"); status != http.StatusOK {
		t.Fatalf("POST /admin/reload of a model with the same inputs and outputs: %d %v", status, answer)
	}
	demo, err := onnxtest.Build(onnxtest.Demo)
	if err != nil {
		t.Fatal(err)
	}
	demoRef, err := onnxtest.LoadBytes(demo)
	if err != nil {
		t.Fatal(err)
	}
	answers(demoRef.Demo(x))
}

// TestAWorkerRestartedOnAReplacedFileWaitsForIt: a worker that crashes
// after its model file was replaced by one of other inputs and outputs,
// or by one still being written, refuses the file and tries again, as for
// new weights, without counting towards --max-restarts: before, the
// refusals gave the slot up, and a server of one worker exited in the
// middle of an ordinary deploy. Once the file it loaded is back, the
// worker serves it.
func TestAWorkerRestartedOnAReplacedFileWaitsForIt(t *testing.T) {
	onnxModel(t, onnxtest.MLP) // fails the test at once when the runtime library is missing
	path := filepath.Join(t.TempDir(), "model.onnx")
	whole := installModel(t, path, onnxtest.MLP)
	// Two restarts allowed, for the test's two kills.
	s := startServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "1", "--max-restarts", "2")
	first := s.waitAllReady(t, 1)
	for i, replace := range []struct {
		what      string
		do        func()
		says, why string // in the log, and in /readyz (cut short)
	}{
		{"a model of other inputs", func() { installModel(t, path, onnxtest.Seq) }, "restart the server to serve a model with other inputs or outputs", "inputs or outputs changed"},
		{"a file cut short", func() { replaceFile(t, path, whole[:len(whole)/2], 0o644) }, "the file changed since it was loaded", "not an ONNX model"},
	} {
		said := strings.Count(s.logs(), replace.says)
		replace.do()
		pid := s.readyWorkers(t)[0].PID
		if i == 0 {
			pid = first[0].PID
		}
		killWorker(t, pid)
		s.waitFor(t, "the restarted worker to refuse "+replace.what+" twice", readyTimeout, func() bool {
			return strings.Count(s.logs(), replace.says) >= said+2
		})
		if s.exited() {
			t.Fatalf("the server exited on the refusals of %s:\n%s", replace.what, s.logs())
		}
		status, body, err := s.get("/readyz")
		if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), replace.why) {
			t.Errorf("/readyz while the worker refuses %s: %d %s, %v; want 503 saying %q", replace.what, status, body, err, replace.why)
		}
		installModel(t, path, onnxtest.MLP)
		s.waitAllReady(t, 1)
	}
}

// TestONNXFileReplacedWithoutAReloadIsNotServed replaces the served file by
// one with the same inputs and outputs and other weights, without a
// reload, and kills a worker: the restarted worker refuses the file,
// saying that it changed and that a reload serves it, in the log and in
// its slot's last_error, and every answer still comes from the weights the
// server loaded, whose SHA-256 /v1/models names. A reload then serves the
// new file on every worker, and /v1/models names its checksum.
func TestONNXFileReplacedWithoutAReloadIsNotServed(t *testing.T) {
	onnxModel(t, onnxtest.MLP) // fails the test at once, with the fix, when the runtime library is missing
	path := filepath.Join(t.TempDir(), "model.onnx")
	loaded := installModel(t, path, onnxtest.MLP)
	s := startAdminServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "2")
	before := s.waitAllReady(t, 2)
	x := []float32{0.5, -1, 2, 0.25}
	oldWeights, oldSum := weightsOf(t, loaded)
	s.answersAll(t, x, oldWeights.MLP(x))
	s.servesChecksum(t, oldSum)

	replaced := installModel(t, path, onnxtest.Demo)
	newWeights, newSum := weightsOf(t, replaced)
	if newSum == oldSum || slices.Equal(newWeights.Demo(x), oldWeights.MLP(x)) {
		t.Fatal("the replacing model is the same as the one served")
	}
	slot := s.restartRefuses(t, before[1], "the file")
	why := fmt.Sprintf("the model file changed since it was loaded (sha256 %s, now %s): reload to serve the new one", oldSum, newSum)
	if !strings.Contains(slot.LastErr, why) {
		t.Errorf("slot %d's last error %q does not say %q", slot.Slot, slot.LastErr, why)
	}
	s.waitLogged(t, why)
	s.answersAll(t, x, oldWeights.MLP(x))
	s.servesChecksum(t, oldSum)

	if status, answer := s.admin(t, "/admin/reload", "{}"); status != http.StatusOK {
		t.Fatalf("POST /admin/reload: %d %v", status, answer)
	}
	s.waitAllReady(t, 2)
	s.answersAll(t, x, newWeights.Demo(x))
	s.servesChecksum(t, newSum)
}

// TestONNXExternalWeightsReplacedWithoutAReloadAreNotServed: weights kept
// in a file of their own beside the model count as the model file does. A
// worker restarted after that file was replaced without a reload served
// the new weights beside the other worker's old ones; it refuses them, and
// a reload serves them on every worker.
func TestONNXExternalWeightsReplacedWithoutAReloadAreNotServed(t *testing.T) {
	dir := t.TempDir()
	path, err := onnxtest.Custom{
		Inputs:   []onnxtest.Value{{Name: "x", DType: onnxpb.TensorProto_INT64, Dims: []any{"batch", 2}}},
		Outputs:  []onnxtest.Value{{Name: "y", DType: onnxpb.TensorProto_INT64, Dims: []any{"batch", 2}}},
		Nodes:    []onnxtest.Node{{Op: "Add", Inputs: []string{"x", "w"}, Output: "y"}},
		Int64s:   map[string][]int64{"w": {1, 2}},
		External: map[string]string{"w": "w.bin"},
	}.Write(dir, "model")
	if err != nil {
		t.Fatal(err)
	}
	onnxModel(t, onnxtest.MLP) // fails the test at once, with the fix, when the runtime library is missing
	s := startAdminServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "2")
	before := s.waitAllReady(t, 2)
	x := []float32{10, 20}
	s.answersAll(t, x, []float64{11, 22})

	next := filepath.Join(dir, "w.bin.new")
	if err := os.WriteFile(next, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 100), 200), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, filepath.Join(dir, "w.bin")); err != nil {
		t.Fatal(err)
	}
	s.restartRefuses(t, before[1], "the weights file")
	s.answersAll(t, x, []float64{11, 22})

	if status, answer := s.admin(t, "/admin/reload", "{}"); status != http.StatusOK {
		t.Fatalf("POST /admin/reload: %d %v", status, answer)
	}
	s.waitAllReady(t, 2)
	s.answersAll(t, x, []float64{110, 220})
}

// TestONNXFileReplacedKeepsTheLastSlotRetrying replaces the file of a
// server with one worker, kills the worker, and lets its restarts refuse
// the file well past --max-restarts: the refusals are not crashes, so the
// slot keeps retrying, not ready, saying why in its last_error and in
// GET /readyz, and the server does not exit. A reload then serves the new
// file.
func TestONNXFileReplacedKeepsTheLastSlotRetrying(t *testing.T) {
	onnxModel(t, onnxtest.MLP) // fails the test at once, with the fix, when the runtime library is missing
	path := filepath.Join(t.TempDir(), "model.onnx")
	installModel(t, path, onnxtest.MLP)
	const maxRestarts = 2
	s := startAdminServer(t, "--model", path, "--intra-op-threads", "1", "--workers", "1", "--max-restarts", fmt.Sprint(maxRestarts))
	before := s.waitAllReady(t, 1)
	replaced := installModel(t, path, onnxtest.Demo)
	newWeights, newSum := weightsOf(t, replaced)
	killWorker(t, before[0].PID)

	const refusal = "changed since it was loaded"
	var slot supervisor.SlotStatus
	s.waitFor(t, "the slot to refuse the file more times than --max-restarts allows, or the server to exit", readyTimeout, func() bool {
		if s.exited() {
			t.Fatalf("the server exited after its one worker refused the replaced file; log:\n%s", s.logs())
		}
		slot = s.slot(t, before[0].Slot)
		return slot.Restarts > before[0].Restarts+maxRestarts+2 && strings.Contains(slot.LastErr, refusal)
	})
	if slot.State == supervisor.SlotFailed || slot.State == supervisor.SlotReady {
		t.Fatalf("slot after refusing the replaced file: %+v, want it retrying", slot)
	}
	s.waitFor(t, "the log to say more refusals of the file than --max-restarts", readyTimeout, func() bool {
		return strings.Count(s.logs(), "reload to serve the new one") > maxRestarts
	})
	status, body, _, err := s.do(t.Context(), http.MethodGet, "/readyz", "", nil)
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), refusal) {
		t.Errorf("GET /readyz: %d %s, %v; want 503 saying the file %s", status, body, err, refusal)
	}

	if status, answer := s.admin(t, "/admin/reload", "{}"); status != http.StatusOK {
		t.Fatalf("POST /admin/reload: %d %v", status, answer)
	}
	s.waitAllReady(t, 1)
	x := []float32{0.5, -1, 2, 0.25}
	s.answersAll(t, x, newWeights.Demo(x))
	s.servesChecksum(t, newSum)
}

// weightsOf is the reference computation of the model file data, and the
// file's SHA-256 in hex.
func weightsOf(t *testing.T, data []byte) (*onnxtest.Reference, string) {
	t.Helper()
	ref, err := onnxtest.LoadBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return ref, hex.EncodeToString(sum[:])
}

// restartRefuses kills the worker of killed, whose file (what) was
// replaced without a reload, and returns its slot once the restart has
// refused the file, failing the test if it opened it.
func (s *server) restartRefuses(t *testing.T, killed supervisor.SlotStatus, what string) supervisor.SlotStatus {
	t.Helper()
	killWorker(t, killed.PID)
	var slot supervisor.SlotStatus
	s.waitFor(t, "the killed worker's restart to open "+what+" or refuse it", readyTimeout, func() bool {
		slot = s.slot(t, killed.Slot)
		return slot.State == supervisor.SlotReady && slot.PID != killed.PID || strings.Contains(slot.LastErr, "changed since it was loaded")
	})
	if slot.State == supervisor.SlotReady {
		t.Fatalf("the worker restarted after %s was replaced without a reload opened it: %+v", what, slot)
	}
	return slot
}

// answersAll sends eight requests for x at once, as many as keep every
// ready worker busy, and checks that each answer is want.
func (s *server) answersAll(t *testing.T, x []float32, want []float64) {
	t.Helper()
	answers := make([]prediction, 8)
	errs := make([]error, len(answers))
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i], errs[i] = s.tryPredictJSON(map[string]any{"inputs": []any{x}}) })
	}
	wg.Wait()
	for i, p := range answers {
		if errs[i] == nil && p.Status != http.StatusOK {
			errs[i] = fmt.Errorf("%s", p)
		}
		if errs[i] == nil {
			errs[i] = nearJSON(p.Outputs[0], want)
		}
		if errs[i] != nil {
			t.Errorf("request %d of %d: %v", i+1, len(answers), errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// servesChecksum checks that GET /v1/models names the model file whose
// SHA-256 is sum.
func (s *server) servesChecksum(t *testing.T, sum string) {
	t.Helper()
	var desc struct {
		SHA256 string `json:"sha256"`
	}
	s.getJSON(t, "/v1/models", &desc)
	if desc.SHA256 != sum {
		t.Fatalf("GET /v1/models: sha256 %q, want %s", desc.SHA256, sum)
	}
}

// slot returns slot n of GET /v1/workers.
func (s *server) slot(t *testing.T, n int) supervisor.SlotStatus {
	t.Helper()
	for _, w := range s.workers(t) {
		if w.Slot == n {
			return w
		}
	}
	t.Fatalf("GET /v1/workers lists no slot %d", n)
	return supervisor.SlotStatus{}
}
