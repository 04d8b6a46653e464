package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// TestONNXReloadRefusesAModelWithOtherInputs replaces the served model file
// by one with other inputs and outputs: the reload fails, saying to restart
// the server, and the old workers keep answering as before. A worker that
// crashes meanwhile refuses the file too. A file with the same inputs and
// outputs (new weights) then reloads, and its answers are served.
func TestONNXReloadRefusesAModelWithOtherInputs(t *testing.T) {
	_, ref := onnxModel(t, onnxtest.MLP)
	path := filepath.Join(t.TempDir(), "model.onnx")
	install := func(name string) {
		t.Helper()
		data, err := onnxtest.Build(name)
		if err != nil {
			t.Fatal(err)
		}
		// Write beside it and rename: a worker never reads half a file.
		if err := os.WriteFile(path+".new", data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
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
