// Package onnx serves ONNX model files with ONNX Runtime, through
// github.com/yalue/onnxruntime_go, which loads the runtime's shared library
// when a model is opened (see FindLibrary for where it looks).
//
// A Runner stacks the items of a batch along the model's batch axis, one run
// per batch key (items of different shapes never share a run), runs the
// model on the CPU or on CUDA device 0 of the worker's CUDA_VISIBLE_DEVICES,
// and splits the outputs back into one answer per item. The edge side, which
// checks items before they are queued, is in onnxio.
package onnx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/streamer-dev/streamer/internal/filekind"
	"github.com/streamer-dev/streamer/internal/filestamp"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx/demo"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// SpecRunner is the runner name of an ONNX model in a model.Spec.
const SpecRunner = "onnx"

// Settings say which ONNX model a worker opens and how it runs it.
type Settings struct {
	// Path is the model file, or demo.Name for the embedded demo model.
	Path string `json:"path"`
	// Device is "cpu" (default) or "cuda": CUDA device 0 of the worker's
	// CUDA_VISIBLE_DEVICES.
	Device string `json:"device,omitempty"`
	// IntraOpThreads bounds the threads ONNX Runtime uses inside one batch;
	// 0 leaves the runtime's default.
	IntraOpThreads int `json:"intra_op_threads,omitempty"`
	// Library is the ONNX Runtime shared library; empty searches the usual
	// places (see FindLibrary).
	Library string `json:"library,omitempty"`
	// Pad maps an input name to the value its dynamic non-batch axes are
	// padded with, so items of different lengths can share a batch.
	Pad Pads `json:"pad,omitempty"`
	// Signature is the model's inputs and outputs (onnxio's
	// Signature.Interface) as the server read them; Spec fills it in. A
	// worker refuses to open a file whose inputs or outputs are no longer
	// these: the server checks requests and describes the model by what it
	// read at start, and would serve a changed model wrongly. Empty: no
	// check.
	Signature string `json:"signature,omitempty"`
	// SHA256 is the model file's SHA-256 in hex as the server read it;
	// Spec fills it in, and Refresh at each reload. A worker refuses to
	// open a file whose content is no longer this: a worker restarted
	// after a crash must serve the weights the other workers serve, not a
	// file replaced on disk without a reload. Empty (and for the embedded
	// demo): no check.
	SHA256 string `json:"sha256,omitempty"`
}

// Pads maps input names to padding values. In JSON a finite value is a
// number, and an infinity or NaN, which JSON numbers cannot spell (and which
// are fair padding: -Inf before a max), the string "-Inf", "+Inf" or "NaN".
type Pads map[string]float64

// MarshalJSON writes the values as numbers, or as strings where JSON has no
// number for them.
func (p Pads) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(p))
	for name, v := range p {
		switch {
		case math.IsNaN(v):
			m[name] = "NaN"
		case math.IsInf(v, 0):
			m[name] = strconv.FormatFloat(v, 'g', -1, 64) // "+Inf" or "-Inf"
		default:
			m[name] = v
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *Pads) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	*p = make(Pads, len(m))
	for name, raw := range m {
		var v float64
		if err := json.Unmarshal(raw, &v); err == nil {
			(*p)[name] = v
			continue
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("pad %s: %s is neither a number nor a string", name, raw)
		}
		switch text {
		case "NaN", "+Inf", "-Inf":
			v, _ = strconv.ParseFloat(text, 64)
			(*p)[name] = v
		default:
			return fmt.Errorf("pad %s: %q is not a number; the strings are NaN, +Inf and -Inf", name, text)
		}
	}
	return nil
}

