package onnxio_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

func codec(t testing.TB, model string, pad map[string]float64) *onnxio.Codec {
	t.Helper()
	c, err := onnxio.NewCodec(signature(t, model), pad)
	if err != nil {
		t.Fatalf("codec for %s: %v", model, err)
	}
	return c
}

func f32bytes(vs ...float32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func i64bytes(vs ...int64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func f64bytes(vs ...float64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

func i32bytes(vs ...int32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// decode reads back an item the codec produced.
func decode(t *testing.T, item []byte) []onnxio.Tensor {
	t.Helper()
	inputs, err := onnxio.DecodeItem(item)
	if err != nil {
		t.Fatalf("decode item: %v", err)
	}
	return inputs
}

func sameTensors(t *testing.T, got, want []onnxio.Tensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.DType != w.DType || !equalInts(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("tensor %d: got %s %v %x, want %s %v %x", i, g.DType, g.Shape, g.Data, w.DType, w.Shape, w.Data)
		}
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var multiItem = []onnxio.Tensor{
	{DType: onnxio.Int64, Shape: []int64{3}, Data: i64bytes(1, 2, 9)},
	{DType: onnxio.Bool, Shape: []int64{3}, Data: []byte{1, 1, 0}},
	{DType: onnxio.Float64, Shape: []int64{}, Data: f64bytes(0.5)},
	{DType: onnxio.Int32, Shape: []int64{}, Data: i32bytes(-7)},
}

func TestCodecEncodesGoodItems(t *testing.T) {
	mlpItem := []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(5.1, 3.5, -1.4, 0.2)}}
	tests := []struct {
		name  string
		model string
		json  string
		want  []onnxio.Tensor
		key   string
	}{
		{"bare array", onnxtest.MLP, `[5.1, 3.5, -1.4, 0.2]`, mlpItem, "4"},
		{"object by name", onnxtest.MLP, `{"features": [5.1, 3.5, -1.4, 0.2]}`, mlpItem, "4"},
		{"integers into float32", onnxtest.MLP, ` [1, 2, 3, 4] `, []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(1, 2, 3, 4)}}, "4"},
		{"sequence", onnxtest.Seq, `[[1, 2, 3], [4, 5, 6]]`, []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{2, 3}, Data: f32bytes(1, 2, 3, 4, 5, 6)}}, "2x3"},
		{"several dtypes", onnxtest.Multi, `{"ids": [1, 2, 9], "mask": [true, true, false], "scale": 0.5, "offset": -7}`, multiItem, "3;3;float64[]=000000000000e03f;"},
		{"bool as 0 and 1, whole floats as ints", onnxtest.Multi, `{"offset": -7.0, "scale": 5e-1, "ids": [1, 2, 9e0], "mask": [1, 1, 0]}`, multiItem, "3;3;float64[]=000000000000e03f;"},
		{"fixed batch axis", onnxtest.Fixed, `[1, 2, 3, 4]`, []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(1, 2, 3, 4)}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item, key, err := codec(t, tt.model, nil).FromJSON([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			sameTensors(t, decode(t, item), tt.want)
			if key != tt.key {
				t.Errorf("key %q, want %q", key, tt.key)
			}
		})
	}
}

