package onnx_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/demo"
	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// tolerance is how far a served output may be from the float64 reference.
const tolerance = 1e-5

// modelSpec names a test model by its onnxtest name, with one intra-op
// thread: the test machines have few cores.
func modelSpec(t testing.TB, name string) onnx.Settings {
	t.Helper()
	if name == onnxtest.Demo {
		return onnx.Settings{Path: demo.Name, IntraOpThreads: 1}
	}
	path, err := onnxtest.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	return onnx.Settings{Path: path, IntraOpThreads: 1}
}

func reference(t testing.TB, name string) *onnxtest.Reference {
	t.Helper()
	path, err := onnxtest.Path(name)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := onnxtest.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// open opens a runner; a missing runtime library fails the test with the
// fix (the error says: run make onnxruntime).
func open(t testing.TB, spec onnx.Settings) *onnx.Runner {
	t.Helper()
	r, err := onnx.Open(context.Background(), spec)
	if err != nil {
		t.Fatalf("open %s: %v", spec.Path, err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

// encode turns JSON items into worker items through the runner's codec.
func encode(t *testing.T, r *onnx.Runner, jsonItems ...string) [][]byte {
	t.Helper()
	items := make([][]byte, len(jsonItems))
	for i, js := range jsonItems {
		item, _, err := r.Codec().FromJSON([]byte(js))
		if err != nil {
			t.Fatalf("item %s: %v", js, err)
		}
		items[i] = item
	}
	return items
}

func predict(t *testing.T, r *onnx.Runner, items [][]byte) [][]onnxio.Tensor {
	t.Helper()
	outs, err := r.Predict(context.Background(), items)
	if err != nil {
		t.Fatalf("predict: %v", err)
	}
	if len(outs) != len(items) {
		t.Fatalf("%d outputs for %d items", len(outs), len(items))
	}
	decoded := make([][]onnxio.Tensor, len(outs))
	for i, out := range outs {
		if decoded[i], err = onnxio.DecodeOutput(r.Codec().Signature(), out); err != nil {
			t.Fatalf("output %d: %v", i, err)
		}
	}
	return decoded
}

func values(t *testing.T, tensor onnxio.Tensor) []float64 {
	t.Helper()
	var out []float64
	switch tensor.DType {
	case onnxio.Float32:
		for i := 0; i < len(tensor.Data); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(tensor.Data[i:]))))
		}
	case onnxio.Float64:
		for i := 0; i < len(tensor.Data); i += 8 {
			out = append(out, math.Float64frombits(binary.LittleEndian.Uint64(tensor.Data[i:])))
		}
	case onnxio.Float16:
		for i := 0; i < len(tensor.Data); i += 2 {
			out = append(out, onnxio.Float16Frombits(binary.LittleEndian.Uint16(tensor.Data[i:])))
		}
	case onnxio.Int64:
		for i := 0; i < len(tensor.Data); i += 8 {
			out = append(out, float64(int64(binary.LittleEndian.Uint64(tensor.Data[i:]))))
		}
	case onnxio.Int32:
		for i := 0; i < len(tensor.Data); i += 4 {
			out = append(out, float64(int32(binary.LittleEndian.Uint32(tensor.Data[i:]))))
		}
	case onnxio.Bool:
		for _, b := range tensor.Data {
			out = append(out, float64(b))
		}
	default:
		t.Fatalf("dtype %s", tensor.DType)
	}
	return out
}

func near(t *testing.T, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tolerance {
			t.Fatalf("%s: value %d is %g, want %g (±%g)", what, i, got[i], want[i], tolerance)
		}
	}
}

func floatsJSON(vs []float32) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.FormatFloat(float64(v), 'g', -1, 32)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func randomFeatures(rng *rand.Rand) []float32 {
	x := make([]float32, 4)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 2)
	}
	return x
}

