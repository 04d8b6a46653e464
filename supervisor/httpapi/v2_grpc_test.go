package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
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
		{"INT8", &pb.InferTensorContents{IntContents: []int32{1, 128, 0}}, "element 1 is 128, which does not fit INT8"},
		{"INT16", &pb.InferTensorContents{IntContents: []int32{-32769, 0, 0}}, "element 0 is -32769, which does not fit INT16"},
		{"UINT8", &pb.InferTensorContents{UintContents: []uint32{0, 0, 256}}, "element 2 is 256, which does not fit UINT8"},
		{"UINT16", &pb.InferTensorContents{UintContents: []uint32{65536, 0, 0}}, "element 0 is 65536, which does not fit UINT16"},
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
		// Triton's calls (its grpc_service.proto and model_config.proto).
		"inference.ModelConfigRequest.name":                           1,
		"inference.ModelConfigRequest.version":                        2,
		"inference.ModelConfigResponse.config":                        1,
		"inference.ModelConfig.name":                                  1,
		"inference.ModelConfig.platform":                              2,
		"inference.ModelConfig.version_policy":                        3,
		"inference.ModelConfig.max_batch_size":                        4,
		"inference.ModelConfig.input":                                 5,
		"inference.ModelConfig.output":                                6,
		"inference.ModelConfig.dynamic_batching":                      11,
		"inference.ModelConfig.parameters":                            14,
		"inference.ModelVersionPolicy.latest":                         1,
		"inference.ModelVersionPolicy.Latest.num_versions":            1,
		"inference.ModelInput.name":                                   1,
		"inference.ModelInput.data_type":                              2,
		"inference.ModelInput.dims":                                   4,
		"inference.ModelOutput.name":                                  1,
		"inference.ModelOutput.data_type":                             2,
		"inference.ModelOutput.dims":                                  3,
		"inference.ModelDynamicBatching.max_queue_delay_microseconds": 2,
		"inference.ModelParameter.string_value":                       1,
		"inference.ModelStatisticsRequest.name":                       1,
		"inference.ModelStatisticsRequest.version":                    2,
		"inference.ModelStatisticsResponse.model_stats":               1,
		"inference.ModelStatistics.name":                              1,
		"inference.ModelStatistics.version":                           2,
		"inference.ModelStatistics.last_inference":                    3,
		"inference.ModelStatistics.inference_count":                   4,
		"inference.ModelStatistics.execution_count":                   5,
		"inference.ModelStatistics.inference_stats":                   6,
		"inference.ModelStatistics.batch_stats":                       7,
		"inference.InferStatistics.success":                           1,
		"inference.InferStatistics.fail":                              2,
		"inference.InferStatistics.queue":                             3,
		"inference.InferStatistics.compute_input":                     4,
		"inference.InferStatistics.compute_infer":                     5,
		"inference.InferStatistics.compute_output":                    6,
		"inference.InferStatistics.cache_hit":                         7,
		"inference.InferStatistics.cache_miss":                        8,
		"inference.InferBatchStatistics.batch_size":                   1,
		"inference.InferBatchStatistics.compute_input":                2,
		"inference.InferBatchStatistics.compute_infer":                3,
		"inference.InferBatchStatistics.compute_output":               4,
		"inference.StatisticDuration.count":                           1,
		"inference.StatisticDuration.ns":                              2,
		"inference.ModelStreamInferResponse.error_message":            1,
		"inference.ModelStreamInferResponse.infer_response":           2,
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
	dataTypes := []string{"TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16",
		"TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"}
	for number, name := range dataTypes {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("inference." + name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := d.(protoreflect.EnumValueDescriptor).Number(); int(got) != number {
			t.Errorf("DataType %s is %d, Triton's is %d", name, got, number)
		}
	}
	sd, err := protoregistry.GlobalFiles.FindDescriptorByName("inference.GRPCInferenceService")
	if err != nil {
		t.Fatalf("no inference.GRPCInferenceService: %v", err)
	}
	for _, method := range []protoreflect.Name{"ModelInfer", "ModelConfig", "ModelStatistics", "ModelStreamInfer"} {
		if sd.(protoreflect.ServiceDescriptor).Methods().ByName(method) == nil {
			t.Errorf("inference.GRPCInferenceService has no %s", method)
		}
	}
	stream := sd.(protoreflect.ServiceDescriptor).Methods().ByName("ModelStreamInfer")
	if stream == nil || !stream.IsStreamingClient() || !stream.IsStreamingServer() ||
		stream.Input().FullName() != "inference.ModelInferRequest" || stream.Output().FullName() != "inference.ModelStreamInferResponse" {
		t.Errorf("ModelStreamInfer is not Triton's: stream ModelInferRequest to stream ModelStreamInferResponse")
	}
}

