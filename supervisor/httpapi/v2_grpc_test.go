package httpapi

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/streamer-dev/streamer/supervisor"
	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// typedContents are v2DatatypeCases' tensors as InferTensorContents; FP16
// has no field.
var typedContents = map[string]*pb.InferTensorContents{
	"BOOL":   {BoolContents: []bool{true, false, true}},
	"UINT8":  {UintContents: []uint32{0, 7, 255}},
	"UINT16": {UintContents: []uint32{0, 258, 65535}},
	"UINT32": {UintContents: []uint32{0, 16909060, 4294967295}},
	"UINT64": {Uint64Contents: []uint64{0, 1, math.MaxUint64}},
	"INT8":   {IntContents: []int32{-128, -1, 127}},
	"INT16":  {IntContents: []int32{-32768, -2, 32767}},
	"INT32":  {IntContents: []int32{math.MinInt32, -3, math.MaxInt32}},
	"INT64":  {Int64Contents: []int64{math.MinInt64, -4, math.MaxInt64}},
	"FP32":   {Fp32Contents: []float32{0.1, -1e-7, math.MaxFloat32}},
	"FP64":   {Fp64Contents: []float64{0.1, 1e300, -0.5}},
	"BYTES":  {BytesContents: [][]byte{[]byte("hello"), {}, []byte("naïve \"q\"\né😀")}},
}

func grpcCall(t *testing.T, model TensorModel, backend *fakeBackend, req *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	t.Helper()
	return NewGRPC(newV2(model, backend)).ModelInfer(context.Background(), req)
}

func input(name, datatype string, shape ...int64) *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype, Shape: shape}
}

// TestGRPCEveryDatatype sends a batched tensor of every datatype as raw
// contents and, but for FP16, as typed contents: the model's rows hold the
// binary layout, and the answer gives it back raw, stacked.
func TestGRPCEveryDatatype(t *testing.T) {
	for _, tc := range v2DatatypeCases {
		n := int64(len(jsonValues(t, tc.in)))
		for _, typed := range []bool{false, true} {
			contents := typedContents[tc.datatype]
			if typed && contents == nil {
				continue
			}
			model := echoModel(spec("t", tc.datatype, true, -1))
			req := &pb.ModelInferRequest{ModelName: "m", Id: "r1", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", tc.datatype, n)}}
			if typed {
				req.Inputs[0].Contents = contents
			} else {
				req.RawInputContents = [][]byte{tc.bin}
			}
			resp, err := grpcCall(t, model, nil, req)
			if err != nil {
				t.Fatalf("%s typed %v: %v", tc.datatype, typed, err)
			}
			if got := rowsData(model.itemRows(), "t"); !bytes.Equal(got, tc.bin) || len(model.itemRows()) != int(n) {
				t.Errorf("%s typed %v: %d rows holding % x, want %d holding % x", tc.datatype, typed, len(model.itemRows()), got, n, tc.bin)
			}
			if resp.ModelName != "m" || resp.Id != "r1" || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 {
				t.Fatalf("%s typed %v: answer %v", tc.datatype, typed, resp)
			}
			out := resp.Outputs[0]
			if out.Name != "t" || out.Datatype != tc.datatype || !slices.Equal(out.Shape, []int64{n}) || !bytes.Equal(resp.RawOutputContents[0], tc.bin) {
				t.Errorf("%s typed %v: output %v % x, want t [%d] % x", tc.datatype, typed, out, resp.RawOutputContents[0], n, tc.bin)
			}
		}
	}
}

// TestGRPCUnbatchedInputsAndRequestedOutputs: an unbatched input goes whole
// to every row; outputs asked for come in their order, alone.
func TestGRPCUnbatchedInputsAndRequestedOutputs(t *testing.T) {
	model := &tensorEcho{meta: ModelMetadata{Name: "m", Inputs: []TensorSpec{spec("x", "INT32", true, -1, 2), spec("k", "FP32", false)},
		Outputs: []TensorSpec{spec("x", "INT32", true, -1, 2), spec("k", "FP32", false)}}}
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x", "INT32", 3, 2), input("k", "FP32")},
		RawInputContents: [][]byte{le32(1, 2, 3, 4, 5, 6), f32s(0.5)},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "k"}, {Name: "x"}}}
	resp, err := grpcCall(t, model, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	rows := model.itemRows()
	if len(rows) != 3 || !bytes.Equal(rowsData(rows, "k"), f32s(0.5, 0.5, 0.5)) || !bytes.Equal(rows[1][0].Data, le32(3, 4)) {
		t.Errorf("rows %v, want 3 each with k whole", rows)
	}
	if len(resp.Outputs) != 2 || resp.Outputs[0].Name != "k" || resp.Outputs[1].Name != "x" {
		t.Fatalf("outputs %v, want k then x", resp.Outputs)
	}
	if !slices.Equal(resp.Outputs[0].Shape, []int64{3}) || !bytes.Equal(resp.RawOutputContents[0], f32s(0.5, 0.5, 0.5)) {
		t.Errorf("k: %v % x, want the rows' k stacked", resp.Outputs[0], resp.RawOutputContents[0])
	}
	if !slices.Equal(resp.Outputs[1].Shape, []int64{3, 2}) || !bytes.Equal(resp.RawOutputContents[1], le32(1, 2, 3, 4, 5, 6)) {
		t.Errorf("x: %v % x", resp.Outputs[1], resp.RawOutputContents[1])
	}
}

