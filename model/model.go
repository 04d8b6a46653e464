// Package model defines what a model is to streamer: something initialised
// once in its worker process that predicts whole batches of opaque items, and
// then is closed. It also holds the built-in models (echo, sleep, chaos) and
// the Spec that names which model a worker should open.
//
// Runners for ONNX files and plugin binaries live in subpackages; the package
// model/load turns a Spec into a running Model.
package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Model runs batches. A worker process owns one Model and calls Predict from
// one goroutine at a time.
type Model interface {
	// Predict runs one batch. On success it returns exactly one output per
	// item, outputs[i] answering items[i]. Items are msgpack-encoded values and
	// are only valid during the call. To fail some items while answering the
	// others, return the outputs together with an *ItemErrors; any other error
	// fails the whole batch.
	Predict(ctx context.Context, items [][]byte) ([][]byte, error)
	// Close releases what the model holds. It is called once, last.
	Close() error
}

// Describer is implemented by models that can say what they are.
type Describer interface {
	// Describe returns a one-line description: the model's name and the device
	// it runs on, for logs and the ready message.
	Describe() string
}

// ItemErrors fails some items of a batch. Errs has one entry per item: nil
// where the item succeeded.
type ItemErrors struct {
	Errs []error
}

func (e *ItemErrors) Error() string {
	var parts []string
	for i, err := range e.Errs {
		if err != nil {
			parts = append(parts, fmt.Sprintf("item %d: %v", i, err))
		}
	}
	return strings.Join(parts, "; ")
}

// ErrUnknownModel is returned for a model name that is neither built in nor
// a file a runner knows.
var ErrUnknownModel = errors.New("unknown model")

// Spec names the model a worker opens and carries its settings. The zero
// value is the echo model.
type Spec struct {
	// Name is the --model value: a built-in ("echo", "sleep:10ms,100us",
	// "chaos:crash=boom") or a path to an .onnx file. Ignored when Plugin is set.
	Name string `json:"name,omitempty"`
	// Plugin is the path of a plugin binary (hashicorp/go-plugin, gRPC).
	Plugin string `json:"plugin,omitempty"`
	// PluginArgs are passed to the plugin's Init as key=value settings.
	PluginArgs map[string]string `json:"plugin_args,omitempty"`
	// PluginSHA256 is the expected hex SHA-256 of the plugin binary; empty
	// skips the check.
	PluginSHA256 string `json:"plugin_sha256,omitempty"`
	// PluginSocketDir is the private directory the plugin's socket is made
	// in (see plugin.Config.SocketDir); empty means the system's temporary
	// directory. It says where, not what: it does not change the model.
	PluginSocketDir string `json:"plugin_socket_dir,omitempty"`
	// Device is "cpu" (default) or "cuda". With "cuda" the model runs on
	// device 0 of the worker's CUDA_VISIBLE_DEVICES.
	Device string `json:"device,omitempty"`
	// IntraOpThreads bounds the threads a runner uses inside one batch; 0
	// leaves the runner's default.
	IntraOpThreads int `json:"intra_op_threads,omitempty"`
	// ORTLib is the path of the ONNX Runtime shared library; empty searches
	// the usual places.
	ORTLib string `json:"ort_lib,omitempty"`
	// Pad maps an ONNX input name to the value its dynamic non-batch axes are
	// padded with, so items of different lengths can share a batch.
	Pad map[string]float64 `json:"pad,omitempty"`
}

// String names the model for logs.
func (s Spec) String() string {
	if s.Plugin != "" {
		return "plugin " + s.Plugin
	}
	if s.Name == "" {
		return "echo"
	}
	return s.Name
}
