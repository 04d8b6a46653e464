//go:build cgo

package onnx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
)

// Runner runs an ONNX model in the worker process. It implements
// model.Model and model.Describer. Predict is called from one goroutine at a
// time.
type Runner struct {
	codec       *onnxio.Codec
	sig         *onnxio.Signature
	float16Outs map[int][]outputAxis // by output index: the shapes of the float16 outputs the runner allocates
	session     *ort.DynamicAdvancedSession
	description string
	padding     bool // some input is padded
	closed      bool
	runs        atomic.Uint64
	// unproven lists the outputs cut along a leading axis that nothing
	// names the batch axis (see onnxio.Signature.UnprovenOutputs): found
	// not to lead with a run's items, as any output may be, one is told
	// to be named so at export (see unbatch).
	unproven []int
}

var (
	_ model.Model     = (*Runner)(nil)
	_ model.Describer = (*Runner)(nil)
)

// Open loads the ONNX Runtime library (see FindLibrary) and the model the
// settings name, on the CPU or, with Device "cuda", on CUDA device 0 of the
// process's CUDA_VISIBLE_DEVICES. It fails, rather than falling back to the
// CPU, when the library has no usable CUDA execution provider; with
// ErrSignatureChanged when the model's inputs or outputs are not those
// Settings.Signature records; and with ErrModelChanged when the file's
// SHA-256 is not the one Settings.SHA256 records.
func Open(ctx context.Context, spec Settings) (*Runner, error) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return nil, errors.New("onnx: streamer's tensors are little-endian; this machine is not")
	}
	if err := checkSettings(spec); err != nil {
		return nil, err
	}
	src, sig, err := signatureOf(spec.Path)
	if err != nil {
		return nil, staleIfChanged(spec, src, err)
	}
	if err := checkModel(spec, src, sig); err != nil {
		return nil, err
	}
	codec, err := onnxio.NewCodec(sig, spec.Pad)
	if err != nil {
		return nil, err
	}
	float16Outs, err := float16Outputs(sig)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", src.name, err)
	}
	if src.path != "" {
		src.data = nil // ONNX Runtime reads the file itself
	}
	lib, err := FindLibrary(spec.Library)
	if err != nil {
		return nil, err
	}
	version, err := acquireRuntime(lib)
	if err != nil {
		return nil, err
	}
	session, err := newSession(src, sig, spec, lib, version)
	if err != nil {
		releaseRuntime()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		_ = session.Destroy()
		releaseRuntime()
		return nil, err
	}
	// The runner's own signature: it may learn that an output's leading
	// axis is not the batch axis (see unbatch), which the codec, used by
	// other goroutines, need not know.
	own := *sig
	own.Inputs, own.Outputs = slices.Clone(sig.Inputs), slices.Clone(sig.Outputs)
	r := &Runner{
		codec:       codec,
		sig:         &own,
		float16Outs: float16Outs,
		session:     session,
		padding:     len(codec.Pads()) > 0,
	}
	r.unproven = own.UnprovenOutputs()
	if err := r.probe(); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("model %s: %w", src.name, err)
	}
	r.description = runnerDescription(src.name, spec, version, r.sig)
	return r, nil
}

// runnerDescription is the one line a worker reports when it is ready.
func runnerDescription(name string, spec Settings, version string, sig *onnxio.Signature) string {
	d := fmt.Sprintf("onnx %s on %s (ONNX Runtime %s", name, deviceName(spec), version)
	if spec.IntraOpThreads > 0 {
		d += fmt.Sprintf(", %d intra-op threads", spec.IntraOpThreads)
	}
	if sig.Mode == onnxio.OneByOne {
		d += "; one item per run: " + sig.Why
	}
	return d + ")"
}

func deviceName(spec Settings) string {
	if spec.Device == "cuda" {
		return "cuda:0"
	}
	return "cpu"
}

