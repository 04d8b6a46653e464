package onnxtest_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// TestCommittedModelsAreUpToDate fails when a model file in the repository
// differs from what the generator writes: regenerate with go run ./testdata/gen.
func TestCommittedModelsAreUpToDate(t *testing.T) {
	for _, name := range onnxtest.Names() {
		want, err := onnxtest.Build(name)
		if err != nil {
			t.Fatal(err)
		}
		again, err := onnxtest.Build(name)
		if err != nil || !bytes.Equal(want, again) {
			t.Fatalf("%s: two builds differ (%v); the generator must be deterministic", name, err)
		}
		path, err := onnxtest.Path(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date; run go run ./testdata/gen", path)
		}
	}
}

func TestReferenceReadsTheWeights(t *testing.T) {
	data, err := onnxtest.Build(onnxtest.MLP)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := onnxtest.LoadBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	probs := ref.MLP([]float32{5.1, 3.5, 1.4, 0.2})
	sum := 0.0
	for _, p := range probs {
		if p <= 0 || p >= 1 {
			t.Errorf("probability %v outside (0, 1)", p)
		}
		sum += p
	}
	if len(probs) != 3 || sum < 0.999999 || sum > 1.000001 {
		t.Errorf("probabilities %v do not sum to 1", probs)
	}
	if _, err := onnxtest.LoadBytes([]byte("not a model")); err == nil {
		t.Error("LoadBytes accepted garbage")
	}
}
