package onnxio_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxio"
	"github.com/streamer-dev/streamer/model/onnx/onnxpb"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

func signature(t testing.TB, name string) *onnxio.Signature {
	t.Helper()
	data, err := onnxtest.Build(name)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := onnxio.Parse(data)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return sig
}

// ports writes a signature's ports as "name dtype shape item-shape batched".
func ports(ps []onnxio.Port) []string {
	var out []string
	for _, p := range ps {
		b := "unbatched"
		if p.Batched {
			b = "batched"
		}
		out = append(out, p.Name+" "+p.DType.String()+" "+p.Shape.String()+" "+p.ItemShape.String()+" "+b)
	}
	return out
}

func TestParseReadsTheModelsInterface(t *testing.T) {
	tests := []struct {
		model   string
		inputs  []string
		outputs []string
		mode    onnxio.BatchMode
		why     string
	}{
		{onnxtest.MLP, []string{"features float32 [batch, 4] [4] batched"}, []string{"probs float32 [batch, 3] [3] batched"}, onnxio.Stacked, ""},
		{onnxtest.Demo, []string{"features float32 [batch, 4] [4] batched"}, []string{"probs float32 [batch, 3] [3] batched"}, onnxio.Stacked, ""},
		{onnxtest.Seq, []string{"x float32 [batch, seq, 3] [seq, 3] batched"}, []string{"y float32 [batch, seq, 4] [seq, 4] batched"}, onnxio.Stacked, ""},
		{onnxtest.Multi,
			[]string{"ids int64 [batch, seq] [seq] batched", "mask bool [batch, seq] [seq] batched", "scale float64 [] [] unbatched", "offset int32 [batch] [] batched"},
			[]string{"pooled float32 [batch, 4] [4] batched", "count int64 [batch] [] batched", "scaled float64 [batch] [] batched", "above bool [batch] [] batched", "next int32 [batch] [] batched"},
			onnxio.Stacked, ""},
		{onnxtest.Fixed, []string{"x float32 [1, 4] [4] batched"}, []string{"y float32 [1, 2] [2] batched", "energy float32 [] [] unbatched"}, onnxio.OneByOne, "batch axis is fixed at 1"},
		{onnxtest.Dtypes, dtypesPorts(false), dtypesPorts(true), onnxio.Stacked, ""},
	}
	if got := dtypesPorts(false); len(got) != 12 || got[0] != "in_fp16 float16 [batch, n_fp16] [n_fp16] batched" || got[11] != "in_bool bool [batch, n_bool] [n_bool] batched" {
		t.Fatalf("the dtypes model's inputs are listed as %q; want 12, from in_fp16 to in_bool", got)
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			sig := signature(t, tt.model)
			if got := ports(sig.Inputs); strings.Join(got, "; ") != strings.Join(tt.inputs, "; ") {
				t.Errorf("inputs:\n got %q\nwant %q", got, tt.inputs)
			}
			if got := ports(sig.Outputs); strings.Join(got, "; ") != strings.Join(tt.outputs, "; ") {
				t.Errorf("outputs:\n got %q\nwant %q", got, tt.outputs)
			}
			if sig.Mode != tt.mode || !strings.Contains(sig.Why, tt.why) {
				t.Errorf("mode %s (%q), want %s (%q)", sig.Mode, sig.Why, tt.mode, tt.why)
			}
			if sig.IRVersion != 8 || sig.Opset != 17 {
				t.Errorf("ir_version %d opset %d, want 8 and 17", sig.IRVersion, sig.Opset)
			}
		})
	}
}

// dtypesPorts writes the dtypes model's inputs (or outputs) as ports does,
// one per served dtype: "in_fp16 float16 [batch, n_fp16] [n_fp16] batched".
func dtypesPorts(outputs bool) []string {
	var out []string
	for _, c := range onnxtest.DtypeCases() {
		name := c.Input
		if outputs {
			name = c.Output
		}
		out = append(out, fmt.Sprintf("%s %s [batch, %s] [%s] batched", name, c.DType, c.Axis, c.Axis))
	}
	return out
}

// handModel builds a one-node model with the given interface.
func handModel(inputs, outputs []*onnxpb.ValueInfoProto, weights ...*onnxpb.TensorProto) []byte {
	m := &onnxpb.ModelProto{
		IrVersion:   8,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: 17}},
		Graph: &onnxpb.GraphProto{
			Name:        "hand",
			Node:        []*onnxpb.NodeProto{{OpType: "Identity", Input: []string{inputs[0].GetName()}, Output: []string{outputs[0].GetName()}}},
			Input:       inputs,
			Output:      outputs,
			Initializer: weights,
		},
	}
	data, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return data
}

func tensorValue(name string, elem onnxpb.TensorProto_DataType, dims ...any) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		switch d := d.(type) {
		case int:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(d)}})
		case string:
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d}})
		}
	}
	return &onnxpb.ValueInfoProto{Name: name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: int32(elem), Shape: shape}}}}
}

