// Package load opens the model a Spec names, whichever runner serves it:
// a built-in, an ONNX file or a plugin binary.
package load

import (
	"context"
	"fmt"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/plugin"
)

// Open initialises the model spec names. It runs inside the worker process,
// after the worker has started, so its cost (loading weights, starting a
// plugin) is paid once per worker.
func Open(ctx context.Context, spec model.Spec) (model.Model, error) {
	switch {
	case spec.Runner == plugin.Runner:
		return plugin.OpenSpec(ctx, spec)
	case spec.Runner == onnx.SpecRunner:
		return onnx.OpenSpec(ctx, spec)
	case builtin.Handles(spec.Runner):
		return builtin.Open(spec)
	}
	return nil, unknown(spec)
}

// Check validates spec in the supervisor process before any worker starts,
// so that a typo fails at once with a clear message instead of in every
// worker. It opens nothing heavy and runs no model code.
func Check(spec model.Spec) error {
	switch {
	case spec.Runner == plugin.Runner:
		return plugin.CheckSpec(spec)
	case spec.Runner == onnx.SpecRunner:
		settings, err := onnx.SettingsOf(spec)
		if err != nil {
			return err
		}
		return onnx.Check(settings)
	case builtin.Handles(spec.Runner):
		return builtin.Check(spec)
	}
	return unknown(spec)
}

// Refresh returns the spec that workers started by a reload open: for an
// ONNX file or a plugin binary, spec with the file's SHA-256 read again, so
// that the new workers take the file as it is now while a worker restarted
// from the old spec refuses it (see onnx.ErrModelChanged and
// plugin.ErrPluginChanged); for the built-ins, spec as it is. It runs in
// the supervisor process, once per reload.
func Refresh(ctx context.Context, spec model.Spec) (model.Spec, error) {
	if err := ctx.Err(); err != nil {
		return model.Spec{}, err
	}
	switch spec.Runner {
	case onnx.SpecRunner:
		return onnx.Refresh(spec)
	case plugin.Runner:
		return plugin.Refresh(spec)
	}
	return spec, nil
}

// Parse reads a model name as streamer serve's model flag takes it: a
// built-in with its arguments ("echo", "sleep:10ms,100us", "chaos:OPTS") or
// an ONNX file (or "demo"), whose other settings onnx carries. A plugin is
// named by its own settings, not by a name.
func Parse(name string, onnxSettings onnx.Settings) (model.Spec, error) {
	if spec, ok, err := builtin.Parse(name); ok {
		return spec, err
	}
	if onnx.Handles(name) {
		onnxSettings.Path = name
		return onnxSettings.Spec()
	}
	return model.Spec{}, fmt.Errorf("%w %q: want echo, sleep:FIXED,PER_ITEM, chaos:OPTS, demo or an .onnx file", model.ErrUnknownModel, name)
}

func unknown(spec model.Spec) error {
	return fmt.Errorf("%w: no runner %q (want echo, sleep, chaos, onnx or plugin)", model.ErrUnknownModel, spec.Runner)
}
