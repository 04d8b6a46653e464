package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// This file serves the routes that Triton adds to the v2 protocol and that
// its clients call before or around inference: the model configuration
// (perf_analyzer and Triton's example clients read max_batch_size and the
// inputs' dims from it), the statistics (perf_analyzer reads them as it
// measures) and the repository index. They describe the one model this
// server serves, in Triton's JSON; loading and unloading models through
// the repository routes is refused, since the model is chosen at start.

// tritonConfig is the GET /v2/models/{model}/config answer: the parts of
// Triton's model configuration that describe a model served here.
type tritonConfig struct {
	Name     string `json:"name"`
	Platform string `json:"platform"`
	// MaxBatchSize is the batch size when every input is batched (the dims
	// then leave the batch axis out), else 0 (the dims are whole, the
	// batch axis -1), as Triton says of a model that batches itself.
	MaxBatchSize    int                  `json:"max_batch_size"`
	Input           []tritonTensor       `json:"input"`
	Output          []tritonTensor       `json:"output"`
	DynamicBatching *tritonBatching      `json:"dynamic_batching,omitempty"`
	VersionPolicy   tritonVersionPolicy  `json:"version_policy"`
	Parameters      map[string]tritonArg `json:"parameters"`
}

type tritonTensor struct {
	Name     string  `json:"name"`
	DataType string  `json:"data_type"`
	Dims     []int64 `json:"dims"`
}

type tritonBatching struct {
	MaxQueueDelayMicroseconds int64 `json:"max_queue_delay_microseconds"`
}

type tritonVersionPolicy struct {
	Latest struct {
		NumVersions int `json:"num_versions"`
	} `json:"latest"`
}

type tritonArg struct {
	StringValue string `json:"string_value"`
}

// modelConfig is meta in Triton's model configuration.
func (h *handler) modelConfig(meta ModelMetadata) tritonConfig {
	cfg := tritonConfig{Name: meta.Name, Platform: meta.Platform, Parameters: map[string]tritonArg{}}
	cfg.VersionPolicy.Latest.NumVersions = 1
	batched := h.maxBatchSize > 0 && len(meta.Inputs) > 0
	for _, in := range meta.Inputs {
		batched = batched && in.Batched && len(in.Shape) > 0
	}
	if batched {
		cfg.MaxBatchSize = h.maxBatchSize
	}
	if h.maxBatchSize > 0 {
		cfg.DynamicBatching = &tritonBatching{MaxQueueDelayMicroseconds: h.maxQueueDelay.Microseconds()}
	}
	cfg.Input = tritonTensors(meta.Inputs, batched)
	cfg.Output = tritonTensors(meta.Outputs, batched)
	return cfg
}

// tritonTensors describes specs as Triton's configuration does: dims
// without the batch axis when the model batches.
func tritonTensors(specs []TensorSpec, batched bool) []tritonTensor {
	out := make([]tritonTensor, len(specs))
	for i, s := range specs {
		dims := s.Shape
		if batched && len(dims) > 0 {
			dims = dims[1:]
		}
		out[i] = tritonTensor{Name: s.Name, DataType: tritonType(s.Datatype), Dims: append([]int64{}, dims...)}
	}
	return out
}

// tritonType is a v2 datatype as Triton's configuration names it.
func tritonType(datatype string) string {
	if datatype == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + datatype
}

// tritonStats is the GET /v2/models[/{model}]/stats answer.
type tritonStats struct {
	ModelStats []tritonModelStats `json:"model_stats"`
}

type tritonModelStats struct {
	Name           string `json:"name"`
	Version        string `json:"version"`
	LastInference  int64  `json:"last_inference"`
	InferenceCount uint64 `json:"inference_count"`
	ExecutionCount uint64 `json:"execution_count"`
	InferenceStats struct {
		Success       tritonDuration `json:"success"`
		Fail          tritonDuration `json:"fail"`
		Queue         tritonDuration `json:"queue"`
		ComputeInput  tritonDuration `json:"compute_input"`
		ComputeInfer  tritonDuration `json:"compute_infer"`
		ComputeOutput tritonDuration `json:"compute_output"`
		CacheHit      tritonDuration `json:"cache_hit"`
		CacheMiss     tritonDuration `json:"cache_miss"`
	} `json:"inference_stats"`
	BatchStats  []tritonBatchStats `json:"batch_stats"`
	MemoryUsage []struct{}         `json:"memory_usage"`
}

type tritonDuration struct {
	Count uint64 `json:"count"`
	NS    uint64 `json:"ns"`
}

type tritonBatchStats struct {
	BatchSize     int            `json:"batch_size"`
	ComputeInput  tritonDuration `json:"compute_input"`
	ComputeInfer  tritonDuration `json:"compute_infer"`
	ComputeOutput tritonDuration `json:"compute_output"`
}