func TestParseHandlesOddInterfaces(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	t.Run("an output without batch axis makes items run one by one", func(t *testing.T) {
		sig, err := onnxio.Parse(handModel(
			[]*onnxpb.ValueInfoProto{tensorValue("x", f32, "n", 2)},
			[]*onnxpb.ValueInfoProto{tensorValue("y", f32, "n", 2), tensorValue("total", f32)}))
		if err != nil {
			t.Fatal(err)
		}
		if sig.Mode != onnxio.OneByOne || !strings.Contains(sig.Why, `output "total" has no batch axis`) {
			t.Fatalf("mode %s (%q), want one-by-one because of total", sig.Mode, sig.Why)
		}
	})
	t.Run("weights listed as inputs are not inputs", func(t *testing.T) {
		sig, err := onnxio.Parse(handModel(
			[]*onnxpb.ValueInfoProto{tensorValue("x", f32, "n", 2), tensorValue("w", f32, 2)},
			[]*onnxpb.ValueInfoProto{tensorValue("y", f32, "n", 2)},
			&onnxpb.TensorProto{Name: "w", Dims: []int64{2}, DataType: 1, RawData: make([]byte, 8)}))
		if err != nil {
			t.Fatal(err)
		}
		if len(sig.Inputs) != 1 || sig.Inputs[0].Name != "x" {
			t.Fatalf("inputs %v, want only x", ports(sig.Inputs))
		}
		// A caller who sends it is told why it is not taken, where it was
		// told only that the input is unknown.
		c, err := onnxio.NewCodec(sig, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = c.FromJSON([]byte(`{"x": [1, 2], "w": [3, 4]}`))
		if want := `input "w" has a value in the model file (a weight, listed among its inputs as some exporters list weights), and streamer serves the model with that value: it takes no other; the model's inputs are x (float32 [2])`; err == nil || err.Error() != want {
			t.Errorf("w sent: %v; want %q", err, want)
		}
		_, _, err = c.FromJSON([]byte(`{"x": [1, 2], "v": [3, 4]}`))
		if want := `unknown input "v"; the model's inputs are x (float32 [2])`; err == nil || err.Error() != want {
			t.Errorf("v sent: %v; want %q", err, want)
		}
	})
	t.Run("no batch axis at all", func(t *testing.T) {
		sig, err := onnxio.Parse(handModel(
			[]*onnxpb.ValueInfoProto{tensorValue("x", f32, 3)},
			[]*onnxpb.ValueInfoProto{tensorValue("y", f32, 3)}))
		if err != nil {
			t.Fatal(err)
		}
		if sig.Mode != onnxio.OneByOne || sig.Inputs[0].Batched || sig.Inputs[0].ItemShape.String() != "[3]" {
			t.Fatalf("got %s %v, want one-by-one with x taken whole", sig.Mode, ports(sig.Inputs))
		}
	})
}

func TestParseRefuses(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	sequence := &onnxpb.ValueInfoProto{Name: "s", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_SequenceType{SequenceType: &onnxpb.TypeProto_Opaque{}}}}
	noShape := &onnxpb.ValueInfoProto{Name: "x", Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: 1}}}}
	tests := []struct {
		name   string
		data   []byte
		want   string
		notONX bool
	}{
		{"empty file", nil, "not an ONNX model", true},
		{"text", []byte("# streamer\nThis is a README, not a model.\n"), "not an ONNX model", true},
		{"json", []byte(`{"inputs": [1, 2]}`), "not an ONNX model", true},
		{"sequence input", handModel([]*onnxpb.ValueInfoProto{sequence}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "n")}), `input "s": it is a sequence`, false},
		{"sequence output", handModel([]*onnxpb.ValueInfoProto{tensorValue("x", f32, "n")}, []*onnxpb.ValueInfoProto{sequence}), `output "s": it is a sequence; streamer serves dense tensors only (a classifier converted by sklearn-onnx answers its probabilities as a sequence of maps, unless converted with options={'zipmap': False}`, false},
		{"string input", handModel([]*onnxpb.ValueInfoProto{tensorValue("text", onnxpb.TensorProto_STRING, "n")}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "n")}), `input "text": element type string is not served`, false},
		{"bfloat16 output", handModel([]*onnxpb.ValueInfoProto{tensorValue("x", f32, "n")}, []*onnxpb.ValueInfoProto{tensorValue("y", onnxpb.TensorProto_BFLOAT16, "n")}), `output "y": element type bfloat16 is not served (streamer serves float16, float32`, false},
		{"complex64 input", handModel([]*onnxpb.ValueInfoProto{tensorValue("z", onnxpb.TensorProto_COMPLEX64, "n")}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "n")}), `input "z": element type complex64 is not served`, false},
		{"input axis declared 0 long", handModel([]*onnxpb.ValueInfoProto{tensorValue("x", f32, "batch", 0)}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "batch")}), `input "x": axis 1 is declared 0 long (dim_value 0)`, false},
		{"output axis declared 0 long", handModel([]*onnxpb.ValueInfoProto{tensorValue("x", f32, "batch", 2)}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "batch", 0)}), `output "y": axis 1 is declared 0 long`, false},
		{"input without shape", handModel([]*onnxpb.ValueInfoProto{noShape}, []*onnxpb.ValueInfoProto{tensorValue("y", f32, "n")}), `input "x": the model does not declare its shape`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := onnxio.Parse(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if errors.Is(err, onnxio.ErrNotONNX) != tt.notONX {
				t.Fatalf("errors.Is(%v, ErrNotONNX) = %v, want %v", err, !tt.notONX, tt.notONX)
			}
		})
	}
}