func TestClassifiersMatchTheReference(t *testing.T) {
	for _, name := range []string{onnxtest.MLP, onnxtest.Demo} {
		t.Run(name, func(t *testing.T) {
			r := open(t, modelSpec(t, name))
			ref := reference(t, name)
			answer := ref.MLP
			if name == onnxtest.Demo {
				answer = ref.Demo
			}
			rng := rand.New(rand.NewPCG(7, 7))
			features := make([][]float32, 9)
			jsonItems := make([]string, len(features))
			want := make([][]float64, len(features))
			for i := range features {
				features[i] = randomFeatures(rng)
				jsonItems[i] = floatsJSON(features[i])
				want[i] = answer(features[i])
			}
			items := encode(t, r, jsonItems...)
			for _, batch := range []int{len(items), 7, 1} {
				before := r.Runs()
				for start := 0; start < len(items); start += batch {
					end := min(start+batch, len(items))
					for k, out := range predict(t, r, items[start:end]) {
						i := start + k
						if !equalShape(out[0].Shape, 3) {
							t.Fatalf("item %d: output shape %v, want [3]", i, out[0].Shape)
						}
						near(t, fmt.Sprintf("batch %d item %d", batch, i), values(t, out[0]), want[i])
					}
				}
				if runs, want := r.Runs()-before, uint64((len(items)+batch-1)/batch); runs != want {
					t.Errorf("batches of %d: %d runs, want %d (one per batch)", batch, runs, want)
				}
			}
		})
	}
}

func equalShape(shape []int64, want ...int64) bool {
	if len(shape) != len(want) {
		return false
	}
	for i := range shape {
		if shape[i] != want[i] {
			return false
		}
	}
	return true
}

// sequence returns a JSON sequence item of n steps and its values.
func sequence(rng *rand.Rand, n int) (string, [][]float32) {
	steps := make([][]float32, n)
	parts := make([]string, n)
	for i := range steps {
		steps[i] = []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.NormFloat64())}
		parts[i] = floatsJSON(steps[i])
	}
	return "[" + strings.Join(parts, ",") + "]", steps
}

func TestSequencesOfMixedLengths(t *testing.T) {
	lengths := []int{3, 1, 5, 3, 2, 5, 1, 3}
	tests := []struct {
		name string
		pad  map[string]float64
		runs uint64
	}{
		{"each length its own run", nil, 4},
		{"padded into one run", map[string]float64{"x": 0}, 1},
	}
	ref := reference(t, onnxtest.Seq)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := modelSpec(t, onnxtest.Seq)
			spec.Pad = tt.pad
			r := open(t, spec)
			rng := rand.New(rand.NewPCG(3, 3))
			jsonItems := make([]string, len(lengths))
			steps := make([][][]float32, len(lengths))
			for i, n := range lengths {
				jsonItems[i], steps[i] = sequence(rng, n)
			}
			outs := predict(t, r, encode(t, r, jsonItems...))
			for i, out := range outs {
				if !equalShape(out[0].Shape, int64(lengths[i]), 4) {
					t.Fatalf("item %d: shape %v, want [%d 4]", i, out[0].Shape, lengths[i])
				}
				var want []float64
				for _, step := range ref.Seq(steps[i]) {
					want = append(want, step...)
				}
				near(t, fmt.Sprintf("item %d", i), values(t, out[0]), want)
			}
			if r.Runs() != tt.runs {
				t.Errorf("%d runs, want %d", r.Runs(), tt.runs)
			}
		})
	}
}

type multiItem struct {
	ids    []int64
	mask   []bool
	scale  float64
	offset int32
}

func (m multiItem) json() string {
	ids := make([]string, len(m.ids))
	mask := make([]string, len(m.mask))
	for i := range m.ids {
		ids[i] = strconv.FormatInt(m.ids[i], 10)
		mask[i] = strconv.FormatBool(m.mask[i])
	}
	return fmt.Sprintf(`{"ids": [%s], "mask": [%s], "scale": %s, "offset": %d}`,
		strings.Join(ids, ","), strings.Join(mask, ","), strconv.FormatFloat(m.scale, 'g', -1, 64), m.offset)
}

func randomMulti(rng *rand.Rand, n int, scale float64) multiItem {
	m := multiItem{scale: scale, offset: int32(rng.IntN(7) - 1)}
	for range n {
		m.ids = append(m.ids, int64(rng.IntN(onnxtest.Vocabulary)))
		m.mask = append(m.mask, rng.IntN(4) != 0)
	}
	return m
}

