//go:build !cgo

package onnx

import (
	"context"
	"fmt"
)

// errNoCgo is why a binary built without cgo serves no ONNX model: ONNX
// Runtime is loaded through cgo. Reading a model's signature (Codec) works
// without it.
var errNoCgo = fmt.Errorf("%w: this binary was built without cgo, and ONNX Runtime is loaded through cgo; build it with cgo to serve ONNX models (CGO_ENABLED=1 and a C compiler, such as Debian's gcc)", ErrBadLibrary)

// Runner stands in for the ONNX runner in a binary built without cgo:
// Open never returns one.
type Runner struct{}

// Open fails: this binary has no cgo.
func Open(context.Context, Settings) (*Runner, error) { return nil, errNoCgo }

// Predict fails: this binary has no cgo.
func (*Runner) Predict(context.Context, [][]byte) ([][]byte, error) { return nil, errNoCgo }

// Close does nothing.
func (*Runner) Close() error { return nil }

// Describe names the runner.
func (*Runner) Describe() string { return "onnx (unavailable without cgo)" }

func probeLibrary(string) (lib, version string, err error) { return "", "", errNoCgo }