// The leading axis is taken for the batch axis only when the names of the
// axes agree; otherwise items run one by one, and a value whose leading
// axis is not the batch axis is taken whole.
func TestParseBatchesUnlessTheAxisNamesSayOtherwise(t *testing.T) {
	f32 := onnxpb.TensorProto_FLOAT
	in := func(vs ...*onnxpb.ValueInfoProto) []*onnxpb.ValueInfoProto { return vs }
	tests := []struct {
		name    string
		inputs  []*onnxpb.ValueInfoProto
		outputs []*onnxpb.ValueInfoProto
		mode    onnxio.BatchMode
		batched string // per input then output: b batched, w whole
		why     string
	}{
		{"one name throughout", in(tensorValue("x", f32, "batch", "seq"), tensorValue("m", f32, "batch", "seq")), in(tensorValue("y", f32, "batch")), onnxio.Stacked, "bbb", ""},
		{"unnamed axes", in(tensorValue("x", f32, "", 2)), in(tensorValue("y", f32, "", 2)), onnxio.Stacked, "bb", ""},
		{"an unnamed output axis", in(tensorValue("x", f32, "batch_size", 2)), in(tensorValue("y", f32, "", 2)), onnxio.Stacked, "bb", ""},
		{"time-major input", in(tensorValue("x", f32, "seq", "batch", 2)), in(tensorValue("y", f32, "seq", "batch", 2)), onnxio.OneByOne, "ww", `input "x"'s axis 1 is named batch, but its leading axis is seq`},
		{"N inside", in(tensorValue("x", f32, "C", "N")), in(tensorValue("y", f32, "C", "N")), onnxio.OneByOne, "ww", "axis 1 is named N"},
		// A table beside the batched input: named otherwise than the batch
		// axis, it is taken whole.
		{"a table beside the batch", in(tensorValue("x", f32, "batch", 2), tensorValue("table", f32, "vocab", 4)), in(tensorValue("y", f32, "batch", 4)), onnxio.Stacked, "bwb", ""},
		// Names an exporter made up say nothing: these batch as before.
		{"names PyTorch made up", in(tensorValue("x", f32, "x_dynamic_axes_1", 2), tensorValue("m", f32, "m_dynamic_axes_1", 2)), in(tensorValue("y", f32, "Addoutput_dim_0", 2)), onnxio.Stacked, "bbb", ""},
		{"a made-up output name", in(tensorValue("x", f32, "batch", 2)), in(tensorValue("y", f32, "Gemmoutput_dim_0", 2)), onnxio.Stacked, "bb", ""},
		{"names TensorFlow made up", in(tensorValue("x", f32, "unk__7", 2)), in(tensorValue("y", f32, "unk__9", 2)), onnxio.Stacked, "bb", ""},
		{"inputs of other names, none like a batch", in(tensorValue("x", f32, "n", 2), tensorValue("m", f32, "len", 2)), in(tensorValue("y", f32, "n", 2)), onnxio.Stacked, "bbb", ""},
		{"transposed output", in(tensorValue("x", f32, "batch", 3)), in(tensorValue("y", f32, "three", "batch")), onnxio.OneByOne, "bw", `output "y" leads with axis three`},
		{"transposed output of unnamed inputs", in(tensorValue("x", f32, "", 3)), in(tensorValue("y", f32, "three", "batch")), onnxio.OneByOne, "bw", `output "y" leads with axis three`},
		{"output of another leading name", in(tensorValue("x", f32, "batch", 3)), in(tensorValue("y", f32, "seq", 3)), onnxio.OneByOne, "bw", `output "y" leads with axis seq`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig, err := onnxio.Parse(handModel(tt.inputs, tt.outputs))
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, p := range append(append([]onnxio.Port(nil), sig.Inputs...), sig.Outputs...) {
				got += map[bool]string{true: "b", false: "w"}[p.Batched]
			}
			if sig.Mode != tt.mode || got != tt.batched || !strings.Contains(sig.Why, tt.why) {
				t.Fatalf("mode %s, batched %s, why %q; want %s, %s, %q", sig.Mode, got, sig.Why, tt.mode, tt.batched, tt.why)
			}
		})
	}
}