func checkMulti(t *testing.T, ref *onnxtest.Reference, i int, m multiItem, out []onnxio.Tensor) {
	t.Helper()
	want := ref.Multi(m.ids, m.mask, m.scale, m.offset)
	what := fmt.Sprintf("item %d", i)
	near(t, what+" pooled", values(t, out[0]), want.Pooled)
	near(t, what+" count", values(t, out[1]), []float64{float64(want.Count)})
	near(t, what+" scaled", values(t, out[2]), []float64{want.Scaled})
	above := 0.0
	if want.Above {
		above = 1
	}
	near(t, what+" above", values(t, out[3]), []float64{above})
	near(t, what+" next", values(t, out[4]), []float64{float64(want.Next)})
	for k, dtype := range []onnxio.DType{onnxio.Float32, onnxio.Int64, onnxio.Float64, onnxio.Bool, onnxio.Int32} {
		if out[k].DType != dtype {
			t.Fatalf("%s output %d: dtype %s, want %s", what, k, out[k].DType, dtype)
		}
	}
}

func TestSeveralInputsAndOutputs(t *testing.T) {
	ref := reference(t, onnxtest.Multi)
	rng := rand.New(rand.NewPCG(5, 5))
	var batch []multiItem
	for i := range 12 {
		batch = append(batch, randomMulti(rng, 1+i%3, []float64{0.5, -2}[i%2]))
	}
	tests := []struct {
		name string
		pad  map[string]float64
		runs uint64 // distinct keys: (length, scale) unpadded, scale padded
	}{
		{"shapes and scalars keep runs apart", nil, 6},
		{"padded ids and mask share runs; scalars still apart", map[string]float64{"ids": 0, "mask": 0}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := modelSpec(t, onnxtest.Multi)
			spec.Pad = tt.pad
			r := open(t, spec)
			jsonItems := make([]string, len(batch))
			for i, m := range batch {
				jsonItems[i] = m.json()
			}
			for i, out := range predict(t, r, encode(t, r, jsonItems...)) {
				checkMulti(t, ref, i, batch[i], out)
			}
			if r.Runs() != tt.runs {
				t.Errorf("%d runs, want %d", r.Runs(), tt.runs)
			}
		})
	}
}

func TestFixedBatchAxisRunsItemsOneByOne(t *testing.T) {
	r := open(t, modelSpec(t, onnxtest.Fixed))
	if !strings.Contains(r.Describe(), "one item per run: the model's batch axis is fixed at 1") {
		t.Errorf("description %q does not say items run one by one", r.Describe())
	}
	ref := reference(t, onnxtest.Fixed)
	rng := rand.New(rand.NewPCG(9, 9))
	var features [][]float32
	var jsonItems []string
	for range 5 {
		x := randomFeatures(rng)
		features = append(features, x)
		jsonItems = append(jsonItems, floatsJSON(x))
	}
	for i, out := range predict(t, r, encode(t, r, jsonItems...)) {
		y, energy := ref.Fixed(features[i])
		if !equalShape(out[0].Shape, 2) || !equalShape(out[1].Shape) {
			t.Fatalf("item %d: shapes %v and %v, want [2] and []", i, out[0].Shape, out[1].Shape)
		}
		near(t, fmt.Sprintf("item %d y", i), values(t, out[0]), y)
		near(t, fmt.Sprintf("item %d energy", i), values(t, out[1]), []float64{energy})
	}
	if r.Runs() != 5 {
		t.Errorf("%d runs for 5 items, want 5", r.Runs())
	}
}

