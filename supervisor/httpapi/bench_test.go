package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// benchBody is a typical small request: one sentence.
const benchBody = `{"inputs": ["The quick brown fox jumps over the [MASK] dog."]}`

// mediumItem is a small tensor as nested JSON arrays with a label.
const mediumItem = `{"label": "cat", "pixels": [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4], [-1.5, 2.25, 1e-3, 42]], "ok": true, "n": null}`

func BenchmarkPredictJSON(b *testing.B) {
	h := New(Config{Backend: &fakeBackend{}})
	body := []byte(benchBody)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/predict", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
}

func BenchmarkPredictMsgpack(b *testing.B) {
	h := New(Config{Backend: &fakeBackend{}})
	body := mustMsgpack(b, map[string]any{"inputs": []string{"The quick brown fox jumps over the [MASK] dog."}})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/predict", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/msgpack")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
		}
	}
}

// BenchmarkPredictCompressed is BenchmarkPredictJSON with the body
// compressed: what decompressing costs on top, its decompressors pooled.
func BenchmarkPredictCompressed(b *testing.B) {
	h := New(Config{Backend: &fakeBackend{}})
	for _, c := range compressions {
		body := compress(b, c.name, []byte(benchBody))
		b.Run(strings.ReplaceAll(c.name, " ", "-"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/predict", bytes.NewReader(body))
				req.Header.Set("Content-Encoding", c.header)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
				}
			}
		})
	}
}

// benchServer measures h behind a real loopback HTTP server with parallel
// keep-alive clients, the way a load test sees it.
func benchServer(b *testing.B, h http.Handler) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 256}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(srv.URL+"/predict", "application/json", strings.NewReader(benchBody))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

func BenchmarkPredictHTTP(b *testing.B) {
	benchServer(b, New(Config{Backend: &fakeBackend{}}))
}

// BenchmarkSupervisorHTTP is scenario E's server path in one process: the
// handler in front of a real supervisor whose two slots echo in goroutines,
// so that a CPU profile of it shows HTTP, the handler and the batcher
// without the worker pipes:
//
//	go test -run '^$' -bench SupervisorHTTP -cpuprofile cpu.prof ./supervisor/httpapi
func BenchmarkSupervisorHTTP(b *testing.B) {
	st, err := supervisor.New(supervisor.Config{InProcess: model.Func(echoBatch), Workers: 2, BatchSize: 64})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := st.Shutdown(ctx); err != nil {
			b.Errorf("shutdown: %v", err)
		}
	}()
	benchServer(b, New(Config{Backend: st}))
	b.StopTimer()
	b.ReportMetric(st.Stats().MeanBatchSize(), "mean-batch")
}

// BenchmarkBareHTTP is the ceiling for BenchmarkPredictHTTP: a handler that
// reads the body and answers a fixed JSON.
func BenchmarkBareHTTP(b *testing.B) {
	answer := []byte(`{"outputs":["The quick brown fox jumps over the [MASK] dog."]}`)
	benchServer(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
}

func BenchmarkGenericFromJSON(b *testing.B) {
	for _, bc := range []struct{ name, item string }{
		{"string", `"The quick brown fox jumps over the [MASK] dog."`},
		{"object", mediumItem},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw := json.RawMessage(bc.item)
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, _, err := (Generic{}).FromJSON(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGenericAppendJSON(b *testing.B) {
	for _, bc := range []struct{ name, item string }{
		{"string", `"The quick brown fox jumps over the [MASK] dog."`},
		{"object", mediumItem},
	} {
		b.Run(bc.name, func(b *testing.B) {
			out, _, err := (Generic{}).FromJSON(json.RawMessage(bc.item))
			if err != nil {
				b.Fatal(err)
			}
			var dst []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(out)))
			for b.Loop() {
				if dst, err = (Generic{}).AppendJSON(dst[:0], out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBody measures reading a /predict body alone, without the
// handler around it: the JSON and the msgpack walk over the body, and the
// Generic codec's work on its one item.
func BenchmarkDecodeBody(b *testing.B) {
	h := New(Config{Backend: &fakeBackend{}}).(*handler)
	item := "The quick brown fox jumps over the [MASK] dog."
	jsonBody := []byte(`{"inputs": ["` + item + `"], "timeout_ms": 100}`)
	msgpackBody := mustMsgpack(b, map[string]any{"inputs": []string{item}, "timeout_ms": 100})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req predictRequest
			if err := h.decodeJSON(jsonBody, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req predictRequest
			if err := h.decodeMsgpack(msgpackBody, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
