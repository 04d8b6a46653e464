package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
)

func newTriton(model TensorModel, backend *fakeBackend) http.Handler {
	if backend == nil {
		backend = &fakeBackend{ready: true}
	}
	return New(Config{Backend: backend, Tensors: model, MaxBatchSize: 32, MaxQueueDelay: 5 * time.Millisecond})
}

func TestV2ConfigOfABatchingModel(t *testing.T) {
	model := echoModel(spec("x", "FP32", true, -1, 3, -1), spec("s", "BYTES", true, -1))
	h := newTriton(model, nil)
	want := `{"name":"m","platform":"test","max_batch_size":32,` +
		`"input":[{"name":"x","data_type":"TYPE_FP32","dims":[3,-1]},{"name":"s","data_type":"TYPE_STRING","dims":[]}],` +
		`"output":[{"name":"x","data_type":"TYPE_FP32","dims":[3,-1]},{"name":"s","data_type":"TYPE_STRING","dims":[]}],` +
		`"dynamic_batching":{"max_queue_delay_microseconds":5000},"version_policy":{"latest":{"num_versions":1}},"parameters":{}}`
	for _, path := range []string{"/v2/models/m/config", "/v2/models/m/versions/1/config"} {
		rec := do(t, h, http.MethodGet, path, "", nil)
		if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != want {
			t.Errorf("GET %s = %d %s\nwant %s", path, rec.Code, rec.Body, want)
		}
	}
	if got := model.meta.Inputs[0].Shape; len(got) != 3 {
		t.Errorf("the configuration changed the model's own shapes: %v", got)
	}
}

// TestV2ConfigOfAModelWithAnUnbatchedInput: Triton cannot say that one
// input is sent whole to every row, so the configuration gives the shapes
// whole, batch axis included, with max_batch_size 0.
func TestV2ConfigOfAModelWithAnUnbatchedInput(t *testing.T) {
	h := newTriton(echoModel(spec("x", "INT64", true, -1, 4), spec("scale", "FP16", false, 2)), nil)
	rec := do(t, h, http.MethodGet, "/v2/models/m/config", "", nil)
	var cfg tritonConfig
	if err := json.Unmarshal(rec.Body.Bytes(), &cfg); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET config = %d %s (%v)", rec.Code, rec.Body, err)
	}
	if cfg.MaxBatchSize != 0 {
		t.Errorf("max_batch_size %d, want 0 for a model with an unbatched input", cfg.MaxBatchSize)
	}
	if got := cfg.Input; len(got) != 2 || !slices.Equal(got[0].Dims, []int64{-1, 4}) || !slices.Equal(got[1].Dims, []int64{2}) || got[1].DataType != "TYPE_FP16" {
		t.Errorf("inputs %+v, want x [-1 4] and scale TYPE_FP16 [2]", got)
	}
}

func TestV2ConfigWithoutABatchSize(t *testing.T) {
	h := newV2(echoModel(spec("x", "FP32", true, -1)), nil)
	rec := do(t, h, http.MethodGet, "/v2/models/m/config", "", nil)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "dynamic_batching") ||
		!strings.Contains(rec.Body.String(), `"max_batch_size":0`) {
		t.Errorf("GET config with no batch size configured = %d %s, want max_batch_size 0 and no dynamic_batching", rec.Code, rec.Body)
	}
}

// TestV2StatsInTritonsForm: of the 8 rows answered, 1 expired before it
// ran, and of the 7 run 1 was answered with an error as its deadline
// passed while it ran, so success counts 6 and fail 2, adding up to the
// rows answered, while the times and queue and compute_infer are of the 7
// rows run.
func TestV2StatsInTritonsForm(t *testing.T) {
	stats := supervisor.Stats{Answered: 8, Failed: 2, Expired: 2, Batches: 3, BatchSizes: []uint64{0, 1, 0, 2}}
	stats.Latency.EndToEnd = supervisor.Histogram{Counts: []uint64{5, 2}, SumSeconds: 0.5}
	stats.Latency.QueueWait = supervisor.Histogram{Counts: []uint64{7}, SumSeconds: 0.125}
	stats.Latency.Compute = supervisor.Histogram{Counts: []uint64{6, 1}, SumSeconds: 0.375}
	h := newTriton(echoModel(spec("v", "FP32", true, -1)), &fakeBackend{ready: true, stats: stats})
	before := time.Now().UnixMilli()
	if rec := postV2(t, h, "/v2/models/m/infer", valuesBody("FP32", `[1]`)); rec.Code != http.StatusOK {
		t.Fatalf("infer = %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/v2/models/m/stats", "/v2/models/m/versions/1/stats", "/v2/models/stats"} {
		rec := do(t, h, http.MethodGet, path, "", nil)
		var got tritonStats
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || len(got.ModelStats) != 1 {
			t.Fatalf("GET %s = %d %s (%v)", path, rec.Code, rec.Body, err)
		}
		m := got.ModelStats[0]
		is := m.InferenceStats
		switch {
		case m.Name != "m" || m.Version != "1":
			t.Errorf("%s: model %q version %q", path, m.Name, m.Version)
		case m.InferenceCount != 6 || m.ExecutionCount != 3:
			t.Errorf("%s: inference_count %d, execution_count %d, want 6 and 3", path, m.InferenceCount, m.ExecutionCount)
		case is.Success != tritonDuration{Count: 6, NS: 500_000_000}:
			t.Errorf("%s: success %+v, want 6 rows and the time of the 7 run", path, is.Success)
		case is.Queue != tritonDuration{Count: 7, NS: 125_000_000} || is.ComputeInfer != tritonDuration{Count: 7, NS: 375_000_000}:
			t.Errorf("%s: queue %+v, compute_infer %+v", path, is.Queue, is.ComputeInfer)
		case is.Fail.Count != 2 || is.Success.Count+is.Fail.Count != stats.Answered:
			t.Errorf("%s: fail %+v, want 2 items, and with success's the %d answered", path, is.Fail, stats.Answered)
		case len(m.BatchStats) != 2 || m.BatchStats[0].BatchSize != 1 || m.BatchStats[1].BatchSize != 3 || m.BatchStats[1].ComputeInfer.Count != 2:
			t.Errorf("%s: batch_stats %+v, want sizes 1 (once) and 3 (twice)", path, m.BatchStats)
		case m.LastInference < before || m.LastInference > time.Now().UnixMilli():
			t.Errorf("%s: last_inference %d, want the time of the request answered (after %d)", path, m.LastInference, before)
		}
	}
}

func TestV2StatsBeforeAnyInference(t *testing.T) {
	h := newTriton(echoModel(spec("x", "FP32", true, -1)), nil)
	rec := do(t, h, http.MethodGet, "/v2/models/m/stats", "", nil)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, `"last_inference":0`) || !strings.Contains(body, `"batch_stats":[]`) {
		t.Errorf("GET stats = %d %s, want last_inference 0 and empty lists", rec.Code, body)
	}
	rec = do(t, newTriton(echoModel(spec("x", "FP32", true, -1)), nil), http.MethodGet, "/v2/models/other/stats", "", nil)
	if rec.Code != http.StatusNotFound || !strings.Contains(errorOf(t, rec), `unknown model "other"`) {
		t.Errorf("stats of another model = %d %s, want 404 naming it", rec.Code, rec.Body)
	}
	rec = do(t, New(Config{Backend: &fakeBackend{}}), http.MethodGet, "/v2/models/stats", "", nil)
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != `{"model_stats":[]}` {
		t.Errorf("every model's stats with no tensor model = %d %s, want an empty list", rec.Code, rec.Body)
	}
}