// configOf is a ModelConfig answer read back into the REST route's
// answer, so that the two can be compared whole.
func configOf(c *pb.ModelConfig) tritonConfig {
	cfg := tritonConfig{Name: c.Name, Platform: c.Platform, MaxBatchSize: int(c.MaxBatchSize), Parameters: map[string]tritonArg{}}
	cfg.VersionPolicy.Latest.NumVersions = int(c.GetVersionPolicy().GetLatest().GetNumVersions())
	for _, in := range c.Input {
		cfg.Input = append(cfg.Input, tritonTensor{Name: in.Name, DataType: in.DataType.String(), Dims: in.Dims})
	}
	for _, out := range c.Output {
		cfg.Output = append(cfg.Output, tritonTensor{Name: out.Name, DataType: out.DataType.String(), Dims: out.Dims})
	}
	if b := c.GetDynamicBatching(); b != nil {
		cfg.DynamicBatching = &tritonBatching{MaxQueueDelayMicroseconds: int64(b.MaxQueueDelayMicroseconds)}
	}
	for key, p := range c.Parameters {
		cfg.Parameters[key] = tritonArg{StringValue: p.StringValue}
	}
	return cfg
}

// statsOf is a ModelStatistics answer read back into the REST route's
// answer, as configOf.
func statsOf(r *pb.ModelStatisticsResponse) tritonStats {
	duration := func(d *pb.StatisticDuration) tritonDuration {
		return tritonDuration{Count: d.GetCount(), NS: d.GetNs()}
	}
	stats := tritonStats{ModelStats: []tritonModelStats{}}
	for _, m := range r.ModelStats {
		out := tritonModelStats{Name: m.Name, Version: m.Version, LastInference: int64(m.LastInference),
			InferenceCount: m.InferenceCount, ExecutionCount: m.ExecutionCount, BatchStats: []tritonBatchStats{}, MemoryUsage: []struct{}{}}
		is, got := &out.InferenceStats, m.GetInferenceStats()
		is.Success, is.Fail, is.Queue = duration(got.GetSuccess()), duration(got.GetFail()), duration(got.GetQueue())
		is.ComputeInput, is.ComputeInfer, is.ComputeOutput = duration(got.GetComputeInput()), duration(got.GetComputeInfer()), duration(got.GetComputeOutput())
		is.CacheHit, is.CacheMiss = duration(got.GetCacheHit()), duration(got.GetCacheMiss())
		for _, b := range m.BatchStats {
			out.BatchStats = append(out.BatchStats, tritonBatchStats{BatchSize: int(b.BatchSize),
				ComputeInput: duration(b.ComputeInput), ComputeInfer: duration(b.ComputeInfer), ComputeOutput: duration(b.ComputeOutput)})
		}
		stats.ModelStats = append(stats.ModelStats, out)
	}
	return stats
}

// restAnswer is the JSON answer of GET path, decoded into v.
func restAnswer[T any](t *testing.T, h http.Handler, path string) T {
	t.Helper()
	rec := do(t, h, http.MethodGet, path, "", nil)
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET %s = %d %s (%v)", path, rec.Code, rec.Body, err)
	}
	return v
}

