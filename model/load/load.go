// Package load opens the model a Spec names, whichever runner serves it:
// a built-in, an ONNX file or a plugin binary.
package load

import (
	"context"
	"fmt"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/plugin"
)

// Open initialises the model spec names. It runs inside the worker process,
// after the worker has started, so its cost (loading weights, starting a
// plugin) is paid once per worker.
func Open(ctx context.Context, spec model.Spec) (model.Model, error) {
	if spec.Plugin != "" {
		return plugin.OpenSpec(ctx, spec)
	}
	m, ok, err := model.OpenBuiltin(spec.Name)
	if ok {
		return m, err
	}
	if onnx.Handles(spec.Name) {
		r, err := onnx.Open(ctx, spec)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, unknown(spec)
}

// Check validates spec in the supervisor process before any worker starts,
// so that a typo fails at once with a clear message instead of in every
// worker. It opens nothing heavy and runs no model code.
func Check(spec model.Spec) error {
	if spec.Plugin != "" {
		return plugin.CheckSpec(spec)
	}
	if _, ok, err := model.ParseBuiltin(spec.Name); ok {
		return err
	}
	if onnx.Handles(spec.Name) {
		return onnx.Check(spec)
	}
	return unknown(spec)
}

func unknown(spec model.Spec) error {
	return fmt.Errorf("%w %q: want echo, sleep:FIXED,PER_ITEM, chaos:OPTS, a .onnx file, or --plugin PATH", model.ErrUnknownModel, spec.Name)
}
