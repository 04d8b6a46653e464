package onnx_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/demo"
)

// BenchmarkDemoLimit measures the demo model run directly in-process: one
// ONNX Runtime run of a ready batch tensor, no encoding, no copying — the
// limit that serving through HTTP is compared with. Items/s is reported.
//
//	go test ./model/onnx -run '^$' -bench DemoLimit -benchtime 3s
func BenchmarkDemoLimit(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			r := openBench(b)
			features := make([]float32, 4*batch)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range features {
				features[i] = rng.Float32()*8 - 4
			}
			input, err := ort.NewTensor(ort.NewShape(int64(batch), 4), features)
			if err != nil {
				b.Fatal(err)
			}
			defer input.Destroy()
			output, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(batch), 3))
			if err != nil {
				b.Fatal(err)
			}
			defer output.Destroy()
			session := r.Session()
			b.ResetTimer()
			for b.Loop() {
				if err := session.Run([]ort.Value{input}, []ort.Value{output}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

// BenchmarkDemoPredict measures the worker's own path for a batch: decode
// and check the items, stack them, run, split and encode the outputs.
func BenchmarkDemoPredict(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			r := openBench(b)
			items := make([][]byte, batch)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range items {
				vals := make([]string, 4)
				for k := range vals {
					vals[k] = strconv.FormatFloat(rng.Float64()*8-4, 'g', 6, 32)
				}
				item, _, err := r.Codec().FromJSON([]byte("[" + strings.Join(vals, ",") + "]"))
				if err != nil {
					b.Fatal(err)
				}
				items[i] = item
			}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := r.Predict(ctx, items); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "items/s")
		})
	}
}

func openBench(b *testing.B) *onnx.Runner {
	b.Helper()
	r, err := onnx.Open(context.Background(), onnx.Settings{Path: demo.Name, IntraOpThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return r
}