// TestGRPCConfigAndStatisticsAsREST: ModelConfig and ModelStatistics
// carry every fact of the REST routes' answers, for a batching model with
// a BYTES input, one with an unbatched input and one with no batch size;
// the statistics with no name are every model's, as GET
// /v2/models/stats's.
func TestGRPCConfigAndStatisticsAsREST(t *testing.T) {
	stats := supervisor.Stats{Answered: 8, Failed: 2, Expired: 2, Batches: 3, BatchSizes: []uint64{0, 1, 0, 2}}
	stats.Latency.EndToEnd = supervisor.Histogram{Counts: []uint64{5, 2}, SumSeconds: 0.5}
	stats.Latency.QueueWait = supervisor.Histogram{Counts: []uint64{7}, SumSeconds: 0.125}
	stats.Latency.Compute = supervisor.Histogram{Counts: []uint64{6, 1}, SumSeconds: 0.375}
	tests := []struct {
		name  string
		api   http.Handler
		infer bool // one inference first, which sets last_inference
	}{
		{"batching", newTriton(echoModel(spec("x", "FP32", true, -1, 3, -1), spec("s", "BYTES", true, -1)), &fakeBackend{ready: true, stats: stats}), false},
		{"after an inference", newTriton(echoModel(spec("v", "FP32", true, -1)), &fakeBackend{ready: true, stats: stats}), true},
		{"unbatched input", newTriton(echoModel(spec("x", "INT64", true, -1, 4), spec("scale", "FP16", false, 2)), nil), false},
		{"no batch size", newV2(echoModel(spec("x", "FP32", true, -1)), nil), false},
	}
	ctx := context.Background()
	for _, tt := range tests {
		g := NewGRPC(tt.api)
		if tt.infer {
			if rec := postV2(t, tt.api, "/v2/models/m/infer", valuesBody("FP32", `[1]`)); rec.Code != http.StatusOK {
				t.Fatalf("%s: infer = %d %s", tt.name, rec.Code, rec.Body)
			}
		}
		cfg, err := g.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "m", Version: "1"})
		if err != nil {
			t.Fatalf("%s: ModelConfig: %v", tt.name, err)
		}
		if got, want := configOf(cfg.Config), restAnswer[tritonConfig](t, tt.api, "/v2/models/m/config"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: ModelConfig says %+v\nGET config says %+v", tt.name, got, want)
		}
		want := restAnswer[tritonStats](t, tt.api, "/v2/models/m/stats")
		if tt.infer && want.ModelStats[0].LastInference == 0 {
			t.Errorf("%s: no last_inference after an inference", tt.name)
		}
		for _, req := range []*pb.ModelStatisticsRequest{{Name: "m"}, {Name: "m", Version: "1"}, {}} {
			resp, err := g.ModelStatistics(ctx, req)
			if err != nil {
				t.Fatalf("%s: ModelStatistics %v: %v", tt.name, req, err)
			}
			if got := statsOf(resp); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: ModelStatistics %v says %+v\nGET stats says %+v", tt.name, req, got, want)
			}
		}
	}
}

// TestGRPCConfigDataTypes: every datatype has its value in Triton's enum,
// which names it as the REST configuration does.
func TestGRPCConfigDataTypes(t *testing.T) {
	for _, tc := range v2DatatypeCases {
		name := tritonType(tc.datatype)
		if got := grpcDataType(name); got == pb.DataType_TYPE_INVALID || got.String() != name {
			t.Errorf("%s: %s in the enum, want %s", tc.datatype, got, name)
		}
	}
}

// TestGRPCConfigAndStatisticsNotFound: another model or version, or no
// model served, is NOT_FOUND in the REST route's words; the statistics of
// every model, with none served, are an empty list.
func TestGRPCConfigAndStatisticsNotFound(t *testing.T) {
	versioned := &tensorEcho{meta: ModelMetadata{Name: "m", Versions: []string{"1"}, Inputs: []TensorSpec{spec("x", "FP32", true, -1)}}}
	withModel, without := newV2(versioned, nil), New(Config{Backend: &fakeBackend{ready: true}})
	ctx := context.Background()
	tests := []struct {
		api           http.Handler
		model, path   string
		version, want string
	}{
		{withModel, "other", "/v2/models/other", "", `unknown model "other"`},
		{withModel, "m", "/v2/models/m/versions/2", "2", `has no version "2"`},
		{without, "m", "/v2/models/m", "", "no model is served"},
	}
	for _, tt := range tests {
		g := NewGRPC(tt.api)
		for _, call := range []struct {
			route string
			err   error
		}{
			{"/config", second(g.ModelConfig(ctx, &pb.ModelConfigRequest{Name: tt.model, Version: tt.version}))},
			{"/stats", second(g.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: tt.model, Version: tt.version}))},
		} {
			rec := do(t, tt.api, http.MethodGet, tt.path+call.route, "", nil)
			st, _ := status.FromError(call.err)
			if rec.Code != http.StatusNotFound || st.Code() != codes.NotFound || st.Message() != errorOf(t, rec) || !strings.Contains(st.Message(), tt.want) {
				t.Errorf("%s%s: %v; GET answers %d %s; want NOT_FOUND saying %q in the REST route's words", tt.path, call.route, call.err, rec.Code, rec.Body, tt.want)
			}
		}
	}
	resp, err := NewGRPC(without).ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil || len(resp.ModelStats) != 0 {
		t.Errorf("every model's statistics with none served: %v %v, want none", resp, err)
	}
}

// second is the error of a call's two results.
func second[T any](_ T, err error) error { return err }

