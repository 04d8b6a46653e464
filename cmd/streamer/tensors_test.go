package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

func TestV2ModelNameFollowsTheModel(t *testing.T) {
	tests := []struct {
		name string
		o    serveOptions
		want string
	}{
		{"echo", serveOptions{model: "echo"}, "echo"},
		{"sleep", serveOptions{model: "sleep:10ms,1ms"}, "sleep"},
		{"chaos", serveOptions{model: "chaos:reject=x"}, "chaos"},
		{"demo", serveOptions{model: "demo"}, "demo"},
		{"an ONNX file", serveOptions{model: "/models/resnet50.onnx"}, "resnet50"},
		{"an ONNX file in capitals", serveOptions{model: "models/Tiny.ONNX"}, "Tiny"},
		{"a plugin", serveOptions{plugin: "./bin/fillmask"}, "fillmask"},
		{"--model-name wins", serveOptions{model: "demo", v2Name: "iris"}, "iris"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.device = "cpu"
			spec, err := tt.o.spec("")
			if err != nil {
				t.Fatal(err)
			}
			got, err := tt.o.v2ModelName(spec)
			if err != nil || got != tt.want {
				t.Errorf("v2ModelName = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"a/b", "two words", "tab\there", ".", ".."} {
		o := serveOptions{model: "echo", device: "cpu", v2Name: bad}
		spec, err := o.spec("")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := o.v2ModelName(spec); err == nil || !strings.Contains(err.Error(), "--model-name") {
			t.Errorf("--model-name %q: %v, want it refused", bad, err)
		}
	}
}

// element is one BYTES element as the binary extension lays it out.
func element(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

func echoTensors(t *testing.T) httpapi.TensorModel {
	t.Helper()
	m, err := tensorsFor(builtin.EchoSpec(), httpapi.Generic{}, "echo")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBytesTensorsDescribeOneBytesInputAndOutput(t *testing.T) {
	meta := echoTensors(t).Metadata()
	got := fmt.Sprintf("%s %v %s %+v %+v", meta.Name, meta.Versions, meta.Platform, meta.Inputs, meta.Outputs)
	want := "echo [1] streamer_echo [{Name:input Datatype:BYTES Shape:[-1] Batched:true}] [{Name:output Datatype:BYTES Shape:[-1] Batched:true}]"
	if got != want {
		t.Errorf("metadata\n got %s\nwant %s", got, want)
	}
}

// TestBytesItemIsTheJSONStringItem: an element is the item /predict makes
// of a JSON string, or a msgpack bin when it is no text.
func TestBytesItemIsTheJSONStringItem(t *testing.T) {
	m := echoTensors(t)
	for _, text := range []string{"", "a", "héllo, 世界", strings.Repeat("x", 40), strings.Repeat("y", 300), strings.Repeat("z", 70000)} {
		item, key, err := m.Item([]httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: element([]byte(text))}})
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := httpapi.Generic{}.FromJSON([]byte(fmt.Sprintf("%q", text)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(item, want) || key != "" {
			t.Errorf("%d bytes of text: item %x… key %q, want the JSON string's %x…", len(text), item[:min(8, len(item))], key, want[:min(8, len(want))])
		}
	}
	binary := []byte{0xff, 0x00, 0xfe}
	item, _, err := m.Item([]httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: element(binary)}})
	want, _ := msgpack.Marshal(binary)
	if err != nil || !bytes.Equal(item, want) {
		t.Errorf("not UTF-8: item %x, %v; want msgpack bin %x", item, err, want)
	}
}

func TestBytesItemRefuses(t *testing.T) {
	m := echoTensors(t)
	tests := []struct {
		name   string
		inputs []httpapi.Tensor
		want   string
	}{
		{"another datatype", []httpapi.Tensor{{Name: "input", Datatype: "FP32", Shape: []int64{}, Data: []byte{0, 0, 0, 0}}}, `input "input": want datatype BYTES; got FP32`},
		{"rows of several elements", []httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{2}, Data: append(element([]byte("a")), element([]byte("b"))...)}}, `input "input": want one element per item (shape [-1]); got rows of shape [2]`},
		{"another name", []httpapi.Tensor{{Name: "text", Datatype: "BYTES", Shape: []int64{}, Data: element(nil)}}, `the model's one input is "input"`},
		{"no input", nil, "got 0 inputs"},
		{"a short length", []httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: []byte{1, 0}}}, "no 4-byte length"},
		{"a length past the data", []httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: []byte{9, 0, 0, 0, 'a'}}}, "holds 1 bytes after a length of 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := m.Item(tt.inputs); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestBytesOutputsAreTheAnswersBytesOrJSON(t *testing.T) {
	m := echoTensors(t)
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name   string
		answer []byte
		want   string
	}{
		{"a str", mp("héllo"), "héllo"},
		{"a bin", mp([]byte{0xff, 0}), "\xff\x00"},
		{"an empty str", mp(""), ""},
		{"a number", mp(42), "42"},
		{"a map", mp(map[string]any{"label": "cat"}), `{"label":"cat"}`},
		{"an array", mp([]any{1, "a", true, nil}), `[1,"a",true,null]`},
		{"nil", mp(nil), "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs, err := m.Outputs(tt.answer)
			if err != nil {
				t.Fatal(err)
			}
			want := httpapi.Tensor{Name: "output", Datatype: "BYTES", Shape: []int64{}, Data: element([]byte(tt.want))}
			if len(outs) != 1 || fmt.Sprint(outs[0]) != fmt.Sprint(want) {
				t.Errorf("outputs %+v, want %+v", outs, want)
			}
		})
	}
	for _, bad := range [][]byte{nil, {0xa5, 'a'}, append(mp("a"), 0), {0xc1}} {
		if _, err := m.Outputs(bad); err == nil || !strings.Contains(err.Error(), "model output") {
			t.Errorf("Outputs(%x) = %v, want a model output error", bad, err)
		}
	}
}