// TestGRPCRefusesContents: typed contents out of their datatype's range, in
// another datatype's field, or for FP16, are refused naming the input.
func TestGRPCRefusesContents(t *testing.T) {
	tests := []struct {
		datatype string
		contents *pb.InferTensorContents
		want     string
	}{
		{"INT8", &pb.InferTensorContents{IntContents: []int32{1, 128, 0}}, "element 1 (128) is out of the range of INT8"},
		{"INT16", &pb.InferTensorContents{IntContents: []int32{-32769, 0, 0}}, "element 0 (-32769) is out of the range of INT16"},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 0, 256}}, "element 2 (256) is out of the range of UINT8"},
		{"UINT16", &pb.InferTensorContents{UintContents: []uint32{65536, 0, 0}}, "element 0 (65536) is out of the range of UINT16"},
		{"FP16", &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3}}, "FP16 has no field in contents"},
		{"FP64", &pb.InferTensorContents{Fp32Contents: []float32{1, 2, 3}}, "takes its elements in contents.fp64_contents, but 3 came in contents.fp32_contents"},
		{"BYTES", &pb.InferTensorContents{BytesContents: [][]byte{{1}}}, "contents.bytes_contents has 1 element, shape [3] has 3"},
	}
	for _, tt := range tests {
		req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", tt.datatype, 3)}}
		req.Inputs[0].Contents = tt.contents
		_, err := grpcCall(t, echoModel(spec("t", tt.datatype, true, -1)), nil, req)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `input "t"`) || !strings.Contains(st.Message(), tt.want) {
			t.Errorf("%s %v: %v, want INVALID_ARGUMENT naming input \"t\" and saying %q", tt.datatype, tt.contents, err, tt.want)
		}
	}
}