// Spec is the Spec that opens this model in a worker. It reads the model's
// inputs and outputs as they are now into Signature (unless it is set),
// and the file's SHA-256 into SHA256 (unless it is set), so that a worker
// started later, by a reload or after a crash, refuses a file that changed
// them; a file it cannot read is left to Check to report.
func (s Settings) Spec() (model.Spec, error) {
	if s.Path == "" {
		return model.Spec{}, errors.New("onnx: the model's path is required")
	}
	if s.Signature == "" || s.SHA256 == "" {
		if src, sig, err := signatureOf(s.Path); err == nil {
			if s.Signature == "" {
				s.Signature = sig.Interface()
			}
			if s.SHA256 == "" {
				s.SHA256 = src.sha256()
			}
		}
	}
	return model.NewSpec(SpecRunner, s)
}

// Refresh returns spec with the model file's SHA-256 read again: the spec
// of the workers a reload starts, which take the file as it is now. The
// inputs and outputs recorded at start stay: a file that changed them is
// still refused (see ErrSignatureChanged). It reads the file once, in the
// supervisor, so that each worker only compares.
func Refresh(spec model.Spec) (model.Spec, error) {
	settings, err := SettingsOf(spec)
	if err != nil {
		return model.Spec{}, err
	}
	src, _, err := readModel(settings.Path)
	if err != nil && src.sum == "" {
		return model.Spec{}, err // the file could not be read
	}
	// A file read but not served (not a model, its weights' file missing)
	// is the workers' to refuse, which they do at the reload's first slot,
	// saying why, as for any model that does not open.
	settings.SHA256 = src.sha256()
	return model.NewSpec(SpecRunner, settings)
}

// ErrSignatureChanged is returned by Open and Codec when the model file's
// inputs or outputs are no longer those Settings.Signature records.
var ErrSignatureChanged = errors.New("the model's inputs or outputs changed since the server started")

// ErrModelChanged is returned by Open and Codec when the model file's
// content is no longer that whose SHA-256 Settings.SHA256 records: the file
// was replaced on disk since the server loaded it, without a reload. The
// error that wraps it is model.ErrStale too.
var ErrModelChanged = errors.New("the model file changed since it was loaded")

// checkModel refuses a model whose inputs or outputs differ from those the
// settings record, or whose file's content does. The inputs and outputs
// come first: a reload cannot serve those, and their error says so. Both
// are model.ErrStale when the content changed (see staleIfChanged).
func checkModel(spec Settings, src source, sig *onnxio.Signature) error {
	if spec.Signature != "" && sig.Interface() != spec.Signature {
		return staleIfChanged(spec, src, fmt.Errorf("model %s: %w: it now has %s; the server serves %s; restart the server to serve a model with other inputs or outputs", spec.Path, ErrSignatureChanged, sig.Interface(), spec.Signature))
	}
	if got := src.sha256(); spec.SHA256 != "" && got != spec.SHA256 {
		return model.Stale(fmt.Errorf("model %s: %w (sha256 %s, now %s): reload to serve the new one", spec.Path, ErrModelChanged, spec.SHA256, got))
	}
	return nil
}

// staleIfChanged marks err, a refusal of the model the settings name, as
// model.ErrStale when the file read (src) is not the one the settings
// were made of: a file replaced since the server loaded it, by one of other
// inputs or outputs, or one still being written that does not parse yet.
// A worker that restarts after a crash then backs off and tries again, as
// for new weights, rather than count the refusal as a crash of its own:
// the crashes that give a slot up, and end a server whose slots are all
// given up, in the middle of an ordinary deploy.
func staleIfChanged(spec Settings, src source, err error) error {
	if spec.SHA256 == "" || src.sum == "" || src.partial || src.sum == spec.SHA256 {
		return err
	}
	return model.Stale(fmt.Errorf("%w (the file changed since it was loaded: sha256 %s, now %s)", err, spec.SHA256, src.sum))
}