// TestONNXTensorsCarryTheModel: the adapter hands onnxio's view through
// unchanged, and its items are the codec's.
func TestONNXTensorsCarryTheModel(t *testing.T) {
	spec, err := load.Parse("demo", onnx.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	codec, _, err := codecFor(spec, "demo")
	if err != nil {
		t.Fatal(err)
	}
	m, err := tensorsFor(spec, codec, "demo")
	if err != nil {
		t.Fatal(err)
	}
	meta := m.Metadata()
	got := fmt.Sprintf("%s %v %s %+v %+v", meta.Name, meta.Versions, meta.Platform, meta.Inputs, meta.Outputs)
	want := "demo [1] onnxruntime_onnx [{Name:features Datatype:FP32 Shape:[-1 4] Batched:true}] [{Name:probs Datatype:FP32 Shape:[-1 3] Batched:true}]"
	if got != want {
		t.Errorf("metadata\n got %s\nwant %s", got, want)
	}
	data := make([]byte, 0, 16)
	for _, v := range []float32{5.1, 3.5, 1.4, 0.2} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	item, key, err := m.Item([]httpapi.Tensor{{Name: "features", Datatype: "FP32", Shape: []int64{4}, Data: data}})
	wantItem, wantKey, wantErr := codec.FromJSON([]byte(`[5.1, 3.5, 1.4, 0.2]`))
	if err != nil || wantErr != nil || !bytes.Equal(item, wantItem) || key != wantKey {
		t.Errorf("item %x %q %v; /predict's %x %q %v", item, key, err, wantItem, wantKey, wantErr)
	}
	if _, _, err := m.Item([]httpapi.Tensor{{Name: "features", Datatype: "FP64", Shape: []int64{4}, Data: data}}); err == nil ||
		!strings.Contains(err.Error(), `input "features": want datatype FP32; got FP64`) {
		t.Errorf("FP64 for FP32: %v", err)
	}
}

// FuzzBytesTensors: any element is taken and comes back through echo as it
// went; any answer is decoded or refused, never a panic.
func FuzzBytesTensors(f *testing.F) {
	for _, seed := range [][]byte{nil, []byte("a"), {0xff, 0}, []byte(strings.Repeat("é", 40)), {0xc0}, {0x92, 0x01, 0xa1, 'x'}, {0xc4, 0x05, 'a'}} {
		f.Add(seed)
	}
	m, err := tensorsFor(builtin.EchoSpec(), httpapi.Generic{}, "echo")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		item, _, err := m.Item([]httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: element(data)}})
		if err != nil {
			t.Fatalf("element %x refused: %v", data, err)
		}
		outs, err := m.Outputs(item) // echo answers the item itself
		if err != nil || len(outs) != 1 || !bytes.Equal(outs[0].Data, element(data)) {
			t.Fatalf("element %x came back as %+v, %v", data, outs, err)
		}
		_, _, _ = m.Item([]httpapi.Tensor{{Name: "input", Datatype: "BYTES", Shape: []int64{}, Data: data}})
		_, _ = m.Outputs(data)
	})
}