// TestGRPCCodes: the backend's errors come back with the gRPC code of
// their HTTP status, and an item's error names its row.
func TestGRPCCodes(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
		want string
	}{
		{supervisor.ErrOverloaded, codes.Unavailable, "overloaded"},
		{supervisor.ErrUnavailable, codes.Unavailable, ""},
		{supervisor.ErrShuttingDown, codes.Unavailable, ""},
		{supervisor.ErrDeadline, codes.DeadlineExceeded, ""},
		{supervisor.ErrModelFailed, codes.Internal, ""},
		{&supervisor.ItemError{Index: 1, Err: supervisor.ErrModel}, codes.InvalidArgument, "row 1"},
	}
	for _, tt := range tests {
		backend := &fakeBackend{ready: true, submit: func(context.Context, supervisor.Request) (*answer, error) { return nil, tt.err }}
		req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", "INT8", 2)}, RawInputContents: [][]byte{{1, 2}}}
		_, err := grpcCall(t, echoModel(spec("t", "INT8", true, -1)), backend, req)
		st, _ := status.FromError(err)
		if st.Code() != tt.code || !strings.Contains(st.Message(), tt.want) {
			t.Errorf("%v: %v, want %s saying %q", tt.err, err, tt.code, tt.want)
		}
	}
}

// TestGRPCWithoutModel: a server with no tensor model answers the model
// calls NOT_FOUND, and the health calls as ever.
func TestGRPCWithoutModel(t *testing.T) {
	g := NewGRPC(New(Config{Backend: &fakeBackend{ready: true}}))
	ctx := context.Background()
	if r, err := g.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.Ready {
		t.Errorf("ServerReady: %v %v", r, err)
	}
	_, err := g.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "m"})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), "no model is served") {
		t.Errorf("ModelMetadata: %v, want NOT_FOUND", err)
	}
}

// TestGRPCProtocolNumbers pins the names and numbers the protocol gives
// the fields clients fill and read: a renumbered field would still pass
// every test here, with our own client, and fail every other client.
func TestGRPCProtocolNumbers(t *testing.T) {
	want := map[string]int32{
		"inference.ModelInferRequest.model_name":                      1,
		"inference.ModelInferRequest.model_version":                   2,
		"inference.ModelInferRequest.id":                              3,
		"inference.ModelInferRequest.parameters":                      4,
		"inference.ModelInferRequest.inputs":                          5,
		"inference.ModelInferRequest.outputs":                         6,
		"inference.ModelInferRequest.raw_input_contents":              7,
		"inference.ModelInferRequest.InferInputTensor.name":           1,
		"inference.ModelInferRequest.InferInputTensor.datatype":       2,
		"inference.ModelInferRequest.InferInputTensor.shape":          3,
		"inference.ModelInferRequest.InferInputTensor.parameters":     4,
		"inference.ModelInferRequest.InferInputTensor.contents":       5,
		"inference.ModelInferRequest.InferRequestedOutputTensor.name": 1,
		"inference.ModelInferResponse.model_name":                     1,
		"inference.ModelInferResponse.model_version":                  2,
		"inference.ModelInferResponse.id":                             3,
		"inference.ModelInferResponse.outputs":                        5,
		"inference.ModelInferResponse.raw_output_contents":            6,
		"inference.ModelInferResponse.InferOutputTensor.shape":        3,
		"inference.InferTensorContents.bool_contents":                 1,
		"inference.InferTensorContents.int_contents":                  2,
		"inference.InferTensorContents.int64_contents":                3,
		"inference.InferTensorContents.uint_contents":                 4,
		"inference.InferTensorContents.uint64_contents":               5,
		"inference.InferTensorContents.fp32_contents":                 6,
		"inference.InferTensorContents.fp64_contents":                 7,
		"inference.InferTensorContents.bytes_contents":                8,
		"inference.InferParameter.bool_param":                         1,
		"inference.InferParameter.int64_param":                        2,
		"inference.InferParameter.string_param":                       3,
		"inference.InferParameter.double_param":                       4,
		"inference.InferParameter.uint64_param":                       5,
		"inference.ModelMetadataResponse.platform":                    3,
		"inference.ModelMetadataResponse.inputs":                      4,
		"inference.ModelMetadataResponse.TensorMetadata.shape":        3,
		"inference.ServerMetadataResponse.extensions":                 3,
	}
	for name, number := range want {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := d.(protoreflect.FieldDescriptor).Number(); int32(got) != number {
			t.Errorf("%s is field %d, the protocol's is %d", name, got, number)
		}
	}
	if sd, err := protoregistry.GlobalFiles.FindDescriptorByName("inference.GRPCInferenceService"); err != nil || sd.(protoreflect.ServiceDescriptor).Methods().ByName("ModelInfer") == nil {
		t.Errorf("no inference.GRPCInferenceService with ModelInfer: %v", err)
	}
}

