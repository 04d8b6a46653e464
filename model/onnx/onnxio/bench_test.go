package onnxio_test

import (
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// BenchmarkCodec measures the edge's cost per item: check and encode a JSON
// item, and render a model output as JSON.
func BenchmarkCodec(b *testing.B) {
	c := codec(b, onnxtest.Demo, nil)
	item := []byte(`[5.1, 3.5, 1.4, 0.2]`)
	out, err := onnxio.EncodeOutput(c.Signature(), []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{3}, Data: f32bytes(0.04, 0.62, 0.33)}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("FromJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := c.FromJSON(item); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 128)
		for b.Loop() {
			if _, err := c.AppendJSON(buf[:0], out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
