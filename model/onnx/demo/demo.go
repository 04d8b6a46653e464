// Package demo embeds streamer's demo ONNX model, so that
// `streamer serve --model demo` works on a fresh machine with nothing but
// the ONNX Runtime library. The model is a classifier of 4 float32 features
// into 3 class probabilities (see onnxtest.Demo); testdata/gen writes it.
package demo

import _ "embed"

// Name is the --model value that selects the demo model.
const Name = "demo"

//go:embed demo.onnx
var model string

// ONNX returns a copy of the demo model's bytes.
func ONNX() []byte { return []byte(model) }