// SettingsOf reads an ONNX model's settings from spec.
func SettingsOf(spec model.Spec) (Settings, error) {
	var s Settings
	if spec.Runner != SpecRunner {
		return s, fmt.Errorf("%w: runner %q is not %q", model.ErrUnknownModel, spec.Runner, SpecRunner)
	}
	if err := spec.Decode(&s); err != nil {
		return s, err
	}
	if s.Path == "" {
		return s, fmt.Errorf("%w for onnx: no path", model.ErrBadSettings)
	}
	return s, nil
}

// Handles reports whether the model name is one for this runner: the
// embedded demo, a name ending in .onnx, or any existing file (which Check
// then refuses clearly when it is not an ONNX model).
func Handles(name string) bool {
	if name == demo.Name || strings.HasSuffix(strings.ToLower(name), ".onnx") {
		return true
	}
	info, err := os.Stat(name)
	return err == nil && info.Mode().IsRegular()
}

// source is where a model's bytes come from: the embedded demo, or a file.
type source struct {
	name string
	path string // empty for the demo
	data []byte
	// sum is the hex SHA-256 of the file, and of the files of its
	// external weights with it when it has some; "" for the demo.
	sum string
	// partial is set when sum is the file's alone, a file of its external
	// weights having failed to be read: it is not what a spec records.
	partial bool
	// external are the paths of the files of its external weights.
	external []string
	// stamp is the file's and its external weights' (see stampOf), as
	// they were before they were read; "" where there is none to go by.
	stamp string
}

func readSource(name string) (source, error) {
	if name == demo.Name {
		return source{name: name, data: demo.ONNX()}, nil
	}
	info, err := os.Stat(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return source{}, fmt.Errorf("model %s: no such file", name)
	case err != nil:
		return source{}, fmt.Errorf("model %s: %w", name, err)
	case info.IsDir():
		return source{}, fmt.Errorf("model %s: is a folder, not an .onnx file", name)
	case !info.Mode().IsRegular():
		// A named pipe would hold the read for ever, a device such
		// as /dev/zero fill the memory.
		return source{}, fmt.Errorf("model %s: is %s, not an .onnx file", name, filekind.Of(info.Mode()))
	}
	stamp, ok := filestamp.Of(info)
	if !ok {
		stamp = ""
	}
	data, err := os.ReadFile(name)
	if err != nil {
		return source{}, fmt.Errorf("model %s: %w", name, err)
	}
	sum := sha256.Sum256(data)
	return source{name: name, path: name, data: data, sum: hex.EncodeToString(sum[:]), stamp: stamp}, nil
}

// sha256 is the hex SHA-256 of a file's content, with its external
// weights', or "" for the embedded demo, which cannot change under a
// running server.
func (src source) sha256() string { return src.sum }

// readModel reads the model name names, its signature, and the files of
// its external weights, whose content counts in the model's SHA-256 as the
// model file's does: ONNX Runtime reads them as it loads the model, and new
// weights there are new weights.
func readModel(name string) (source, *onnxio.Signature, error) {
	src, err := readSource(name)
	if err != nil {
		return src, nil, err
	}
	sig, err := onnxio.Parse(src.data)
	if err != nil {
		return src, nil, fmt.Errorf("model %s: %w", name, err)
	}
	if len(sig.ExternalData) == 0 || src.path == "" {
		return src, sig, nil
	}
	h := sha256.New()
	_, _ = io.WriteString(h, src.sum)
	for _, location := range sig.ExternalData {
		path := filepath.Join(filepath.Dir(src.path), filepath.FromSlash(location))
		sum, stamp, err := hashFile(path)
		if err != nil {
			src.partial = true
			return src, nil, fmt.Errorf("model %s: the file of its external weights %q: %w", name, location, err)
		}
		fmt.Fprintf(h, "\n%s %s", location, sum)
		src.external = append(src.external, path)
		if stamp == "" {
			src.stamp = ""
		} else if src.stamp != "" {
			src.stamp += "|" + stamp
		}
	}
	src.sum = hex.EncodeToString(h.Sum(nil))
	return src, sig, nil
}