func TestCodecRefusesBadJSONItems(t *testing.T) {
	tests := []struct {
		name  string
		model string
		json  string
		want  []string
	}{
		{"wrong rank", onnxtest.MLP, `[[1, 2, 3, 4]]`, []string{`input "features"`, "want float32 [4]", "got shape [1, 4]"}},
		{"fixed axis of the wrong size", onnxtest.MLP, `[1, 2, 3]`, []string{`input "features"`, "want float32 [4]", "got shape [3]"}},
		{"empty", onnxtest.MLP, `[]`, []string{"want float32 [4]", "got shape [0]"}},
		{"a number for a vector", onnxtest.MLP, `3`, []string{"want float32 [4]", "got a number"}},
		{"a string value", onnxtest.MLP, `[1, 2, 3, "x"]`, []string{"want float32 [4]", "got a string at [3], which does not fit float32"}},
		{"null value", onnxtest.MLP, `[1, null, 3, 4]`, []string{"got null at [1]"}},
		{"too large for float32", onnxtest.MLP, `[1e39, 1, 1, 1]`, []string{"got 1e39 at [0], which does not fit float32"}},
		{"bool for float32", onnxtest.MLP, `[true, 1, 1, 1]`, []string{"got true at [0], which does not fit float32"}},
		{"wrong name", onnxtest.MLP, `{"feature": [1, 2, 3, 4]}`, []string{`unknown input "feature"`, "features (float32 [4])"}},
		{"ragged", onnxtest.Seq, `[[1, 2, 3], [4, 5]]`, []string{`input "x"`, "want float32 [seq, 3]", "rows of different lengths along axis 1 (3 and 2)"}},
		{"fixed inner axis", onnxtest.Seq, `[[1, 2], [3, 4]]`, []string{"want float32 [seq, 3]", "got shape [2, 2]"}},
		{"number where a row belongs", onnxtest.Seq, `[[1, 2, 3], 4]`, []string{"want float32 [seq, 3]", "a single value at [1] where an array belongs"}},
		{"too deep", onnxtest.Seq, `[[[1, 2, 3]]]`, []string{"want float32 [seq, 3] (rank 2", "got shape [1, 1, 3]"}},
		{"bare value for several inputs", onnxtest.Multi, `[1, 2, 3]`, []string{"the model has 4 inputs", "send an object keyed by input name", "ids (int64 [seq])"}},
		{"missing input", onnxtest.Multi, `{"ids": [1], "scale": 1, "offset": 1}`, []string{`missing input "mask" (bool [seq])`}},
		{"extra input", onnxtest.Multi, `{"ids": [1], "mask": [true], "scale": 1, "offset": 1, "temperature": 2}`, []string{`unknown input "temperature"`}},
		{"fraction for int64", onnxtest.Multi, `{"ids": [1, 1.5], "mask": [true, true], "scale": 1, "offset": 1}`, []string{`input "ids"`, "want int64 [seq]", "got 1.5 at [1], which does not fit int64"}},
		{"2 for bool", onnxtest.Multi, `{"ids": [1], "mask": [2], "scale": 1, "offset": 1}`, []string{`input "mask"`, "want bool [seq]", "got 2 at [0], which does not fit bool"}},
		{"beyond int32", onnxtest.Multi, `{"ids": [1], "mask": [true], "scale": 1, "offset": 3000000000}`, []string{`input "offset"`, "want int32 []", "got 3000000000, which does not fit int32"}},
		{"beyond int64", onnxtest.Multi, `{"ids": [99999999999999999999], "mask": [true], "scale": 1, "offset": 1}`, []string{`input "ids"`, "got 99999999999999999999 at [0], which does not fit int64"}},
		{"vector for a scalar", onnxtest.Multi, `{"ids": [1], "mask": [true], "scale": [1], "offset": 1}`, []string{`input "scale"`, "want float64 [] (rank 0)", "got shape [1]"}},
		{"shared axis lengths differ", onnxtest.Multi, `{"ids": [1, 2, 3], "mask": [true, false], "scale": 1, "offset": 1}`, []string{`input "mask": axis 0 (seq) is 2 long, but input "ids" has seq = 3`}},
		{"fixed batch model, batch axis sent", onnxtest.Fixed, `[[1, 2, 3, 4]]`, []string{"want float32 [4]", "got shape [1, 4]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := codec(t, tt.model, nil).FromJSON([]byte(tt.json))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tensorMap(dtype string, shape []int, data []byte) map[string]any {
	return map[string]any{"dtype": dtype, "shape": shape, "data": data}
}

func TestCodecEncodesGoodMsgpackItems(t *testing.T) {
	mlpItem := []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{4}, Data: f32bytes(5.1, 3.5, -1.4, 0.2)}}
	tests := []struct {
		name  string
		model string
		value any
		want  []onnxio.Tensor
	}{
		{"nested arrays of float32", onnxtest.MLP, []float32{5.1, 3.5, -1.4, 0.2}, mlpItem},
		{"tensor map", onnxtest.MLP, tensorMap("float32", []int{4}, f32bytes(5.1, 3.5, -1.4, 0.2)), mlpItem},
		{"by name with a tensor map", onnxtest.MLP, map[string]any{"features": tensorMap("float32", []int{4}, f32bytes(5.1, 3.5, -1.4, 0.2))}, mlpItem},
		{"by name, mixed forms", onnxtest.Multi, map[string]any{
			"ids":    tensorMap("int64", []int{3}, i64bytes(1, 2, 9)),
			"mask":   []bool{true, true, false},
			"scale":  0.5,
			"offset": int8(-7),
		}, multiItem},
		{"unsigned and float32 integers", onnxtest.Multi, map[string]any{
			"ids":    []any{uint64(1), float32(2), 9.0},
			"mask":   []any{1, true, uint8(0)},
			"scale":  float32(0.5),
			"offset": -7,
		}, multiItem},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			item, _, err := codec(t, tt.model, nil).FromMsgpack(mustMsgpack(t, tt.value))
			if err != nil {
				t.Fatal(err)
			}
			sameTensors(t, decode(t, item), tt.want)
		})
	}
}