// modelStats is the backend's counters in Triton's statistics. They count
// items (rows), not requests. success is the items answered with an
// output and fail those answered with an error, so that the two add up to
// the items answered, as in Triton; inference_count is success's count.
// The times come from the latency histograms, which count every item its
// worker ran, however it was answered: success's time (from submission
// to answer) and its parts, queue and compute_infer (the whole batch's run
// on its worker: encoding, inference and decoding), include the items that
// ran and were then answered with an error (the model failed them, or
// their deadline passed while they ran), and count those items too, as the
// histograms do not tell them apart. compute_input and compute_output
// count the items compute_infer does, in no time. fail's time is
// unmeasured; batch_stats count the batches of each size, their time
// unmeasured too.
func (h *handler) modelStats(meta ModelMetadata) tritonStats {
	s := h.backend.Stats()
	m := tritonModelStats{Name: meta.Name, Version: firstVersion(meta), LastInference: h.requests.lastOK.Load()}
	lat := s.Latency
	// Answered counts Failed, in one snapshot; a Backend that counts
	// otherwise gets no successes rather than a wrapped-around count.
	var ok uint64
	if s.Answered > s.Failed {
		ok = s.Answered - s.Failed
	}
	m.InferenceCount = ok
	m.ExecutionCount = s.Batches
	is := &m.InferenceStats
	is.Success = tritonDuration{Count: ok, NS: seconds(lat.EndToEnd.SumSeconds)}
	is.Fail = tritonDuration{Count: s.Failed}
	is.Queue = tritonDuration{Count: lat.QueueWait.Count(), NS: seconds(lat.QueueWait.SumSeconds)}
	is.ComputeInfer = tritonDuration{Count: lat.Compute.Count(), NS: seconds(lat.Compute.SumSeconds)}
	is.ComputeInput = tritonDuration{Count: lat.Compute.Count()}
	is.ComputeOutput = tritonDuration{Count: lat.Compute.Count()}
	m.BatchStats = []tritonBatchStats{}
	for size, n := range s.BatchSizes {
		if n == 0 || size == 0 {
			continue
		}
		counted := tritonDuration{Count: n}
		m.BatchStats = append(m.BatchStats, tritonBatchStats{BatchSize: size, ComputeInput: counted, ComputeInfer: counted, ComputeOutput: counted})
	}
	m.MemoryUsage = []struct{}{}
	return tritonStats{ModelStats: []tritonModelStats{m}}
}

// seconds is a sum of seconds in whole nanoseconds.
func seconds(s float64) uint64 {
	if s <= 0 {
		return 0
	}
	return uint64(s*1e9 + 0.5)
}

// firstVersion is the model's version as the routes name it: its first,
// or "1" when it lists none.
func firstVersion(meta ModelMetadata) string {
	if len(meta.Versions) > 0 {
		return meta.Versions[0]
	}
	return "1"
}

// repositoryEntry is one model of the POST /v2/repository/index answer.
type repositoryEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

// repositoryIndex serves POST /v2/repository/index: the served model,
// READY or UNAVAILABLE with the reason, or nothing for {"ready": true}
// while it is not ready.
func (h *handler) repositoryIndex(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.methodNotAllowed(w, http.MethodPost)
		return
	}
	var req struct {
		Ready *bool `json:"ready"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<16))
	if err != nil {
		h.writeError(w, http.StatusBadRequest, "read the request: "+err.Error())
		return
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			h.writeError(w, http.StatusBadRequest, `the body must be a JSON object such as {"ready": true}, or empty: `+err.Error())
			return
		}
	}
	index := []repositoryEntry{}
	if h.tensors != nil {
		meta := h.tensors.Metadata()
		entry := repositoryEntry{Name: meta.Name, Version: firstVersion(meta), State: "READY"}
		if !h.backend.Ready() {
			entry.State, entry.Reason = "UNAVAILABLE", h.notReadyReason(anonymous(r))
		}
		if req.Ready == nil || !*req.Ready || entry.State == "READY" {
			index = append(index, entry)
		}
	}
	h.writeJSON(w, http.StatusOK, index)
}

// repositoryControl refuses POST /v2/repository/models/{model}/load and
// unload: this server serves the model it was started with.
func (h *handler) repositoryControl(w http.ResponseWriter, r *http.Request, rest string) {
	model, action, _ := strings.Cut(rest, "/")
	if r.Method != http.MethodPost {
		h.methodNotAllowed(w, http.MethodPost)
		return
	}
	if action != "load" && action != "unload" {
		h.writeError(w, http.StatusNotFound, "no route "+strconv.Quote(r.URL.Path)+
			"; the repository routes are POST /v2/repository/index, /v2/repository/models/{model}/load and /unload")
		return
	}
	h.writeError(w, http.StatusBadRequest, "cannot "+action+" model "+strconv.Quote(model)+": this server does not "+
		action+" models, it serves the model it was started with ("+strconv.Quote(h.servedName())+"); to replace its workers with the model's "+
		"files as they are now, send the server SIGHUP, or POST /admin/reload on a server started with --admin")
}

// servedName is the v2 model's name, or "" when none is served.
func (h *handler) servedName() string {
	if h.tensors == nil {
		return ""
	}
	return h.tensors.Metadata().Name
}