// hashFile returns the hex SHA-256 of the regular file at path, read a
// piece at a time, and its stamp from before the read ("" for none).
func hashFile(path string) (sum, stamp string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", "", err
	}
	if !info.Mode().IsRegular() {
		return "", "", fmt.Errorf("is %s, not a file", filekind.Of(info.Mode()))
	}
	if s, ok := filestamp.Of(info); ok {
		stamp = s
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", err
	}
	return hex.EncodeToString(h.Sum(nil)), stamp, nil
}

// stampOf is the stamp of the model file at path and of the files of its
// external weights, as they are now; false where there is none to go by.
func stampOf(path string, external []string) (string, bool) {
	stamp := ""
	for i, p := range append([]string{path}, external...) {
		info, err := os.Stat(p)
		if err != nil {
			return "", false
		}
		s, ok := filestamp.Of(info)
		if !ok {
			return "", false
		}
		if i > 0 {
			stamp += "|"
		}
		stamp += s
	}
	return stamp, true
}

// Codec reads the model the settings name and returns the codec that checks its
// items at the edge, with the description GET /v1/models serves. It reads
// the model file only; it does not need the ONNX Runtime library.
func Codec(spec Settings) (*onnxio.Codec, *Description, error) {
	src, sig, err := signatureOf(spec.Path)
	if err != nil {
		return nil, nil, staleIfChanged(spec, src, err)
	}
	if err := checkModel(spec, src, sig); err != nil {
		return nil, nil, err
	}
	codec, err := onnxio.NewCodec(sig, spec.Pad)
	if err != nil {
		return nil, nil, err
	}
	d := describe(src.name, spec, codec)
	d.SHA256 = src.sha256()
	return codec, d, nil
}

// signatureOf reads the model name names and its signature. A file read
// last, unchanged since, is not read again (see lastRead); its source then
// has no data, which only the embedded demo's runner needs.
func signatureOf(name string) (source, *onnxio.Signature, error) {
	if src, sig, ok := lastRead.get(name); ok {
		return src, sig, nil
	}
	src, sig, err := readModel(name)
	if err != nil {
		return src, nil, err
	}
	lastRead.put(src, sig)
	return src, sig, nil
}

// lastRead is the model file signatureOf read last, with its signature:
// the supervisor reads a model's settings, checks the model and makes its
// codec within moments, and read and hashed a model of gigabytes each time.
var lastRead readMemo

type readMemo struct {
	mu  sync.Mutex
	src source // without its data
	sig *onnxio.Signature
}

// get returns the file at path as it was read last, when the file is still
// the one that was read: its stamp has not changed.
func (m *readMemo) get(path string) (source, *onnxio.Signature, bool) {
	if path == demo.Name {
		return source{}, nil, false
	}
	m.mu.Lock()
	src, sig := m.src, m.sig
	m.mu.Unlock()
	if src.path != path || src.stamp == "" {
		return source{}, nil, false
	}
	if stamp, ok := stampOf(path, src.external); !ok || stamp != src.stamp {
		return source{}, nil, false
	}
	return src, sig, true
}

func (m *readMemo) put(src source, sig *onnxio.Signature) {
	if src.stamp == "" {
		return
	}
	src.data = nil
	m.mu.Lock()
	defer m.mu.Unlock()
	m.src, m.sig = src, sig
}

// Check validates the settings in the supervisor before any worker starts:
// the model file exists and is an ONNX model streamer can serve (float16
// values included: see float16Outputs), the pad, device and intra-op thread
// settings fit it, and the ONNX Runtime library loads and has the C API
// onnxruntime_go needs. Each failure is one line that says what was looked
// for and how to fix it.
func Check(spec Settings) error {
	codec, _, err := Codec(spec)
	if err != nil {
		return err
	}
	if _, err := float16Outputs(codec.Signature()); err != nil {
		return fmt.Errorf("model %s: %w", spec.Path, err)
	}
	if err := checkSettings(spec); err != nil {
		return err
	}
	_, _, err = probeLibrary(spec.Library)
	return err
}

