package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// TestV2TritonRoutesOfTheDemo: the routes Triton's clients call around
// inference, through the binary: the configuration carries the serve
// flags' batch size and queue delay and the demo's dims without the batch
// axis, the statistics count the rows served, and the repository index
// lists the model as ready.
func TestV2TritonRoutesOfTheDemo(t *testing.T) {
	s, _ := startONNX(t, onnxtest.Demo, "--batch-size", "16", "--max-latency", "3ms", "--workers", "1")
	var cfg struct {
		Name         string `json:"name"`
		Platform     string `json:"platform"`
		MaxBatchSize int    `json:"max_batch_size"`
		Input        []struct {
			Name     string  `json:"name"`
			DataType string  `json:"data_type"`
			Dims     []int64 `json:"dims"`
		} `json:"input"`
		Output []struct {
			Name     string  `json:"name"`
			DataType string  `json:"data_type"`
			Dims     []int64 `json:"dims"`
		} `json:"output"`
		DynamicBatching struct {
			MaxQueueDelayMicroseconds int64 `json:"max_queue_delay_microseconds"`
		} `json:"dynamic_batching"`
	}
	if status, msg := s.getV2(t, "/v2/models/demo/config", &cfg); status != http.StatusOK {
		t.Fatalf("GET config: %d %s", status, msg)
	}
	if cfg.Name != "demo" || cfg.Platform != "onnxruntime_onnx" || cfg.MaxBatchSize != 16 || cfg.DynamicBatching.MaxQueueDelayMicroseconds != 3000 ||
		len(cfg.Input) != 1 || cfg.Input[0].Name != "features" || cfg.Input[0].DataType != "TYPE_FP32" || !slices.Equal(cfg.Input[0].Dims, []int64{4}) ||
		len(cfg.Output) != 1 || cfg.Output[0].Name != "probs" || !slices.Equal(cfg.Output[0].Dims, []int64{3}) {
		t.Errorf("config %+v; want demo, onnxruntime_onnx, max_batch_size 16, 3000 µs, features TYPE_FP32 [4], probs [3]", cfg)
	}

	in := demoRows(rand.New(rand.NewPCG(3, 4)), 5)
	if a := s.infer(t, "/v2/models/demo/infer", v2Request{Inputs: []v2Input{in.flat()}}); a.Status != http.StatusOK {
		t.Fatalf("infer: %s", a)
	}
	var stats struct {
		ModelStats []struct {
			Name           string `json:"name"`
			LastInference  int64  `json:"last_inference"`
			InferenceCount uint64 `json:"inference_count"`
			ExecutionCount uint64 `json:"execution_count"`
			InferenceStats struct {
				Success struct {
					Count uint64 `json:"count"`
					NS    uint64 `json:"ns"`
				} `json:"success"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	if status, msg := s.getV2(t, "/v2/models/demo/stats", &stats); status != http.StatusOK || len(stats.ModelStats) != 1 {
		t.Fatalf("GET stats: %d %s %+v", status, msg, stats)
	}
	m := stats.ModelStats[0]
	if m.Name != "demo" || m.InferenceCount != 5 || m.ExecutionCount < 1 || m.ExecutionCount > 5 ||
		m.InferenceStats.Success.Count != 5 || m.InferenceStats.Success.NS == 0 || m.LastInference == 0 {
		t.Errorf("stats %+v; want 5 rows run in 1 to 5 batches, their time, and the last inference's time", m)
	}

	status, body, _, err := s.do(context.Background(), http.MethodPost, "/v2/repository/index", "application/json", []byte(`{"ready": true}`))
	if err != nil {
		t.Fatal(err)
	}
	var index []struct{ Name, Version, State string }
	if err := json.Unmarshal(body, &index); err != nil || status != http.StatusOK || len(index) != 1 ||
		index[0].Name != "demo" || index[0].Version != "1" || index[0].State != "READY" {
		t.Errorf("POST /v2/repository/index: %d %s (%v); want demo version 1 READY", status, body, err)
	}
}

// TestV2TritonStatsCountALateRowAsFailedOnly: a row that ran but whose
// deadline passed while it ran is answered 504; the statistics count it in
// fail and not in success, so that the two add up to the rows answered.
func TestV2TritonStatsCountALateRowAsFailedOnly(t *testing.T) {
	s := startServer(t, "--model", "sleep:300ms,0s", "--workers", "1")
	status, body, _, err := s.do(context.Background(), http.MethodPost, "/predict", "application/json", []byte(`{"inputs": ["late"], "timeout_ms": 100}`))
	if err != nil || status != http.StatusGatewayTimeout {
		t.Fatalf("a 100 ms deadline on a 300 ms model: %d %s (%v), want 504", status, body, err)
	}
	if p := s.predictJSON(t, "on time"); p.Status != http.StatusOK {
		t.Fatalf("a request with no deadline: %s", p)
	}
	s.waitFor(t, "both rows answered", readyTimeout, func() bool { return s.stats(t).Answered == 2 })
	var stats struct {
		ModelStats []struct {
			InferenceCount uint64 `json:"inference_count"`
			InferenceStats struct {
				Success struct {
					Count uint64 `json:"count"`
				} `json:"success"`
				Fail struct {
					Count uint64 `json:"count"`
				} `json:"fail"`
			} `json:"inference_stats"`
		} `json:"model_stats"`
	}
	if status, msg := s.getV2(t, "/v2/models/sleep/stats", &stats); status != http.StatusOK || len(stats.ModelStats) != 1 {
		t.Fatalf("GET stats: %d %s %+v", status, msg, stats)
	}
	m := stats.ModelStats[0]
	if m.InferenceCount != 1 || m.InferenceStats.Success.Count != 1 || m.InferenceStats.Fail.Count != 1 {
		t.Errorf("stats %+v; want 1 success (the inference count) and 1 fail", m)
	}
}