// TestGRPCServerMetadataExtensions: the service lists the extensions it
// serves, those of the REST routes but binary data, which is theirs.
func TestGRPCServerMetadataExtensions(t *testing.T) {
	api := newV2(echoModel(spec("x", "FP32", true, -1)), nil)
	resp, err := NewGRPC(api).ServerMetadata(context.Background(), &pb.ServerMetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rest := restAnswer[serverMetadataBody](t, api, "/v2")
	want := slices.DeleteFunc(slices.Clone(rest.Extensions), func(e string) bool { return e == "binary_tensor_data" })
	if !slices.Equal(resp.Extensions, want) || !slices.Contains(want, "model_configuration") || !slices.Contains(want, "statistics") {
		t.Errorf("extensions %q, want %q: the REST routes' %q but binary_tensor_data", resp.Extensions, want, rest.Extensions)
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
	garbage := new(pb.ModelInferRequest)
	if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, garbage); err != nil {
		t.Errorf("a message that is not protobuf: %v; want the refusal left in the request", err)
	}
	if _, field := codecRefusal(garbage); field != fieldMalformed {
		t.Error("a message that is not protobuf was decoded")
	}
}

// TestGRPCCodecBoundsDecodedNumbers: a call whose typed numeric contents
// and shapes would take more than twice the body limit once decoded is
// refused before it is decoded, however each field is written (packed,
// unpacked, fixed-size); one at the bound is decoded whole. Before, a call
// of 8 MiB of zeros in int64_contents held 64 MiB decoded and as much
// again converted, and 8 such calls took a server to 2 GB.
func TestGRPCCodecBoundsDecodedNumbers(t *testing.T) {
	const maxBody = 1200 // numbers decoded: 2400 bytes at most
	codec := NewGRPC(New(Config{Backend: &fakeBackend{}, MaxBody: maxBody})).Codec()
	for _, c := range []struct {
		name      string
		contents  func(n int) *pb.InferTensorContents
		size      int
		unpacked  bool
		viaShapes bool
	}{
		{name: "int64_contents", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{Int64Contents: make([]int64, n)} }, size: 8},
		{name: "uint64_contents", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{Uint64Contents: make([]uint64, n)} }, size: 8},
		{name: "int_contents", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{IntContents: make([]int32, n)} }, size: 4},
		{name: "bool_contents", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{BoolContents: make([]bool, n)} }, size: 1},
		{name: "fp64_contents", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{Fp64Contents: make([]float64, n)} }, size: 8},
		{name: "int64_contents unpacked", contents: func(n int) *pb.InferTensorContents { return &pb.InferTensorContents{Int64Contents: make([]int64, n)} }, size: 8, unpacked: true},
		{name: "shape", size: 8, viaShapes: true},
	} {
		request := func(elements int) []byte {
			in := input("a", "INT64", 1)
			if c.viaShapes {
				in.Shape = make([]int64, elements)
			} else {
				in.Contents = c.contents(elements)
			}
			wire, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}})
			if err != nil {
				t.Fatal(err)
			}
			if c.unpacked {
				wire = unpackInt64Contents(t, wire, elements)
			}
			return wire
		}
		most := (2*maxBody - 8) / c.size // beside the input's shape, [1]
		if c.viaShapes {
			most = 2 * maxBody / c.size
		}
		got := new(pb.ModelInferRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(request(most))}, got); err != nil || len(got.GetInputs()) != 1 {
			t.Errorf("%s: %d numbers, at the bound: %v, %d inputs decoded; want it decoded", c.name, most, err, len(got.GetInputs()))
		}
		refused := new(pb.ModelInferRequest)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(request(most + 1))}, refused); err != nil {
			t.Fatalf("%s: %v; want the refusal left in the request", c.name, err)
		}
		if msg, field := codecRefusal(refused); field != fieldTooLarge || !strings.Contains(msg, "over the 2400 one call may carry") || len(refused.GetInputs()) != 0 {
			t.Errorf("%s: %d numbers: refusal %q (field %d), %d inputs decoded; want it refused undecoded", c.name, most+1, msg, field, len(refused.GetInputs()))
		}
	}
}

// unpackInt64Contents rewrites wire, a request of one input whose contents
// are n packed zeros in int64_contents, with each zero a field of its own,
// as protobuf allows a repeated number to come.
func unpackInt64Contents(t *testing.T, wire []byte, n int) []byte {
	t.Helper()
	var contents []byte
	for range n {
		contents = protowire.AppendTag(contents, 3, protowire.VarintType)
		contents = protowire.AppendVarint(contents, 0)
	}
	in := input("a", "INT64", 1)
	inWire, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	inWire = protowire.AppendTag(inWire, fieldContents, protowire.BytesType)
	inWire = protowire.AppendBytes(inWire, contents)
	out := protowire.AppendTag([]byte(nil), 1, protowire.BytesType)
	out = protowire.AppendString(out, "m")
	out = protowire.AppendTag(out, fieldInputs, protowire.BytesType)
	return protowire.AppendBytes(out, inWire)
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
		msg, field := codecRefusal(req)
		switch {
		case tt.want == "" && field != 0:
			t.Errorf("%s: refused (%s), want it decoded", tt.name, msg)
		case tt.want != "" && (field != fieldTooLarge || !strings.Contains(msg, tt.want)):
			t.Errorf("%s: refusal %q (field %d), want one for a call too large saying %q", tt.name, msg, field, tt.want)
		}
	}
}