func newSession(src source, sig *onnxio.Signature, spec Settings, lib, version string) (*ort.DynamicAdvancedSession, error) {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("onnx: session options: %w", err)
	}
	defer func() { _ = opts.Destroy() }()
	if spec.IntraOpThreads > 0 {
		if err := opts.SetIntraOpNumThreads(spec.IntraOpThreads); err != nil {
			return nil, fmt.Errorf("onnx: intra-op threads %d: %w", spec.IntraOpThreads, err)
		}
	}
	// Streamer runs one batch at a time per worker: operators run one after
	// the other, each using the intra-op threads.
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return nil, fmt.Errorf("onnx: inter-op threads: %w", err)
	}
	if spec.Device == "cuda" {
		if err := appendCUDA(opts); err != nil {
			return nil, fmt.Errorf("device cuda: the ONNX Runtime library %s (version %s) has no usable CUDA execution provider: %v; use a CUDA build of ONNX Runtime, or the CPU", lib, version, err)
		}
	}
	inputs := make([]string, len(sig.Inputs))
	for i, p := range sig.Inputs {
		inputs[i] = p.Name
	}
	outputs := make([]string, len(sig.Outputs))
	for i, p := range sig.Outputs {
		outputs[i] = p.Name
	}
	var session *ort.DynamicAdvancedSession
	if src.path != "" {
		session, err = ort.NewDynamicAdvancedSession(src.path, inputs, outputs, opts)
	} else {
		session, err = ort.NewDynamicAdvancedSessionWithONNXData(src.data, inputs, outputs, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("onnx: load %s on %s: %w", src.name, deviceName(spec), err)
	}
	return session, nil
}

// appendCUDA adds the CUDA execution provider on device 0: the worker's own
// card, since its CUDA_VISIBLE_DEVICES names only that one.
func appendCUDA(opts *ort.SessionOptions) error {
	cuda, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return err
	}
	defer func() { _ = cuda.Destroy() }()
	if err := cuda.Update(map[string]string{"device_id": "0"}); err != nil {
		return err
	}
	return opts.AppendExecutionProviderCUDA(cuda)
}

// Describe names the model, its device and the runtime version.
func (r *Runner) Describe() string { return r.description }

// Runs is the number of times the model has run: once per batch key of a
// stacked batch, once per item of a one-by-one model.
func (r *Runner) Runs() uint64 { return r.runs.Load() }

// Session returns the ONNX Runtime session, for measuring the model alone.
func (r *Runner) Session() *ort.DynamicAdvancedSession { return r.session }

// Codec returns the codec the runner checks items with.
func (r *Runner) Codec() *onnxio.Codec { return r.codec }

// Close releases the session, and the runtime after its last user.
func (r *Runner) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.session.Destroy()
	releaseRuntime()
	return err
}

// Predict runs one batch. Items are checked again here (a Go program may
// submit items that no codec saw); a bad item fails alone. Items are grouped
// by batch key, each group stacked into one run (or, for a model that takes
// one item at a time, one run per item; or, for padded items, as many runs
// as keep each run near the items' own size: see padRuns). When a stacked
// run fails, its items are run one by one, so that an item the model
// rejects fails alone.
func (r *Runner) Predict(ctx context.Context, items [][]byte) ([][]byte, error) {
	if r.closed {
		return nil, errors.New("onnx: the model is closed")
	}
	outputs := make([][]byte, len(items))
	errs := make([]error, len(items))
	decoded := make([][]onnxio.Tensor, len(items))
	var order []string
	groups := map[string][]int{}
	for i, item := range items {
		inputs, err := onnxio.DecodeItem(item)
		if err == nil {
			err = r.codec.Check(inputs)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		decoded[i] = inputs
		key := r.codec.Key(inputs)
		if r.sig.Mode == onnxio.OneByOne {
			key = fmt.Sprint(i)
		}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], i)
	}
	for _, key := range order {
		for _, run := range r.padRuns(groups[key], decoded) {
			if r.sig.Mode == onnxio.OneByOne && len(run) > 1 {
				// The model was found to take one item at a time
				// while this batch was grouped.
				for _, i := range run {
					r.runGroup(ctx, []int{i}, decoded, outputs, errs)
				}
				continue
			}
			r.runGroup(ctx, run, decoded, outputs, errs)
		}
	}
	for _, err := range errs {
		if err != nil {
			return outputs, &model.ItemErrors{Errs: errs}
		}
	}
	return outputs, nil
}

func (r *Runner) runGroup(ctx context.Context, idx []int, decoded [][]onnxio.Tensor, outputs [][]byte, errs []error) {
	if err := ctx.Err(); err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return
	}
	group := make([][]onnxio.Tensor, len(idx))
	for k, i := range idx {
		group[k] = decoded[i]
	}
	outs, err := r.run(group)
	if err == nil {
		for k, i := range idx {
			outputs[i] = outs[k]
		}
		return
	}
	if len(idx) == 1 && !errors.Is(err, errUnbatched) {
		errs[idx[0]] = err
		return
	}
	for _, i := range idx {
		r.runGroup(ctx, []int{i}, decoded, outputs, errs)
	}
}