func TestV2RepositoryIndex(t *testing.T) {
	tests := []struct {
		name  string
		ready bool
		body  string
		want  string
	}{
		{"ready", true, "", `[{"name":"m","version":"1","state":"READY","reason":""}]`},
		{"ready, asked for ready ones", true, `{"ready": true}`, `[{"name":"m","version":"1","state":"READY","reason":""}]`},
		{"not ready", false, `{}`, `[{"name":"m","version":"1","state":"UNAVAILABLE","reason":"no worker is ready"}]`},
		{"not ready, asked for ready ones", false, `{"ready": true}`, `[]`},
		{"not ready, asked for all", false, `{"ready": false}`, `[{"name":"m","version":"1","state":"UNAVAILABLE","reason":"no worker is ready"}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newTriton(echoModel(spec("x", "FP32", true, -1)), &fakeBackend{ready: tc.ready})
			rec := do(t, h, http.MethodPost, "/v2/repository/index", "application/json", []byte(tc.body))
			if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != tc.want {
				t.Errorf("POST index %q = %d %s, want %s", tc.body, rec.Code, rec.Body, tc.want)
			}
		})
	}
	h := newTriton(echoModel(spec("x", "FP32", true, -1)), nil)
	if rec := do(t, h, http.MethodPost, "/v2/repository/index", "", []byte(`[1`)); rec.Code != http.StatusBadRequest ||
		!strings.Contains(errorOf(t, rec), `{"ready": true}`) {
		t.Errorf("a body that is no JSON object = %d %s, want 400 showing the form", rec.Code, rec.Body)
	}
	if rec := do(t, h, http.MethodGet, "/v2/repository/index", "", nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET index = %d, want 405", rec.Code)
	}
}

func TestV2RepositoryRefusesLoadAndUnload(t *testing.T) {
	h := newTriton(echoModel(spec("x", "FP32", true, -1)), nil)
	for _, action := range []string{"load", "unload"} {
		rec := do(t, h, http.MethodPost, "/v2/repository/models/other/"+action, "application/json", nil)
		if msg := errorOf(t, rec); rec.Code != http.StatusBadRequest || !strings.Contains(msg, "cannot "+action+` model "other"`) ||
			!strings.Contains(msg, "SIGHUP") {
			t.Errorf("POST %s = %d %q, want 400 saying the model is fixed and how to reload", action, rec.Code, msg)
		}
	}
	if rec := do(t, h, http.MethodPost, "/v2/repository/models/m/delete", "", nil); rec.Code != http.StatusNotFound {
		t.Errorf("an unknown repository action = %d, want 404", rec.Code)
	}
}

// TestV2RowsBoundedByMaxItems: a request of more rows than the server
// takes in one request is refused before its rows are encoded, naming the
// server's own limit.
func TestV2RowsBoundedByMaxItems(t *testing.T) {
	model := echoModel(spec("x", "INT8", true, -1))
	h := New(Config{Backend: &fakeBackend{ready: true}, Tensors: model, MaxItems: 3})
	body := `{"inputs":[{"name":"x","datatype":"INT8","shape":[4],"data":[1,2,3,4]}]}`
	rec := postV2(t, h, "/v2/models/m/infer", body)
	if msg := errorOf(t, rec); rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "at most 3") {
		t.Errorf("4 rows with MaxItems 3 = %d %q, want 413 naming the limit 3", rec.Code, msg)
	}
	if n := len(model.itemRows()); n != 0 {
		t.Errorf("the model encoded %d rows of a refused request", n)
	}
	body = `{"inputs":[{"name":"x","datatype":"INT8","shape":[3],"data":[1,2,3]}]}`
	if rec := postV2(t, h, "/v2/models/m/infer", body); rec.Code != http.StatusOK {
		t.Errorf("3 rows with MaxItems 3 = %d %s, want 200", rec.Code, rec.Body)
	}
}