// A message that is not a well-formed ModelInferRequest is the client's
// mistake: INVALID_ARGUMENT and a 400 in the counts, as a malformed body
// is over REST, where gRPC answered the codec's error INTERNAL, as the
// model's failure, and counted nothing. And a client cannot pass a
// refusal of its own off as the codec's through an unknown field.
func TestGRPCMalformedMessagesAreTheClientsMistake(t *testing.T) {
	g := NewGRPC(New(Config{Backend: &fakeBackend{ready: true}}))
	h, codec := g.h, g.Codec()
	forged := protowire.AppendString(protowire.AppendTag(nil, fieldTooLarge, protowire.BytesType), "forged")
	for name, tt := range map[string]struct {
		wire     []byte
		code     codes.Code
		saying   string
		rejected uint64
	}{
		"not protobuf":     {[]byte{0xff, 0xff, 0xff, 0xff}, codes.InvalidArgument, "the message is not a well-formed ModelInferRequest", 1},
		"a name not UTF-8": {protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"), codes.InvalidArgument, "the message is not a well-formed ModelInferRequest", 1},
		"a forged refusal": {append(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "nope"), forged...), codes.NotFound, "no model is served", 1},
	} {
		t.Run(name, func(t *testing.T) {
			before := h.requests.byOutcome[1].Load() // rejected
			req := new(pb.ModelInferRequest)
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(tt.wire)}, req); err != nil {
				t.Fatalf("Unmarshal: %v, want the refusal left for ModelInfer", err)
			}
			_, err := g.ModelInfer(context.Background(), req)
			if st, _ := status.FromError(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.saying) {
				t.Errorf("ModelInfer: %v; want %s saying %q", err, tt.code, tt.saying)
			}
			if got := h.requests.byOutcome[1].Load() - before; got != tt.rejected {
				t.Errorf("requests counted rejected: %d, want %d", got, tt.rejected)
			}
		})
	}
}

// TestGRPCCompressedMessagesHeldAreBounded: a ModelInfer message that came
// compressed counts, decompressed, in the bound of the compressed bodies
// the requests in progress hold, as a compressed REST body does: past it
// the call is UNAVAILABLE saying why, and one sent plain is not counted.
func TestGRPCCompressedMessagesHeldAreBounded(t *testing.T) {
	backend, held, release := heldBackend()
	h := newV2(echoModel(spec("t", "INT8", true, -1, -1)), backend).(*handler)
	req := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{input("t", "INT8", 1, 1<<20)}, RawInputContents: [][]byte{make([]byte, 1<<20)}}
	h.inflated.bound = int64(proto.Size(req)) * 3 / 2 // one message, not two

	client := serveGRPC(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(opts ...grpc.CallOption) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := client.ModelInfer(ctx, req, opts...)
			done <- err
		}()
		return done
	}
	gzipped := grpc.UseCompressor(gzip.Name)
	admitted := func(what string, done <-chan error) {
		t.Helper()
		select {
		case <-held:
		case err := <-done:
			t.Fatalf("%s ended before it was submitted: %v", what, err)
		}
	}
	first := call(gzipped)
	admitted("a compressed message", first)
	plain := call()
	admitted("a plain message", plain)
	select {
	case err := <-call(gzipped):
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "decompressed bodies, the most the server holds") {
			t.Errorf("a compressed message past the bound: %v; want UNAVAILABLE saying why", err)
		}
	case <-held:
		t.Error("a compressed message past the bound was submitted")
	}
	close(release)
	for what, done := range map[string]<-chan error{"the compressed message held": first, "the plain message": plain} {
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	if err := <-call(gzipped); err != nil {
		t.Errorf("a compressed message once the others are done: %v", err)
	}
	if n := h.inflated.held.Load(); n != 0 {
		t.Errorf("%d bytes counted held once every call is done; want 0", n)
	}
}

// serveGRPC serves h's gRPC service on a loopback port until the test
// ends, and returns a client of it.
func serveGRPC(t *testing.T, h *handler) pb.GRPCInferenceServiceClient {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(server, NewGRPC(h))
	go func() { _ = server.Serve(l) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}