func TestCodecRefusesBadMsgpackItems(t *testing.T) {
	tests := []struct {
		name  string
		model string
		value any
		want  []string
	}{
		{"a string (form field)", onnxtest.MLP, "hello", []string{"want float32 [4]", "got a string"}},
		{"tensor of another dtype", onnxtest.MLP, tensorMap("float64", []int{4}, f64bytes(1, 2, 3, 4)), []string{`input "features"`, "want float32 [4]", "got dtype float64"}},
		{"tensor of another shape", onnxtest.MLP, tensorMap("float32", []int{2, 2}, f32bytes(1, 2, 3, 4)), []string{"want float32 [4]", "got shape [2, 2]"}},
		{"tensor data too short", onnxtest.MLP, tensorMap("float32", []int{4}, f32bytes(1, 2, 3)), []string{"data has 12 bytes, but shape [4] of float32 needs 16"}},
		{"tensor bool byte 2", onnxtest.Multi, map[string]any{
			"ids": []int{1}, "mask": tensorMap("bool", []int{1}, []byte{2}), "scale": 1.0, "offset": 1,
		}, []string{`input "mask"`, "a bool is 0 or 1"}},
		{"unknown dtype", onnxtest.MLP, tensorMap("float8", []int{4}, []byte{1, 2, 3, 4}), []string{`unknown dtype "float8"`}},
		{"tensor map with an extra key", onnxtest.MLP, map[string]any{"dtype": "float32", "shape": []int{1}, "data": f32bytes(1), "order": "C"}, []string{`input "features"`, `unknown key "order"; a tensor map has dtype, shape and data`}},
		{"wrong rank", onnxtest.MLP, [][]float64{{1, 2, 3, 4}}, []string{"want float32 [4]", "got shape [1, 4]"}},
		{"float for int", onnxtest.Multi, map[string]any{"ids": []float64{0.25}, "mask": []bool{true}, "scale": 1.0, "offset": 1}, []string{`input "ids"`, "got 0.25 at [0], which does not fit int64"}},
		{"nil value", onnxtest.MLP, []any{1, nil, 2, 3}, []string{"got nil at [1], which does not fit float32"}},
		{"missing input", onnxtest.Multi, map[string]any{"ids": []int{1}, "mask": []bool{true}, "scale": 1.0}, []string{`missing input "offset" (int32 [])`}},
		{"bare value for several inputs", onnxtest.Multi, []int{1}, []string{"the model has 4 inputs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := codec(t, tt.model, nil).FromMsgpack(mustMsgpack(t, tt.value))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMsgpackRefusesTrailingBytesAndDeepNesting(t *testing.T) {
	c := codec(t, onnxtest.Seq, nil)
	good := mustMsgpack(t, [][]float32{{1, 2, 3}})
	if _, _, err := c.FromMsgpack(append(good, 0xc0)); err == nil || !strings.Contains(err.Error(), "1 bytes after the value") {
		t.Errorf("trailing byte: %v", err)
	}
	deep := bytes.Repeat([]byte{0x91}, 100000) // [[[[...
	deep = append(deep, 0x01)
	if _, _, err := c.FromMsgpack(deep); err == nil || !strings.Contains(err.Error(), "want float32 [seq, 3]") {
		t.Errorf("deep nesting: %v", err)
	}
	deepJSON := strings.Repeat("[", 100000) + "1" + strings.Repeat("]", 100000)
	if _, _, err := c.FromJSON([]byte(deepJSON)); err == nil || !strings.Contains(err.Error(), "want float32 [seq, 3]") {
		t.Errorf("deep JSON nesting: %v", err)
	}
}

func TestKeysSeparateWhatCannotShareARun(t *testing.T) {
	key := func(c *onnxio.Codec, item string) string {
		t.Helper()
		_, k, err := c.FromJSON([]byte(item))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	seq := codec(t, onnxtest.Seq, nil)
	padded := codec(t, onnxtest.Seq, map[string]float64{"x": 0})
	multi := codec(t, onnxtest.Multi, nil)
	one, two := `[[1, 2, 3]]`, `[[1, 2, 3], [4, 5, 6]]`
	if key(seq, one) == key(seq, two) {
		t.Error("items of different lengths share a key")
	}
	if key(seq, one) != key(seq, `[[7, 8, 9]]`) {
		t.Error("items of one shape have different keys")
	}
	if key(padded, one) != key(padded, two) {
		t.Error("with --pad x, items of different lengths should share a key")
	}
	a := key(multi, `{"ids": [1], "mask": [true], "scale": 0.5, "offset": 1}`)
	b := key(multi, `{"ids": [2], "mask": [false], "scale": 0.5, "offset": 4}`)
	c := key(multi, `{"ids": [1], "mask": [true], "scale": 0.25, "offset": 1}`)
	if a != b || a == c {
		t.Errorf("keys %q %q %q: want the first two equal (same shapes and scale) and the third apart (other scale)", a, b, c)
	}
}

// An input without a batch axis is taken whole from a run's first item, so
// items whose values have the same bytes in other shapes must not share a
// run: their keys differ.
func TestKeysSpellTheShapeOfUnbatchedInputs(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	sig, err := onnxio.Parse(handModel(
		[]*onnxpb.ValueInfoProto{tensorValue("x", f32, "batch", 2), tensorValue("w", f32, 1, "k", "m")},
		[]*onnxpb.ValueInfoProto{tensorValue("y", f32, "batch", 2)}))
	if err != nil {
		t.Fatal(err)
	}
	if sig.Mode != onnxio.Stacked || sig.Inputs[1].Batched {
		t.Fatalf("mode %s, inputs %v: want w unbatched in a stacked model", sig.Mode, ports(sig.Inputs))
	}
	c, err := onnxio.NewCodec(sig, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, item := range []string{
		`{"x": [1, 1], "w": [[[1, 2]]]}`,
		`{"x": [1, 1], "w": [[[1], [2]]]}`,
	} {
		_, key, err := c.FromJSON([]byte(item))
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := keys[key]; ok {
			t.Fatalf("items %s and %s share the key %q; w has other shapes", other, item, key)
		}
		keys[key] = item
	}
}

func TestNewCodecChecksPadding(t *testing.T) {
	tests := []struct {
		name  string
		model string
		pad   map[string]float64
		want  string
	}{
		{"unknown input", onnxtest.Seq, map[string]float64{"tokens": 0}, `pad tokens=0: the model has no input "tokens"; its inputs are x (float32 [seq, 3])`},
		{"nothing to pad", onnxtest.MLP, map[string]float64{"features": 0}, `input "features" (float32 [4]) has no dynamic axis besides the batch axis`},
		{"one by one", onnxtest.Fixed, map[string]float64{"x": 0}, "items of this model run one by one"},
		{"no batch axis", onnxtest.Multi, map[string]float64{"scale": 0, "ids": 0, "mask": 0}, `input "scale" has no batch axis`},
		{"value does not fit", onnxtest.Multi, map[string]float64{"ids": 0.5, "mask": 0}, "pad ids=0.5: the value does not fit input \"ids\"'s dtype int64"},
		{"partner left unpadded", onnxtest.Multi, map[string]float64{"ids": 0}, `pad ids: input "mask" shares axis "seq" with it; pad it too (pad mask=VALUE)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := onnxio.NewCodec(signature(t, tt.model), tt.pad)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	c := codec(t, onnxtest.Multi, map[string]float64{"ids": 0, "mask": 0})
	if pads := c.Pads(); len(pads) != 2 || pads["ids"] != 0 {
		t.Fatalf("pads %v", pads)
	}
}

// With padding, every output axis but the batch axis is fixed or shares
// its name with an input axis: one named like a padded input axis is cut
// back to the item's length, one named like an unpadded one has one length
// in a run. Any other would keep the length of the longest item of the run,
// so that an item's answer would depend on its batch-mates: refused.
func TestPaddingRefusesOutputsThatCannotBeCutBack(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	i64 := onnxpb.TensorProto_INT64
	relu := func(out onnxtest.Value, in ...onnxtest.Value) onnxtest.Custom {
		return onnxtest.Custom{Inputs: in, Outputs: []onnxtest.Value{out}, Nodes: []onnxtest.Node{{Op: "Relu", Inputs: []string{in[0].Name}, Output: out.Name}}}
	}
	x := onnxtest.Value{Name: "x", DType: f32, Dims: []any{"batch", "seq", 2}}
	tests := []struct {
		name  string
		model onnxtest.Custom
		pad   map[string]float64
		want  string // "" when accepted
	}{
		{"an output axis named like the padded one", relu(onnxtest.Value{Name: "y", DType: f32, Dims: []any{"batch", "seq", 2}}, x), map[string]float64{"x": 0}, ""},
		{"no dynamic axis past the batch axis", relu(onnxtest.Value{Name: "y", DType: f32, Dims: []any{"batch", 4}}, x), map[string]float64{"x": 0}, ""},
		{"an output axis named like an unpadded input's",
			relu(onnxtest.Value{Name: "y", DType: f32, Dims: []any{"batch", "k"}}, onnxtest.Value{Name: "k", DType: f32, Dims: []any{"batch", "k"}}, onnxtest.Value{Name: "x2", DType: f32, Dims: []any{"batch", "seq"}}),
			map[string]float64{"x2": 0}, ""},
		{"a name an exporter made up", relu(onnxtest.Value{Name: "y", DType: f32, Dims: []any{"batch", "unk__7", 2}}, x), map[string]float64{"x": 0},
			`output "y" (float32 [unk__7, 2]): its axis 1, the dynamic axis "unk__7", is shared by no input axis`},
		{"an unnamed axis", relu(onnxtest.Value{Name: "y", DType: f32, Dims: []any{"batch", "", 2}}, x), map[string]float64{"x": 0},
			`output "y" (float32 [?, 2]): its axis 1, an unnamed dynamic axis, is shared by no input axis`},
		{"no shape", relu(onnxtest.Value{Name: "y", DType: f32, NoShape: true}, x), map[string]float64{"x": 0},
			`output "y" declares no shape`},
		{"as PyTorch exports two padded inputs",
			onnxtest.Custom{
				Inputs: []onnxtest.Value{
					{Name: "input_ids", DType: i64, Dims: []any{"batch", "seq"}},
					{Name: "attention_mask", DType: i64, Dims: []any{"batch", "seq"}},
				},
				Outputs: []onnxtest.Value{{Name: "output", DType: i64, Dims: []any{"batch", "Muloutput_dim_1"}}},
				Nodes:   []onnxtest.Node{{Op: "Mul", Inputs: []string{"input_ids", "attention_mask"}, Output: "output"}},
			},
			map[string]float64{"input_ids": 0, "attention_mask": 0},
			`output "output" (int64 [Muloutput_dim_1]): its axis 1, the dynamic axis "Muloutput_dim_1", is shared by no input axis`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.model.Build()
			if err != nil {
				t.Fatal(err)
			}
			sig, err := onnxio.Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if sig.Mode != onnxio.Stacked {
				t.Fatalf("the model runs %s (%s); the test wants one that stacks", sig.Mode, sig.Why)
			}
			_, err = onnxio.NewCodec(sig, tt.pad)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			// Without padding, nothing is cut back: every model is served.
			if _, err := onnxio.NewCodec(sig, nil); err != nil {
				t.Fatalf("without padding: %v", err)
			}
		})
	}
}

func TestAppendJSONRendersOutputs(t *testing.T) {
	mlp := codec(t, onnxtest.MLP, nil)
	out, err := onnxio.EncodeOutput(mlp.Signature(), []onnxio.Tensor{{DType: onnxio.Float32, Shape: []int64{3}, Data: f32bytes(0.25, float32(math.NaN()), 1e-7)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := mlp.AppendJSON([]byte("x:"), out)
	if err != nil || string(got) != `x:[0.25,null,1e-07]` {
		t.Fatalf("got %s, %v", got, err)
	}

	multi := codec(t, onnxtest.Multi, nil)
	out, err = onnxio.EncodeOutput(multi.Signature(), []onnxio.Tensor{
		{DType: onnxio.Float32, Shape: []int64{2, 2}, Data: f32bytes(1, 2, 3, 4.5)},
		{DType: onnxio.Int64, Shape: []int64{}, Data: i64bytes(-3)},
		{DType: onnxio.Float64, Shape: []int64{}, Data: f64bytes(0.1)},
		{DType: onnxio.Bool, Shape: []int64{2}, Data: []byte{1, 0}},
		{DType: onnxio.Int32, Shape: []int64{}, Data: i32bytes(7)},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = multi.AppendJSON(nil, out)
	want := `{"pooled":[[1,2],[3,4.5]],"count":-3,"scaled":0.1,"above":[true,false],"next":7}`
	if err != nil || string(got) != want {
		t.Fatalf("got %s, %v; want %s", got, err, want)
	}
	var asMap map[string]map[string]any
	if err := msgpack.Unmarshal(out, &asMap); err != nil || asMap["count"]["dtype"] != "int64" {
		t.Fatalf("msgpack output %v (%v): want a map of tensor maps", asMap, err)
	}
	if _, err := multi.AppendJSON(nil, []byte{0x93, 1, 2, 3}); err == nil {
		t.Fatal("AppendJSON accepted an array")
	}
}

// An item that declares more tensors than it holds is refused having
// allocated about its own size, not the header's count of tensors: from
// Redis, an item of 8 MB declaring 8 million tensors made a worker
// allocate 57 times that.
func TestDecodeItemAllocatesForTheTensorsItHolds(t *testing.T) {
	const declared = 1 << 20
	item := binary.BigEndian.AppendUint32([]byte{0xdd}, declared) // array 32
	item = append(item, make([]byte, declared)...)
	allocated := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := onnxio.DecodeItem(item); err == nil {
				b.Fatal("an item of zero bytes for tensors was accepted")
			}
		}
	}).AllocedBytesPerOp()
	if allocated > int64(len(item)) {
		t.Errorf("DecodeItem of a %d-byte item declaring %d tensors allocated %d bytes; want less than the item's size", len(item), declared, allocated)
	}
}

func TestDecodeItemRefusesCorruptItems(t *testing.T) {
	good := onnxio.EncodeItem(multiItem)
	if _, err := onnxio.DecodeItem(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{
		nil, {0xc0}, good[:len(good)-1], append(append([]byte{}, good...), 0),
		mustMsgpack(t, []any{[]any{1, []int{2}, f32bytes(1)}}),                  // data too short
		mustMsgpack(t, []any{[]any{200, []int{1}, []byte{1}}}),                  // unknown dtype
		mustMsgpack(t, []any{[]any{1, []int{-1}, f32bytes(1)}}),                 // negative dimension
		mustMsgpack(t, []any{[]any{1, []int{1}, "not bytes!"}}),                 // string data
		mustMsgpack(t, []any{[]any{9, []int{1}, []byte{7}}}),                    // bool byte 7
		mustMsgpack(t, []any{[]any{1, []int64{1 << 62, 1 << 62}, f32bytes(1)}}), // overflowing shape
	} {
		if _, err := onnxio.DecodeItem(bad); err == nil {
			t.Errorf("DecodeItem(%x) accepted", bad)
		}
	}
}