// BenchmarkGRPCInfer measures a ModelInfer call's work on the server, in
// process, beside BenchmarkV2Infer's cases: the request decoded from its
// wire form, run on the echoing backend, and the answer encoded, for 8
// rows of 16 FP32 as raw and as typed contents, and one sentence as BYTES.
func BenchmarkGRPCInfer(b *testing.B) {
	const rows, width = 8, 16
	fp32 := make([]float32, rows*width)
	for i := range fp32 {
		fp32[i] = float32(i)*0.25 - 3
	}
	sentence := []byte("The quick brown fox jumps over the [MASK] dog.")
	raw := &pb.ModelInferRequest{ModelName: "m", Id: "b1", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x", "FP32", rows, width)},
		RawInputContents: [][]byte{f32s(fp32...)}}
	typed := &pb.ModelInferRequest{ModelName: "m", Id: "b1", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x", "FP32", rows, width)}}
	typed.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: fp32}
	bytesReq := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("x", "BYTES", 1)},
		RawInputContents: [][]byte{bytesElements(string(sentence))}}
	for _, bc := range []struct {
		name  string
		model *passModel
		req   *pb.ModelInferRequest
	}{
		{"raw/fp32-8x16", newPassModel("FP32", width), raw},
		{"typed/fp32-8x16", newPassModel("FP32", width), typed},
		{"raw/bytes-1", newPassModel("BYTES"), bytesReq},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := NewGRPC(New(Config{Backend: &fakeBackend{}, Tensors: bc.model}))
			wire, err := proto.Marshal(bc.req)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.SetBytes(int64(len(wire)))
			for b.Loop() {
				req := new(pb.ModelInferRequest)
				if err := proto.Unmarshal(wire, req); err != nil {
					b.Fatal(err)
				}
				resp, err := g.ModelInfer(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := proto.Marshal(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestGRPCCodecBoundsBytesElements: a call whose contents hold more BYTES
// elements than the body limit / 12 is refused before it is decoded; one
// at the bound is decoded whole.
func TestGRPCCodecBoundsBytesElements(t *testing.T) {
	codec := NewGRPC(New(Config{Backend: &fakeBackend{}, MaxBody: 1200})).Codec()
	request := func(n int) []byte {
		req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("a", "BYTES", 1), input("b", "BYTES", int64(n-1))}}
		req.Inputs[0].Contents = &pb.InferTensorContents{BytesContents: [][]byte{{}}}
		req.Inputs[1].Contents = &pb.InferTensorContents{BytesContents: make([][]byte, n-1)}
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return wire
	}
	got := new(pb.ModelInferRequest)
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(request(100))}, got); err != nil || len(got.Inputs[1].Contents.BytesContents) != 99 {
		t.Fatalf("100 elements, the bound: %v, %d decoded", err, len(got.GetInputs()[1].GetContents().GetBytesContents()))
	}
	refused := new(pb.ModelInferRequest)
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(request(101))}, refused); err != nil {
		t.Fatalf("101 elements: %v; want the refusal left in the request, for ModelInfer to answer", err)
	}
	g := NewGRPC(New(Config{Backend: &fakeBackend{}, MaxBody: 1200, Tensors: echoModel(spec("b", "BYTES", true, -1))}))
	_, err := g.ModelInfer(context.Background(), refused)
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "101 BYTES elements in contents, over the 100") ||
		len(refused.Inputs) != 0 {
		t.Errorf("101 elements: %v, %d inputs decoded; want RESOURCE_EXHAUSTED naming both counts, and nothing decoded", err, len(refused.Inputs))
	}
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, new(pb.ModelInferRequest)); err == nil {
		t.Error("a message that is not protobuf was decoded")
	}
}

