// Package model defines what a model is to streamer: something initialised
// once in its worker process that predicts whole batches of opaque items, and
// then is closed; and the Spec that names which model a worker opens.
//
// The runners live in subpackages, each with its own settings type:
// model/builtin (echo, sleep, chaos), model/onnx (ONNX files) and
// model/plugin (plugin binaries). The package model/load turns a Spec into a
// running Model with whichever of them it names.
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// Model runs batches. A worker process owns one Model and calls Predict from
// one goroutine at a time. A Model run in the supervisor's own process
// (supervisor.Config.InProcess) is shared by its slots instead: there
// Predict is called from several goroutines at once, and must be safe for
// concurrent use.
type Model interface {
	// Predict runs one batch. On success it returns exactly one output per
	// item, outputs[i] answering items[i]. Items are msgpack-encoded values
	// and are only valid during the call; Predict must not write to them
	// (in the supervisor's own process they are the callers' bytes). To
	// fail some items while answering the others, return the outputs
	// together with an *ItemErrors; any other error fails the whole batch.
	Predict(ctx context.Context, items [][]byte) ([][]byte, error)
	// Close releases what the model holds. It is called once, last.
	Close() error
}

// Nil reports whether m is no model at all: a nil interface, a nil Func,
// or a nil pointer, whose first Predict would panic.
func Nil(m Model) bool {
	if m == nil {
		return true
	}
	if f, ok := m.(Func); ok {
		return f == nil
	}
	v := reflect.ValueOf(m)
	return v.Kind() == reflect.Pointer && v.IsNil()
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
// a file a runner knows, and for a Spec whose Runner no opener knows.
var ErrUnknownModel = errors.New("unknown model")

// ErrStale is what an opener's error also is when it refuses a Spec because
// the model the Spec names changed since the Spec was made: a file replaced
// on disk without a reload. Opening the same Spec again fails alike until
// the model is reloaded or put back, so the worker tells the supervisor, which
// keeps retrying instead of counting it as a crash. See Stale.
var ErrStale = errors.New("the model changed since its spec was made")

// Stale marks err as ErrStale, keeping its text and what it wraps.
func Stale(err error) error { return staleError{err} }

// staleError is an error that is ErrStale without saying so in its text,
// which already says what changed.
type staleError struct{ err error }

func (e staleError) Error() string        { return e.err.Error() }
func (e staleError) Unwrap() error        { return e.err }
func (e staleError) Is(target error) bool { return target == ErrStale }

// ErrBadSettings is returned when a Spec's settings are not what its runner
// reads: malformed, or with a field the runner does not know.
var ErrBadSettings = errors.New("bad model settings")

// Spec names the model a worker opens: the runner that opens it and that
// runner's own settings. The supervisor carries it to every worker process
// without reading it; only the worker's opener decodes the settings, into
// the runner's own settings type (builtin.Sleep, onnx.Settings,
// plugin.Settings, or an embedder's own).
type Spec struct {
	// Runner names what opens the model: "echo", "sleep" and "chaos" (the
	// built-ins), "onnx", "plugin", or a name an embedder's opener knows.
	Runner string `json:"runner"`
	// Settings are the runner's settings, JSON-encoded; empty for a runner
	// that takes none.
	Settings json.RawMessage `json:"settings,omitempty"`
}

// NewSpec encodes settings (nil for none) as the Spec of runner.
func NewSpec(runner string, settings any) (Spec, error) {
	if runner == "" {
		return Spec{}, errors.New("model spec: the runner must be named")
	}
	spec := Spec{Runner: runner}
	if settings == nil {
		return spec, nil
	}
	b, err := json.Marshal(settings)
	if err != nil {
		return Spec{}, fmt.Errorf("model spec %s: encode settings: %w", runner, err)
	}
	spec.Settings = b
	return spec, nil
}

// Decode reads the spec's settings into v, refusing a field v does not
// have: a misspelt setting fails the worker rather than being ignored.
// Empty settings leave v as it is.
func (s Spec) Decode(v any) error {
	if len(s.Settings) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w for %s: %v", ErrBadSettings, s.Runner, err)
	}
	if dec.More() {
		return fmt.Errorf("%w for %s: more than one value", ErrBadSettings, s.Runner)
	}
	return nil
}

// String names the model for logs: the runner, then its settings as
// PublicSettings shows them.
func (s Spec) String() string {
	public := s.PublicSettings()
	if len(public) == 0 || string(public) == "{}" || string(public) == "null" {
		return s.Runner
	}
	return s.Runner + " " + string(public)
}

// PublicSettings are the settings as logs and the API show them: the
// values of a top-level "args" object (a runner's free-form arguments,
// such as a plugin's --plugin-arg, which may hold a key or a password)
// read "…", their keys kept. Settings that are not a JSON object are shown
// as they are.
func (s Spec) PublicSettings() json.RawMessage {
	if !bytes.Contains(s.Settings, []byte(`"args"`)) {
		return s.Settings
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(s.Settings, &fields) != nil {
		return s.Settings
	}
	var args map[string]json.RawMessage
	if json.Unmarshal(fields["args"], &args) != nil || args == nil {
		return s.Settings
	}
	for k := range args {
		args[k] = json.RawMessage(`"…"`)
	}
	fields["args"], _ = json.Marshal(args)
	public, err := json.Marshal(fields)
	if err != nil {
		return s.Settings
	}
	return public
}