// run stacks items (all with one batch key), runs the model once and
// returns each item's encoded outputs.
func (r *Runner) run(items [][]onnxio.Tensor) ([][]byte, error) {
	var encoded [][]byte
	err := r.execute(items, func(outs []onnxio.Tensor) error {
		perItem := make([][]onnxio.Tensor, len(items))
		for i := range perItem {
			perItem[i] = make([]onnxio.Tensor, len(r.sig.Outputs))
		}
		for k, t := range outs {
			if err := r.split(k, t, items, perItem); err != nil {
				return fmt.Errorf("onnx: output %q: %w", r.sig.Outputs[k].Name, err)
			}
		}
		encoded = make([][]byte, len(items))
		for i, outs := range perItem {
			b, err := onnxio.EncodeOutput(r.sig, outs)
			if err != nil {
				return err
			}
			encoded[i] = b
		}
		return nil
	})
	return encoded, err
}

// execute stacks items (all with one batch key), runs the model once and
// calls use with its outputs, whose data is the runtime's until use
// returns.
func (r *Runner) execute(items [][]onnxio.Tensor, use func(outs []onnxio.Tensor) error) error {
	inputs := make([]ort.Value, len(r.sig.Inputs))
	defer destroyAll(inputs)
	shapes := make([][]int64, len(r.sig.Inputs))
	for j := range r.sig.Inputs {
		t := r.stack(j, items)
		v, err := newValue(t)
		if err != nil {
			return fmt.Errorf("onnx: input %q: %w", r.sig.Inputs[j].Name, err)
		}
		inputs[j], shapes[j] = v, t.Shape
	}
	outputs, err := r.allocateOutputs(shapes, len(items))
	defer destroyAll(outputs)
	if err != nil {
		return err
	}
	r.runs.Add(1)
	if err := r.session.Run(inputs, outputs); err != nil {
		if f16 := r.float16Mismatch(err, shapes, len(items)); f16 != nil {
			return f16
		}
		return r.runError(err, outputs)
	}
	outs := make([]onnxio.Tensor, len(outputs))
	for k, p := range r.sig.Outputs {
		t, err := valueTensor(outputs[k])
		if err != nil {
			return fmt.Errorf("onnx: output %q: %w", p.Name, err)
		}
		outs[k] = t
	}
	return use(outs)
}

// runError explains a failed run. onnxruntime_go cannot hand back a rank-0
// tensor that ONNX Runtime allocated: when a model produces a scalar where
// it declares an axis (or no shape), that output is left a typed nil, and
// the error names the output and what it declares.
func (r *Runner) runError(err error, outputs []ort.Value) error {
	if errors.Is(err, ort.ZeroShapeLengthError) {
		for k, v := range outputs {
			if v != nil && isNil(v) {
				p := r.sig.Outputs[k]
				declared := "no shape"
				if p.Shape != nil {
					declared = p.Shape.String()
				}
				return fmt.Errorf("onnx: output %q: the model produced a scalar, but declares %s; re-export it with the shape it has", p.Name, declared)
			}
		}
	}
	return fmt.Errorf("onnx runtime: %w", err)
}

// allocateOutputs gives ONNX Runtime the outputs it must not allocate
// itself; the others stay nil, for the runtime to allocate. onnxruntime_go
// cannot take a scalar output it allocates, nor return a float16 one (see
// float16Outputs), so those are made here, float16 ones in the shape their
// plan takes from the stacked inputs.
func (r *Runner) allocateOutputs(inputShapes [][]int64, items int) ([]ort.Value, error) {
	outputs := make([]ort.Value, len(r.sig.Outputs))
	for k, p := range r.sig.Outputs {
		plan, float16 := r.float16Outs[k]
		scalar := p.Shape != nil && len(p.Shape) == 0
		if !float16 && !scalar {
			continue
		}
		t := onnxio.Tensor{DType: p.DType}
		if float16 {
			t.Shape = outputShape(plan, inputShapes, items)
		}
		n := float64(p.DType.Size())
		for _, d := range t.Shape {
			n *= float64(d)
		}
		if n > onnxio.MaxAnswerBytes {
			return outputs, fmt.Errorf("onnx: output %q: a run of %d items would take %.3g bytes, beyond the %d MiB a worker sends back in one answer", p.Name, items, n, onnxio.MaxAnswerBytes>>20)
		}
		t.Data = make([]byte, int64(n))
		v, err := newValue(t)
		if err != nil {
			return outputs, fmt.Errorf("onnx: output %q: %w", p.Name, err)
		}
		outputs[k] = v
	}
	return outputs, nil
}

// destroyAll destroys the values that exist. A failed run may leave a
// typed nil in an output (a *Tensor that onnxruntime_go could not make):
// it is not a value, though the interface holding it is not nil.
func destroyAll(values []ort.Value) {
	for _, v := range values {
		if !isNil(v) {
			_ = v.Destroy()
		}
	}
}

func isNil(v ort.Value) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