func checkSettings(spec Settings) error {
	switch spec.Device {
	case "", "cpu", "cuda":
	default:
		return fmt.Errorf("device %q: want cpu or cuda", spec.Device)
	}
	if spec.IntraOpThreads < 0 {
		return fmt.Errorf("intra-op threads %d: must not be negative", spec.IntraOpThreads)
	}
	return nil
}

// Description is what GET /v1/models says about an ONNX model.
type Description struct {
	// Model is the model's path (or the demo's name); Runner is "onnx".
	Model  string `json:"model"`
	Runner string `json:"runner"`
	// Device is cpu or cuda; IntraOpThreads 0 means the runtime's default.
	Device         string `json:"device"`
	IntraOpThreads int    `json:"intra_op_threads"`
	// Inputs and Outputs are the model's, with names, dtypes and shapes
	// (fixed axes as numbers, dynamic ones as their name or null).
	Inputs  []onnxio.Port `json:"inputs"`
	Outputs []onnxio.Port `json:"outputs"`
	// Batching says how items are put together.
	Batching Batching `json:"batching"`
	// Producer, IRVersion and Opset describe the file.
	Producer  string `json:"producer,omitempty"`
	IRVersion int64  `json:"ir_version"`
	Opset     int64  `json:"opset"`
	// SHA256 is the SHA-256 (hex) of the model file the workers open:
	// which weights are served. A reload that takes a new file changes it;
	// empty for the embedded demo.
	SHA256 string `json:"sha256,omitempty"`
}

// Batching describes how the items of an ONNX model share runs.
type Batching struct {
	// Mode is "stacked" (items stacked along the batch axis) or
	// "one-by-one"; Why explains the latter.
	Mode onnxio.BatchMode `json:"mode"`
	Why  string           `json:"why,omitempty"`
	// Key says which items may share a run.
	Key string `json:"key"`
	// Pad lists the padding settings: input name → padding value.
	Pad Pads `json:"pad,omitempty"`
	// BatchSize and MaxLatency are the server's batching limits; the server
	// fills them in.
	BatchSize  int    `json:"batch_size,omitempty"`
	MaxLatency string `json:"max_latency,omitempty"`
}

// Notes returns what the server should log once at start about how the
// model is batched.
func (d *Description) Notes() []string {
	if d.Batching.Mode == onnxio.OneByOne {
		return []string{"ONNX model " + d.Model + " runs items one by one: " + d.Batching.Why}
	}
	return nil
}

func describe(name string, spec Settings, codec *onnxio.Codec) *Description {
	sig := codec.Signature()
	device := spec.Device
	if device == "" {
		device = "cpu"
	}
	d := &Description{
		Model: name, Runner: "onnx", Device: device, IntraOpThreads: spec.IntraOpThreads,
		Inputs: sig.Inputs, Outputs: sig.Outputs,
		Producer: sig.Producer, IRVersion: sig.IRVersion, Opset: sig.Opset,
		Batching: Batching{Mode: sig.Mode, Why: sig.Why},
	}
	switch {
	case sig.Mode == onnxio.OneByOne:
		d.Batching.Key = "none: each item runs alone"
	case len(codec.Pads()) > 0:
		d.Batching.Key = "input shapes, padded axes excepted, and the shapes and values of inputs without a batch axis"
		d.Batching.Pad = codec.Pads()
	default:
		d.Batching.Key = "input shapes, and the shapes and values of inputs without a batch axis: items run together only when these agree"
	}
	return d
}

// OpenSpec opens the ONNX model spec names, as a worker does.
func OpenSpec(ctx context.Context, spec model.Spec) (model.Model, error) {
	settings, err := SettingsOf(spec)
	if err != nil {
		return nil, err
	}
	r, err := Open(ctx, settings)
	if err != nil {
		return nil, err
	}
	return r, nil
}