func TestBadItemsFailAlone(t *testing.T) {
	r := open(t, modelSpec(t, onnxtest.Multi))
	ref := reference(t, onnxtest.Multi)
	good := []multiItem{
		{ids: []int64{1, 2}, mask: []bool{true, true}, scale: 1, offset: 0},
		{ids: []int64{3, 4}, mask: []bool{true, false}, scale: 1, offset: 2},
	}
	items := encode(t, r, good[0].json(), good[1].json())
	// An id outside the vocabulary passes the edge (it is a fine int64) but
	// the model's Gather refuses it: the runtime error fails that item only.
	outOfVocabulary := multiItem{ids: []int64{1, 50}, mask: []bool{true, true}, scale: 1, offset: 0}
	items = append(items, encode(t, r, outOfVocabulary.json())...)
	items = append(items, []byte("not msgpack"))
	wrongShape := onnxio.EncodeItem([]onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{1}, Data: make([]byte, 4)}})
	items = append(items, wrongShape)

	outs, err := r.Predict(context.Background(), items)
	var itemErrs *model.ItemErrors
	if !errors.As(err, &itemErrs) {
		t.Fatalf("error %v, want *model.ItemErrors", err)
	}
	wantErrs := []string{"", "", "onnx runtime", "item is not an array of tensors", "the item has 1 inputs"}
	for i, want := range wantErrs {
		got := itemErrs.Errs[i]
		switch {
		case want == "" && got != nil:
			t.Errorf("item %d failed: %v", i, got)
		case want != "" && (got == nil || !strings.Contains(got.Error(), want)):
			t.Errorf("item %d: error %v, want one containing %q", i, got, want)
		}
	}
	for i := range good {
		out, err := onnxio.DecodeOutput(r.Codec().Signature(), outs[i])
		if err != nil {
			t.Fatal(err)
		}
		checkMulti(t, ref, i, good[i], out)
	}
}