// TestGRPCRefusesNegativeAxesAsREST: a negative axis is refused in the
// REST route's words, whichever form the data takes.
func TestGRPCRefusesNegativeAxesAsREST(t *testing.T) {
	for _, typed := range []bool{false, true} {
		req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", "INT8", -1, 2)}}
		if typed {
			req.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1, 2}}
		} else {
			req.RawInputContents = [][]byte{{1, 2}}
		}
		_, err := grpcCall(t, echoModel(spec("t", "INT8", true, -1, 2)), nil, req)
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `input "t": "shape" axis 0 is -1; a request's shape has no variable axes`) {
			t.Errorf("typed %v: %v", typed, err)
		}
	}
	backend := &fakeBackend{ready: true, submit: func(context.Context, supervisor.Request) (*answer, error) { return nil, supervisor.ErrShuttingDown }}
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", "INT8", 1)}, RawInputContents: [][]byte{{1}}}
	_, err := grpcCall(t, echoModel(spec("t", "INT8", true, -1)), backend, req)
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || st.Message() != ShuttingDown {
		t.Errorf("draining: %v, want UNAVAILABLE %q", err, ShuttingDown)
	}
}

// TestGRPCCodecBoundsEntries: a call of more inputs, outputs and raw
// contents together than maxTensorEntries, or of more parameters, is
// refused before it is decoded: empty entries, 2 bytes each on the wire,
// decode to an object each.
func TestGRPCCodecBoundsEntries(t *testing.T) {
	codec := NewGRPC(New(Config{Backend: &fakeBackend{}})).Codec()
	many := func(f func(req *pb.ModelInferRequest)) []byte {
		req := &pb.ModelInferRequest{ModelName: "m"}
		f(req)
		wire, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return wire
	}
	half := maxTensorEntries / 2
	tests := []struct {
		name string
		wire []byte
		want string // "" for a call decoded
	}{
		{"inputs and outputs at the bound", many(func(r *pb.ModelInferRequest) {
			r.Inputs = make([]*pb.ModelInferRequest_InferInputTensor, half)
			for i := range r.Inputs {
				r.Inputs[i] = &pb.ModelInferRequest_InferInputTensor{}
			}
			r.Outputs = make([]*pb.ModelInferRequest_InferRequestedOutputTensor, half)
			for i := range r.Outputs {
				r.Outputs[i] = &pb.ModelInferRequest_InferRequestedOutputTensor{}
			}
		}), ""},
		{"one more raw entry", many(func(r *pb.ModelInferRequest) {
			r.Inputs = make([]*pb.ModelInferRequest_InferInputTensor, half)
			for i := range r.Inputs {
				r.Inputs[i] = &pb.ModelInferRequest_InferInputTensor{}
			}
			r.RawInputContents = make([][]byte, half+1)
		}), "4097 entries of inputs, outputs and raw_input_contents, over the 4096"},
		{"parameters over the bound", many(func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{}
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Parameters: map[string]*pb.InferParameter{}}}
			for i := range half + 1 {
				r.Parameters[strconv.Itoa(i)] = &pb.InferParameter{}
				r.Outputs[0].Parameters[strconv.Itoa(i)] = &pb.InferParameter{}
			}
		}), "4098 parameters, over the 4096"},
	}
	for _, tt := range tests {
		req := new(pb.ModelInferRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.wire)}, req); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		msg, refused := codecRefusal(req)
		switch {
		case tt.want == "" && refused:
			t.Errorf("%s: refused (%s), want it decoded", tt.name, msg)
		case tt.want != "" && (!refused || !strings.Contains(msg, tt.want)):
			t.Errorf("%s: refusal %q, want one saying %q", tt.name, msg, tt.want)
		}
	}
}