func TestCUDAWithoutProviderFailsLoudly(t *testing.T) {
	spec := modelSpec(t, onnxtest.MLP)
	spec.Device = "cuda"
	r, err := onnx.Open(context.Background(), spec)
	if err == nil {
		// A CUDA build of ONNX Runtime on a machine with a GPU: it works.
		_ = r.Close()
		t.Skip("this ONNX Runtime library has a working CUDA provider")
	}
	for _, want := range []string{"device cuda", "has no usable CUDA execution provider", "or the CPU"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// fakeRuntime builds a shared library that looks like an old ONNX Runtime:
// it has OrtGetApiBase, but no C API version 24.
func fakeRuntime(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "fake.c")
	code := `#include <stddef.h>
#include <stdint.h>
typedef struct { const void *(*get_api)(uint32_t); const char *(*version)(void); } api_base;
static const void *get_api(uint32_t v) { (void)v; return NULL; }
static const char *version(void) { return "1.16.3"; }
static const api_base base = { get_api, version };
const api_base *OrtGetApiBase(void) { return &base; }
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libonnxruntime.so")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("build a fake runtime library with %s (cgo needs a C compiler anyway): %v\n%s", cc, err, out)
	}
	return lib
}

func TestCheckFailsFastWithOneClearLine(t *testing.T) {
	mlp := modelSpec(t, onnxtest.MLP)
	notONNX := filepath.Join(t.TempDir(), "notes.onnx")
	if err := os.WriteFile(notONNX, []byte("these are notes, not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "model.onnx")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(edit func(*onnx.Settings)) onnx.Settings {
		s := mlp
		edit(&s)
		return s
	}
	tests := []struct {
		name string
		spec onnx.Settings
		is   error
		want []string
	}{
		{"missing file", with(func(s *onnx.Settings) { s.Path = "no/such/model.onnx" }), nil, []string{"model no/such/model.onnx: no such file"}},
		{"folder", with(func(s *onnx.Settings) { s.Path = t.TempDir() }), nil, []string{"is a folder, not an .onnx file"}},
		// Read, a named pipe would hold the start for ever, and a
		// device such as /dev/zero fill the memory.
		{"named pipe", with(func(s *onnx.Settings) { s.Path = fifo }), nil, []string{"model " + fifo + ": is a named pipe, not an .onnx file"}},
		{"device", with(func(s *onnx.Settings) { s.Path = os.DevNull }), nil, []string{"model " + os.DevNull + ": is a device, not an .onnx file"}},
		{"not ONNX", with(func(s *onnx.Settings) { s.Path = notONNX }), onnxio.ErrNotONNX, []string{notONNX, "not an ONNX model"}},
		{"bad pad", with(func(s *onnx.Settings) { s.Pad = map[string]float64{"feature": 0} }), nil, []string{`pad feature=0: the model has no input "feature"`}},
		{"bad device", with(func(s *onnx.Settings) { s.Device = "tpu" }), nil, []string{`device "tpu": want cpu or cuda`}},
		{"missing library", with(func(s *onnx.Settings) { s.Library = "/no/such/libonnxruntime.so" }), onnx.ErrNoLibrary, []string{"the library path names /no/such/libonnxruntime.so, which does not exist", "make onnxruntime"}},
		{"library a named pipe", with(func(s *onnx.Settings) { s.Library = fifo }), onnx.ErrNoLibrary, []string{"the library path names " + fifo + ", which is a named pipe, not the library file"}},
		{"not a library", with(func(s *onnx.Settings) { s.Library = notONNX }), onnx.ErrBadLibrary, []string{"load " + notONNX, "make onnxruntime"}},
		{"old library", with(func(s *onnx.Settings) { s.Library = fakeRuntime(t) }), onnx.ErrBadLibrary, []string{"does not provide the ONNX Runtime C API version 24", "1.24 or later", "make onnxruntime"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := onnx.Check(tt.spec)
			if err == nil {
				t.Fatal("Check passed")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	if err := onnx.Check(mlp); err != nil {
		t.Fatalf("Check of a good spec: %v", err)
	}
}

func TestFindLibraryLooksWhereDocumented(t *testing.T) {
	dir := t.TempDir()
	bundled := filepath.Join(dir, "third_party", "onnxruntime", "libonnxruntime.so")
	if err := os.MkdirAll(filepath.Dir(bundled), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundled, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "cmd", "streamer")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	t.Setenv(onnx.EnvLibrary, "")
	if got, err := onnx.FindLibrary(""); err != nil || got != bundled {
		t.Errorf("from a folder below the checkout: %q, %v; want %q", got, err, bundled)
	}
	flagLib := filepath.Join(dir, "flag.so")
	envLib := filepath.Join(dir, "env.so")
	for _, f := range []string{flagLib, envLib} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(onnx.EnvLibrary, envLib)
	if got, _ := onnx.FindLibrary(""); got != envLib {
		t.Errorf("with $%s set: %q, want %q", onnx.EnvLibrary, got, envLib)
	}
	if got, _ := onnx.FindLibrary(flagLib); got != flagLib {
		t.Errorf("with --ort-lib: %q, want %q", got, flagLib)
	}
	t.Chdir(dir)
	if got, _ := onnx.FindLibrary("flag.so"); got != flagLib {
		t.Errorf("with a relative --ort-lib: %q, want the absolute %q", got, flagLib)
	}
	t.Setenv(onnx.EnvLibrary, filepath.Join(dir, "gone.so"))
	if _, err := onnx.FindLibrary(""); err == nil || !strings.Contains(err.Error(), "$"+onnx.EnvLibrary+" names") {
		t.Errorf("with $%s naming a missing file: %v", onnx.EnvLibrary, err)
	}
	t.Chdir(t.TempDir())
	t.Setenv(onnx.EnvLibrary, "")
	if got, _ := onnx.FindLibrary(""); got != "libonnxruntime.so" && !strings.HasSuffix(got, "/third_party/onnxruntime/libonnxruntime.so") {
		t.Errorf("elsewhere: %q, want the system's libonnxruntime.so or the copy next to the binary", got)
	}
}

// The settings travel to the worker as JSON: a misspelt field fails the
// worker by name instead of being dropped, and a spec of another runner is
// not taken for an ONNX one.
func TestSpecRefusesUnknownSettings(t *testing.T) {
	good, err := onnx.Settings{Path: demo.Name, Pad: map[string]float64{"x": 0}}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	back, err := onnx.SettingsOf(good)
	if err != nil || back.Path != demo.Name || back.Pad["x"] != 0 || len(back.Pad) != 1 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	bad := model.Spec{Runner: onnx.SpecRunner, Settings: []byte(`{"path":"m.onnx","ort_lib":"/x.so"}`)}
	if _, err := onnx.OpenSpec(context.Background(), bad); !errors.Is(err, model.ErrBadSettings) || !strings.Contains(err.Error(), "ort_lib") {
		t.Fatalf("unknown field: %v", err)
	}
	if _, err := onnx.OpenSpec(context.Background(), model.Spec{Runner: "sleep"}); !errors.Is(err, model.ErrUnknownModel) {
		t.Fatalf("another runner's spec: %v", err)
	}
}
