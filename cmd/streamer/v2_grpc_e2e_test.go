package main

// End-to-end tests of the Open Inference Protocol's gRPC service
// (--grpc-listen) through the real binary: every call, raw and typed
// contents against the REST route's answer, the refusals with their
// codes, deadlines, the token, TLS, the counts and a drain.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// grpcClient dials the gRPC service at addr, with TLS when roots is set.
func grpcClient(t *testing.T, addr string, roots *x509.CertPool) pb.GRPCInferenceServiceClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if roots != nil {
		creds = credentials.NewTLS(&tls.Config{RootCAs: roots})
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

// startGRPC serves args with the gRPC service on a port of its own, and
// returns the server and a client of the service.
func startGRPC(t *testing.T, args ...string) (*server, pb.GRPCInferenceServiceClient) {
	t.Helper()
	addr := freePort(t)
	s := startServer(t, append([]string{"--grpc-listen", addr}, args...)...)
	return s, grpcClient(t, addr, nil)
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks that err is a gRPC status of code whose message holds
// every one of want.
func wantCode(t *testing.T, what string, err error, code codes.Code, want ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Errorf("%s: %v, want code %s", what, err, code)
		return
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: message %q does not say %q", what, st.Message(), w)
		}
	}
}

// demoRequest is a ModelInfer request of the demo's rows, as raw bytes.
func demoRequest(in tensorData) *pb.ModelInferRequest {
	return &pb.ModelInferRequest{
		ModelName:        "demo",
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: in.name, Datatype: in.datatype, Shape: in.shape}},
		RawInputContents: [][]byte{in.bytes()},
	}
}

// TestGRPCDemo calls every service call on the demo, and runs the same
// rows as raw and as typed contents: both give the bytes of the REST
// route's binary answer, which match the reference.
func TestGRPCDemo(t *testing.T) {
	path, ref := onnxModel(t, onnxtest.Demo)
	s, c := startGRPC(t, "--model", path, "--intra-op-threads", "1")
	ctx := callCtx(t)

	if live, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !live.Live {
		t.Errorf("ServerLive: %v %v", live, err)
	}
	if ready, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !ready.Ready {
		t.Errorf("ServerReady: %v %v", ready, err)
	}
	if meta, err := c.ServerMetadata(ctx, &pb.ServerMetadataRequest{}); err != nil || meta.Name == "" || meta.Version == "" {
		t.Errorf("ServerMetadata: %v %v; want a name and a version", meta, err)
	}
	for _, version := range []string{"", "1"} {
		if ready, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "demo", Version: version}); err != nil || !ready.Ready {
			t.Errorf("ModelReady version %q: %v %v", version, ready, err)
		}
		meta, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "demo", Version: version})
		if err != nil {
			t.Fatalf("ModelMetadata: %v", err)
		}
		if meta.Name != "demo" || meta.Platform != "onnxruntime_onnx" || len(meta.Versions) != 1 || meta.Versions[0] != "1" ||
			len(meta.Inputs) != 1 || meta.Inputs[0].Name != "features" || meta.Inputs[0].Datatype != "FP32" || !slices.Equal(meta.Inputs[0].Shape, []int64{-1, 4}) ||
			len(meta.Outputs) != 1 || meta.Outputs[0].Name != "probs" || !slices.Equal(meta.Outputs[0].Shape, []int64{-1, 3}) {
			t.Errorf("ModelMetadata: %v", meta)
		}
	}
	_, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "iris"})
	wantCode(t, "ModelMetadata of another model", err, codes.NotFound, `"iris"`, `"demo"`)
	_, err = c.ModelReady(ctx, &pb.ModelReadyRequest{Name: "demo", Version: "2"})
	wantCode(t, "ModelReady of another version", err, codes.NotFound, `"2"`)

	in := demoRows(rand.New(rand.NewPCG(3, 5)), 5)
	rest := s.infer(t, "/v2/models/demo/infer", v2Request{Inputs: []v2Input{in.binaryInput()}, Parameters: map[string]any{"binary_data_output": true}})
	if rest.Status != http.StatusOK {
		t.Fatalf("REST: %s", rest)
	}
	want := rest.output(t, "probs").bytes(t)

	typed := demoRequest(in)
	typed.RawInputContents = nil
	for _, v := range floats(in.bytes()) {
		if typed.Inputs[0].Contents == nil {
			typed.Inputs[0].Contents = &pb.InferTensorContents{}
		}
		typed.Inputs[0].Contents.Fp32Contents = append(typed.Inputs[0].Contents.Fp32Contents, float32(v))
	}
	for name, req := range map[string]*pb.ModelInferRequest{"raw": demoRequest(in), "typed": typed} {
		req.Id = "call-" + name
		resp, err := c.ModelInfer(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if resp.ModelName != "demo" || resp.ModelVersion != "1" || resp.Id != req.Id || len(resp.Outputs) != 1 || len(resp.RawOutputContents) != 1 {
			t.Fatalf("%s: %v", name, resp)
		}
		out := resp.Outputs[0]
		if out.Name != "probs" || out.Datatype != "FP32" || !slices.Equal(out.Shape, []int64{5, 3}) {
			t.Errorf("%s: output %v, want probs FP32 [5 3]", name, out)
		}
		if got := resp.RawOutputContents[0]; string(got) != string(want) {
			t.Errorf("%s: raw output % x, want the REST route's % x", name, got, want)
		}
		checkDemoReference(t, ref, in, v2Output{Name: "probs", Datatype: "FP32", binary: resp.RawOutputContents[0]})
	}

	// A call compressed with gzip.
	if resp, err := c.ModelInfer(ctx, demoRequest(in), grpc.UseCompressor(gzip.Name)); err != nil || string(resp.RawOutputContents[0]) != string(want) {
		t.Errorf("a call compressed with gzip: %v %v", resp, err)
	}

	// A call of more entries than the codec decodes is refused, with its
	// own code and words, not as a failure to decode.
	many := demoRequest(in)
	many.RawInputContents = make([][]byte, 4097)
	_, err = c.ModelInfer(ctx, many)
	wantCode(t, "too many entries", err, codes.ResourceExhausted, "4098 entries of inputs, outputs and raw_input_contents, over the 4096")

	// Requested outputs.
	req := demoRequest(in)
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs"}}
	if resp, err := c.ModelInfer(ctx, req); err != nil || len(resp.Outputs) != 1 || string(resp.RawOutputContents[0]) != string(want) {
		t.Errorf("with probs requested: %v %v", resp, err)
	}
}

// restStats are the facts of GET /v2/models/demo/stats that
// TestGRPCConfigAndStatisticsOfTheDemo compares.
type restStats struct {
	ModelStats []struct {
		Name           string `json:"name"`
		Version        string `json:"version"`
		LastInference  uint64 `json:"last_inference"`
		InferenceCount uint64 `json:"inference_count"`
		ExecutionCount uint64 `json:"execution_count"`
		InferenceStats struct {
			Success      restDuration `json:"success"`
			Fail         restDuration `json:"fail"`
			Queue        restDuration `json:"queue"`
			ComputeInfer restDuration `json:"compute_infer"`
		} `json:"inference_stats"`
	} `json:"model_stats"`
}

type restDuration struct {
	Count uint64 `json:"count"`
	NS    uint64 `json:"ns"`
}

// TestGRPCConfigAndStatisticsOfTheDemo: Triton's two calls around
// inference, through the binary: ModelConfig carries the serve flags'
// batch size and queue delay and the demo's tensors, their dims without
// the batch axis, and ModelStatistics counts the rows of the calls run,
// as GET /v2/models/demo/stats does.
func TestGRPCConfigAndStatisticsOfTheDemo(t *testing.T) {
	path, _ := onnxModel(t, onnxtest.Demo)
	s, c := startGRPC(t, "--model", path, "--intra-op-threads", "1", "--batch-size", "16", "--max-latency", "3ms", "--workers", "1")
	ctx := callCtx(t)

	for _, version := range []string{"", "1"} {
		resp, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "demo", Version: version})
		if err != nil {
			t.Fatalf("ModelConfig version %q: %v", version, err)
		}
		cfg := resp.GetConfig()
		in, out := cfg.GetInput(), cfg.GetOutput()
		if cfg.GetName() != "demo" || cfg.GetPlatform() != "onnxruntime_onnx" || cfg.GetMaxBatchSize() != 16 ||
			cfg.GetDynamicBatching().GetMaxQueueDelayMicroseconds() != 3000 || cfg.GetVersionPolicy().GetLatest().GetNumVersions() != 1 ||
			len(in) != 1 || in[0].Name != "features" || in[0].DataType != pb.DataType_TYPE_FP32 || !slices.Equal(in[0].Dims, []int64{4}) ||
			len(out) != 1 || out[0].Name != "probs" || out[0].DataType != pb.DataType_TYPE_FP32 || !slices.Equal(out[0].Dims, []int64{3}) {
			t.Errorf("ModelConfig version %q: %v; want demo, onnxruntime_onnx, max_batch_size 16, 3000 µs, features TYPE_FP32 [4], probs TYPE_FP32 [3]", version, cfg)
		}
	}
	_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "iris"})
	wantCode(t, "ModelConfig of another model", err, codes.NotFound, `unknown model "iris"`, `"demo"`)
	_, err = c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "demo", Version: "2"})
	wantCode(t, "ModelStatistics of another version", err, codes.NotFound, `"2"`)

	rng := rand.New(rand.NewPCG(7, 9))
	for _, rows := range []int{5, 2} {
		if _, err := c.ModelInfer(ctx, demoRequest(demoRows(rng, rows))); err != nil {
			t.Fatalf("ModelInfer of %d rows: %v", rows, err)
		}
	}
	var rest restStats
	s.waitFor(t, "the 7 rows counted", readyTimeout, func() bool {
		status, _ := s.getV2(t, "/v2/models/demo/stats", &rest)
		return status == http.StatusOK && len(rest.ModelStats) == 1 && rest.ModelStats[0].InferenceCount == 7
	})
	want := rest.ModelStats[0]
	for _, req := range []*pb.ModelStatisticsRequest{{Name: "demo"}, {}} {
		resp, err := c.ModelStatistics(ctx, req)
		if err != nil || len(resp.ModelStats) != 1 {
			t.Fatalf("ModelStatistics %v: %v %v", req, resp, err)
		}
		m := resp.ModelStats[0]
		is := m.GetInferenceStats()
		if m.Name != "demo" || m.Version != "1" || m.InferenceCount != 7 || is.GetSuccess().GetCount() != 7 || is.GetSuccess().GetNs() == 0 ||
			is.GetFail().GetCount() != 0 || m.ExecutionCount < 2 || m.ExecutionCount > 7 || m.LastInference == 0 {
			t.Errorf("ModelStatistics %v: %v; want demo version 1, 7 rows answered in 2 to 7 batches, their time, none failed", req, m)
		}
		if m.InferenceCount != want.InferenceCount || m.ExecutionCount != want.ExecutionCount || m.LastInference != want.LastInference ||
			is.GetSuccess().GetCount() != want.InferenceStats.Success.Count || is.GetFail().GetCount() != want.InferenceStats.Fail.Count ||
			is.GetQueue().GetCount() != want.InferenceStats.Queue.Count ||
			is.GetComputeInfer().GetCount() != want.InferenceStats.ComputeInfer.Count {
			t.Errorf("ModelStatistics %v: %v; GET stats says %+v", req, m, want)
		}
	}
}

// TestGRPCRefusals: each bad call gets the code of its fault and a
// message naming the input or output, what the model takes and what was
// sent, and the server keeps serving.
func TestGRPCRefusals(t *testing.T) {
	path, _ := onnxModel(t, onnxtest.Demo)
	_, c := startGRPC(t, "--model", path, "--intra-op-threads", "1", "--max-body", "4096")
	ctx := callCtx(t)
	in := demoRows(rand.New(rand.NewPCG(1, 1)), 2)
	edit := func(f func(r *pb.ModelInferRequest)) *pb.ModelInferRequest {
		r := demoRequest(in)
		f(r)
		return r
	}
	tests := []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
		want []string
	}{
		{"another model", edit(func(r *pb.ModelInferRequest) { r.ModelName = "iris" }), codes.NotFound, []string{`"iris"`}},
		{"wrong datatype", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FP64" }), codes.InvalidArgument, []string{`"features"`, "FP64", "FP32"}},
		{"unknown datatype", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "FLOAT" }), codes.InvalidArgument, []string{`"FLOAT"`}},
		{"wrong rank", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{8} }), codes.InvalidArgument, []string{"[8]", "1 axes", "takes 2"}},
		{"wrong axis", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 8} }), codes.InvalidArgument, []string{"axis 1", "takes 4"}},
		{"raw of the wrong size", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{3, 4} }), codes.InvalidArgument, []string{"raw_input_contents", "32 bytes", "[3,4]"}},
		{"unknown input", edit(func(r *pb.ModelInferRequest) { r.Inputs[0].Name = "x" }), codes.InvalidArgument, []string{`"x"`, "features"}},
		{"no input", edit(func(r *pb.ModelInferRequest) { r.Inputs, r.RawInputContents = nil, nil }), codes.InvalidArgument, []string{`missing input "features"`}},
		{"raw for some inputs", edit(func(r *pb.ModelInferRequest) { r.RawInputContents = append(r.RawInputContents, []byte{1}) }), codes.InvalidArgument, []string{"2 entries for 1 inputs"}},
		{"data twice", edit(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1}}
		}), codes.InvalidArgument, []string{"given twice"}},
		{"no data", edit(func(r *pb.ModelInferRequest) { r.RawInputContents = nil }), codes.InvalidArgument, []string{"no data", "fp32_contents"}},
		{"contents of another type", edit(func(r *pb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &pb.InferTensorContents{IntContents: make([]int32, 8)}
		}), codes.InvalidArgument, []string{"fp32_contents", "8 came in contents.int_contents"}},
		{"too few typed elements", edit(func(r *pb.ModelInferRequest) {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: make([]float32, 7)}
		}), codes.InvalidArgument, []string{"contents.fp32_contents has 7 elements", "has 8"}},
		{"unknown output", edit(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "logits"}}
		}), codes.InvalidArgument, []string{`"logits"`, "probs"}},
		{"classification", edit(func(r *pb.ModelInferRequest) {
			r.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "probs", Parameters: map[string]*pb.InferParameter{
				"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 2}}}}}
		}), codes.InvalidArgument, []string{"classification is not served"}},
		{"shared memory", edit(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*pb.InferParameter{"shared_memory_region": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "r"}}}
		}), codes.InvalidArgument, []string{"shared memory is not served"}},
		{"a sequence", edit(func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{"sequence_id": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 7}}}
		}), codes.InvalidArgument, []string{"sequences are not served"}},
		{"timeout of another type", edit(func(r *pb.ModelInferRequest) {
			r.Parameters = map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "1s"}}}
		}), codes.InvalidArgument, []string{`"timeout"`, "int64_param"}},
		{"a message over --max-body", edit(func(r *pb.ModelInferRequest) {
			r.Inputs[0].Shape = []int64{1024, 4}
			r.RawInputContents = [][]byte{make([]byte, 1024*16)}
		}), codes.ResourceExhausted, []string{"larger than max"}},
	}
	for _, tt := range tests {
		_, err := c.ModelInfer(ctx, tt.req)
		wantCode(t, tt.name, err, tt.code, tt.want...)
	}
	resp, err := c.ModelInfer(ctx, demoRequest(in))
	if err != nil || len(resp.RawOutputContents) != 1 || len(resp.RawOutputContents[0]) != 2*3*4 {
		t.Fatalf("a good call after the refusals: %v %v", resp, err)
	}
}

// TestV2RowsOverMaxItemsCountRejected: a v2 request of more rows than
// --max-items, refused before its rows become items, is counted in the
// items rejected as /predict counts one of more items, over REST and gRPC.
func TestV2RowsOverMaxItemsCountRejected(t *testing.T) {
	path, _ := onnxModel(t, onnxtest.Demo)
	s, c := startGRPC(t, "--model", path, "--intra-op-threads", "1", "--max-items", "2")
	in := demoRows(rand.New(rand.NewPCG(1, 1)), 3)
	const rejected = `streamer_items_total{outcome="rejected"}`
	if a := s.infer(t, "/v2/models/demo/infer", v2Request{Inputs: []v2Input{in.flat()}}); a.Status != http.StatusRequestEntityTooLarge || !strings.Contains(a.Error, "at most 2") {
		t.Errorf("3 rows over REST with --max-items 2: %d %q, want 413 naming the limit", a.Status, a.Error)
	}
	if got := metricValue(t, s, rejected); got != 3 {
		t.Errorf("after 3 rows refused over REST, %s = %v; want 3", rejected, got)
	}
	_, err := c.ModelInfer(callCtx(t), demoRequest(in))
	wantCode(t, "3 rows over gRPC with --max-items 2", err, codes.ResourceExhausted, "at most 2")
	if got := metricValue(t, s, rejected); got != 6 {
		t.Errorf("after 3 more rows refused over gRPC, %s = %v; want 6", rejected, got)
	}
}

// TestGRPCTypedContentsAndDeadlines: the built-in sleep model takes BYTES,
// in bytes_contents or raw; its answer comes back raw, one element per
// row; a "timeout" parameter shorter than the model, or a call deadline,
// is DEADLINE_EXCEEDED and counted as timed out.
func TestGRPCTypedContentsAndDeadlines(t *testing.T) {
	s, c := startGRPC(t, "--model", "sleep:2s,0", "--max-latency", "1ms")
	ctx := callCtx(t)
	typed := &pb.ModelInferRequest{ModelName: "sleep", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{2},
		Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("a"), []byte("bc")}},
	}}}
	resp, err := c.ModelInfer(ctx, typed)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Datatype != "BYTES" || !slices.Equal(resp.Outputs[0].Shape, []int64{2}) {
		t.Fatalf("answer %v, want one BYTES output of shape [2]", resp)
	}
	if got := bytesElementsOf(t, resp.RawOutputContents[0]); len(got) != 2 || got[0] != "a" || got[1] != "bc" {
		t.Errorf("the sleep model echoes its items: got %q", got)
	}

	withTimeout := &pb.ModelInferRequest{ModelName: "sleep", Inputs: typed.Inputs,
		Parameters: map[string]*pb.InferParameter{"timeout": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 20_000}}}}
	_, err = c.ModelInfer(ctx, withTimeout)
	wantCode(t, "a 20ms timeout parameter", err, codes.DeadlineExceeded)

	// Half the model's cost: a client stalled for longer before it sends
	// gives up without sending, and the server would count no call.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = c.ModelInfer(short, typed)
	wantCode(t, "a 1s call deadline", err, codes.DeadlineExceeded)

	// The first call is counted as answered, the timeout parameter's as
	// timed out. The call whose client gave up at its deadline is timed
	// out too, unless the client's cancel reached the server before the
	// server saw the deadline pass: then it is canceled.
	waitFor(t, "the calls counted", 5*time.Second, func() bool {
		timedOut := metricValue(t, s, `streamer_requests_total{outcome="timed_out"}`)
		return metricValue(t, s, `streamer_requests_total{outcome="ok"}`) == 1 && timedOut >= 1 &&
			timedOut+metricValue(t, s, `streamer_requests_total{outcome="canceled"}`) == 2
	})
}

// bytesElementsOf splits raw BYTES data into its elements.
func bytesElementsOf(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	for len(data) > 0 {
		if len(data) < 4 {
			t.Fatalf("BYTES data cut short: % x", data)
		}
		n := binary.LittleEndian.Uint32(data)
		if int(n) > len(data)-4 {
			t.Fatalf("BYTES element of %d bytes, %d left", n, len(data)-4)
		}
		out = append(out, string(data[4:4+n]))
		data = data[4+n:]
	}
	return out
}

// metricValue reads one sample of /metrics; NaN when it is not there.
func metricValue(t *testing.T, s *server, sample string) float64 {
	t.Helper()
	_, body, err := s.get("/metrics")
	if err != nil {
		return math.NaN()
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// TestGRPCTokenAndTLS: with --auth-token every call but the health calls
// needs "authorization: Bearer TOKEN"; with --tls-cert the service is
// served over TLS with the same certificate.
func TestGRPCTokenAndTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "grpc")
	pair := writeCertPair(t, dir, ca, 7)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	addr := freePort(t)
	launchServer(t, "--model", "echo", "--grpc-listen", addr, "--auth-token", "s3cret", "--tls-cert", pair.cert, "--tls-key", pair.key)
	c := grpcClient(t, addr, roots)
	ctx := callCtx(t)
	waitFor(t, "the gRPC service to be ready", readyTimeout, func() bool {
		r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
		return err == nil && r.Ready
	})
	if live, err := c.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil || !live.Live {
		t.Errorf("ServerLive without the token: %v %v", live, err)
	}
	req := &pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}},
	}}}
	_, err := c.ModelInfer(ctx, req)
	wantCode(t, "ModelInfer without the token", err, codes.Unauthenticated, "authorization")
	_, err = c.ModelMetadata(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong"), &pb.ModelMetadataRequest{Name: "echo"})
	wantCode(t, "ModelMetadata with another token", err, codes.Unauthenticated)
	_, err = c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "echo"})
	wantCode(t, "ModelConfig without the token", err, codes.Unauthenticated, "authorization")
	_, err = c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	wantCode(t, "ModelStatistics without the token", err, codes.Unauthenticated, "authorization")
	resp, err := c.ModelInfer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret"), req)
	if err != nil || len(resp.RawOutputContents) != 1 {
		t.Fatalf("ModelInfer with the token: %v %v", resp, err)
	}
	if got := bytesElementsOf(t, resp.RawOutputContents[0]); len(got) != 1 || got[0] != "x" {
		t.Errorf("echo answered %q", got)
	}
	// Plain text to the TLS port fails.
	plain := grpcClient(t, addr, nil)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := plain.ServerLive(short, &pb.ServerLiveRequest{}); err == nil {
		t.Error("a plain-text call to the TLS port was answered")
	}
}

// TestGRPCCallsFinishThroughADrain: a call under way when SIGTERM comes is
// answered, later calls are told UNAVAILABLE (or cannot connect), and the
// server exits 0.
func TestGRPCCallsFinishThroughADrain(t *testing.T) {
	s, c := startGRPC(t, "--model", "sleep:500ms,0", "--max-latency", "1ms")
	ctx := callCtx(t)
	req := &pb.ModelInferRequest{ModelName: "sleep", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("slow")}},
	}}}
	type result struct {
		resp *pb.ModelInferResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.ModelInfer(ctx, req)
		done <- result{resp, err}
	}()
	waitFor(t, "the call to be admitted", 5*time.Second, func() bool { return s.stats(t).Submitted > 0 })
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.resp.RawOutputContents) != 1 {
		t.Fatalf("the call under way at SIGTERM: %v %v", r.resp, r.err)
	}
	code, err := s.wait(15 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exit %d %v, want 0", code, err)
	}
	late, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = c.ModelInfer(late, req)
	if st, _ := status.FromError(err); err == nil || st.Code() != codes.Unavailable && !errors.Is(err, context.DeadlineExceeded) && st.Code() != codes.DeadlineExceeded {
		t.Errorf("a call after the drain: %v, want UNAVAILABLE", err)
	}
}

// grpcurlPath finds grpcurl, which `make install-tools` puts in the
// repository's bin/, or fails the test, saying how to get it.
func grpcurlPath(t *testing.T) string {
	t.Helper()
	if p, err := filepath.Abs(filepath.Join("..", "..", "bin", "grpcurl")); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	t.Fatal("the test with a gRPC client the project did not write needs grpcurl; run make install-tools, which puts it in bin/")
	return ""
}

// TestGRPCWithGrpcurl drives the service with grpcurl, a generic gRPC
// client, given the service's .proto file: the demo's answer matches the
// reference, and a refusal comes back with its code and message.
func TestGRPCWithGrpcurl(t *testing.T) {
	grpcurl := grpcurlPath(t)
	path, ref := onnxModel(t, onnxtest.Demo)
	addr := freePort(t)
	startServer(t, "--model", path, "--intra-op-threads", "1", "--grpc-listen", addr)
	call := func(method, body string) (string, error) {
		cmd := exec.Command(grpcurl, "-plaintext", "-max-time", "20", "-import-path", filepath.Join("..", "..", "supervisor", "httpapi", "inferencepb"),
			"-proto", "inference.proto", "-d", body, addr, "inference.GRPCInferenceService/"+method)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := call("ModelInfer", `{"model_name":"demo","id":"g1","inputs":[{"name":"features","datatype":"FP32","shape":[2,4],
		"contents":{"fp32_contents":[5.1,3.5,1.4,0.2,6.7,3.0,5.2,2.3]}}]}`)
	if err != nil {
		t.Fatalf("grpcurl ModelInfer: %v\n%s", err, out)
	}
	var resp struct {
		ModelName string `json:"modelName"`
		ID        string `json:"id"`
		Outputs   []struct {
			Name     string   `json:"name"`
			Datatype string   `json:"datatype"`
			Shape    []string `json:"shape"`
		} `json:"outputs"`
		RawOutputContents [][]byte `json:"rawOutputContents"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("grpcurl's answer: %v\n%s", err, out)
	}
	if resp.ModelName != "demo" || resp.ID != "g1" || len(resp.Outputs) != 1 || resp.Outputs[0].Name != "probs" ||
		strings.Join(resp.Outputs[0].Shape, ",") != "2,3" || len(resp.RawOutputContents) != 1 {
		t.Fatalf("grpcurl's answer: %s", out)
	}
	in := tensorData{name: "features", datatype: "FP32", shape: []int64{2, 4}, values: []any{5.1, 3.5, 1.4, 0.2, 6.7, 3.0, 5.2, 2.3}}
	checkDemoReference(t, ref, in, v2Output{Name: "probs", Datatype: "FP32", binary: resp.RawOutputContents[0]})

	out, err = call("ModelInfer", `{"model_name":"demo","inputs":[{"name":"features","datatype":"FP64","shape":[1,4],"contents":{"fp64_contents":[1,2,3,4]}}]}`)
	if err == nil || !strings.Contains(out, "Code: InvalidArgument") || !strings.Contains(out, "datatype FP64 was sent, the model takes FP32") {
		t.Errorf("grpcurl with FP64 for FP32: %v\n%s; want InvalidArgument naming both", err, out)
	}
	out, err = call("ModelMetadata", `{"name":"demo"}`)
	if err != nil || !strings.Contains(out, `"platform": "onnxruntime_onnx"`) || !strings.Contains(out, `"name": "features"`) {
		t.Errorf("grpcurl ModelMetadata: %v\n%s", err, out)
	}
	out, err = call("ModelConfig", `{"name":"demo"}`)
	if err != nil || !strings.Contains(out, `"name": "features"`) || !strings.Contains(out, `"dataType": "TYPE_FP32"`) {
		t.Errorf("grpcurl ModelConfig: %v\n%s; want features, TYPE_FP32", err, out)
	}
	// Triton's streaming call: two requests on one call, each answered.
	out, err = call("ModelStreamInfer", `{"model_name":"demo","id":"s1","inputs":[{"name":"features","datatype":"FP32","shape":[1,4],"contents":{"fp32_contents":[5.1,3.5,1.4,0.2]}}]}
		{"model_name":"demo","id":"s2","inputs":[{"name":"features","datatype":"FP64","shape":[1,4],"contents":{"fp64_contents":[1,2,3,4]}}]}`)
	if err != nil {
		t.Fatalf("grpcurl ModelStreamInfer: %v\n%s", err, out)
	}
	answers := map[string]string{}
	for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
		var msg struct {
			ErrorMessage  string `json:"errorMessage"`
			InferResponse struct {
				ID                string   `json:"id"`
				RawOutputContents [][]byte `json:"rawOutputContents"`
			} `json:"inferResponse"`
		}
		if err := dec.Decode(&msg); err != nil {
			t.Fatalf("grpcurl's stream of answers: %v\n%s", err, out)
		}
		answers[msg.InferResponse.ID] = msg.ErrorMessage
		if msg.ErrorMessage == "" && len(msg.InferResponse.RawOutputContents) != 1 {
			t.Errorf("grpcurl's streamed answer %s has %d outputs, want 1", msg.InferResponse.ID, len(msg.InferResponse.RawOutputContents))
		}
	}
	if len(answers) != 2 || answers["s1"] != "" || !strings.Contains(answers["s2"], "datatype FP64 was sent, the model takes FP32") {
		t.Errorf("grpcurl ModelStreamInfer: %s; want s1 answered and s2 refused for its datatype", out)
	}
}

// rawCodec sends a message's bytes as they are, to send what no client
// library would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestGRPCTokenBeforeTheMessage: with --auth-token, a call without the
// token is refused before its message is decoded: a message that is not
// protobuf at all gets UNAUTHENTICATED, not a decoding error.
func TestGRPCTokenBeforeTheMessage(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--grpc-listen", addr, "--auth-token", "s3cret")
	s.token = "s3cret"
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := callCtx(t)
	garbage, out := []byte{0xff, 0xff, 0xff}, []byte(nil)
	err = conn.Invoke(ctx, pb.GRPCInferenceService_ModelInfer_FullMethodName, &garbage, &out, grpc.ForceCodecV2(rawCodec{}))
	wantCode(t, "garbage without the token", err, codes.Unauthenticated, "authorization")
	err = conn.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret"), pb.GRPCInferenceService_ModelInfer_FullMethodName,
		&garbage, &out, grpc.ForceCodecV2(rawCodec{}))
	if st, _ := status.FromError(err); st.Code() == codes.Unauthenticated || st.Code() == codes.OK {
		t.Errorf("garbage with the token: %v, want a decoding error", err)
	}
	// The refusal is counted, and logged with its client's address.
	if got := metricValue(t, s, `streamer_unauthorized_total{protocol="grpc"}`); got != 1 {
		t.Errorf(`streamer_unauthorized_total{protocol="grpc"} is %v; want the one call refused`, got)
	}
	s.waitLogged(t, `level=WARN msg="gRPC call refused: no token" remote=127.0.0.1:`)
}

// stalledCall opens a connection to addr and begins a ModelInfer call
// whose message never arrives whole: its first 10 of 1000 bytes. It
// returns the connection and a channel that says how the call ended (its
// grpc-status, or "reset"), if it does.
func stalledCall(t *testing.T, addr string) (net.Conn, <-chan string) {
	t.Helper()
	return stalledCallOf(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName)
}

// rawCall opens a connection to addr, with settings, and begins a call
// of method on stream 1, its headers sent and nothing more: for tests of
// what grpc-go's clients never do.
func rawCall(t *testing.T, addr, method string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	return rawCallWith(t, addr, method, nil, settings...)
}

// rawConn opens an HTTP/2 connection to addr, its preface and settings
// sent, closed when the test ends.
func rawConn(t *testing.T, addr string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return conn, fr
}

// rawCallWith is rawCall with more headers: name and value pairs.
func rawCallWith(t *testing.T, addr, method string, headers [][2]string, settings ...http2.Setting) (net.Conn, *http2.Framer) {
	t.Helper()
	conn, fr := rawConn(t, addr, settings...)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method},
		{":authority", addr}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for _, f := range headers {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return conn, fr
}

// stalledCallOf is stalledCall of the method named.
func stalledCallOf(t *testing.T, addr, method string) (net.Conn, <-chan string) {
	t.Helper()
	conn, fr := rawCall(t, addr, method)
	prefix := []byte{0, 0, 0, 0x03, 0xe8} // not compressed, 1000 bytes
	if err := fr.WriteData(1, false, append(prefix, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 1)
	go func() {
		dec := hpack.NewDecoder(4096, nil)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				ended <- "reset"
				return
			case *http2.HeadersFrame:
				fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
				for _, field := range fields {
					if field.Name == "grpc-status" {
						ended <- field.Value
						return
					}
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			}
		}
	}()
	return conn, ended
}

// TestGRPCHealthCallsHoldNothing: health calls, which need no token, do
// not keep their connection from being reclaimed at --max-connections
// while their message is awaited, nor is it awaited long; and no call's
// headers may be larger than 64 KiB, read whole before any token is
// checked (grpc-go's default let a client pin 16 MiB each).
func TestGRPCHealthCallsHoldNothing(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "echo", "--grpc-listen", addr, "--max-connections", "1", "--auth-token", "s3cret")
	_, ended := stalledCallOf(t, addr, pb.GRPCInferenceService_ServerLive_FullMethodName)
	waitFor(t, "a new connection's call to be served in the place of one holding a health call open", 8*time.Second, func() bool {
		return callsOnANewConnection(t, addr, func(ctx context.Context, c pb.GRPCInferenceServiceClient) error {
			_, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
			return err
		})
	})
	select {
	case how := <-ended:
		// Ended at its read timeout (Canceled, or DeadlineExceeded as
		// its message came too late), or reset with its connection.
		if how == strconv.Itoa(int(codes.OK)) {
			t.Errorf("the stalled health call ended with grpc-status %s; want it ended unanswered", how)
		}
	case <-time.After(2 * time.Second):
		// Its connection was reclaimed: no word came on it.
	}
	big := metadata.Pairs("x-big", strings.Repeat("b", 100<<10))
	if callsOnANewConnection(t, addr, func(ctx context.Context, c pb.GRPCInferenceServiceClient) error {
		_, err := c.ServerLive(metadata.NewOutgoingContext(ctx, big), &pb.ServerLiveRequest{})
		return err
	}) {
		t.Error("a call with 100 KiB of metadata was served; want it refused")
	}
}

// TestGRPCStalledCallsEnd: a call whose message does not arrive within
// --read-timeout is ended, DEADLINE_EXCEEDED as REST's 408 (CANCELLED
// told the client it had canceled the call itself), and its connection,
// idle then, is closed at
// --idle-timeout, so that calls that stall cannot hold every connection
// the cap allows.
func TestGRPCStalledCallsEnd(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--grpc-listen", addr, "--read-timeout", "1s", "--idle-timeout", "2s", "--max-connections", "2")
	var ends []<-chan string
	for range 2 {
		_, ended := stalledCall(t, addr)
		ends = append(ends, ended)
	}
	// A third connection, over the cap, is closed as it comes, and counted.
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	waitFor(t, "the connection over the cap counted", 10*time.Second, func() bool {
		return metricValue(t, s, `streamer_connections_refused_total{reason="grpc_over_cap"}`) == 1
	})
	for i, ended := range ends {
		select {
		case how := <-ended:
			if how != strconv.Itoa(int(codes.DeadlineExceeded)) {
				t.Errorf("stalled call %d ended with grpc-status %s, want DEADLINE_EXCEEDED (%d)", i, how, codes.DeadlineExceeded)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("stalled call %d was not ended within 15s of a 1s --read-timeout", i)
		}
	}
	// Counted as refused, as REST counts its 408.
	if n := metricValue(t, s, `streamer_requests_total{outcome="rejected"}`); n != 2 {
		t.Errorf("streamer_requests_total{outcome=\"rejected\"} %v after two calls ended for their read timeout; want 2", n)
	}
	req := &pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}},
	}}}
	waitFor(t, "a call to get through once the stalled connections are closed", 15*time.Second, func() bool {
		return callsOnANewConnection(t, addr, func(ctx context.Context, c pb.GRPCInferenceServiceClient) error {
			_, err := c.ModelInfer(ctx, req)
			return err
		})
	})
}

// TestGRPCCallsEndedUnreadAreCounted: a ModelInfer call that ends before
// its message is read is counted as the REST route counts a request whose
// body it cannot read: canceled when its client resets it, timed out when
// its deadline passes, refused when its message is over the limit.
// grpc-go ends such calls before any handler or interceptor sees them, and
// they were not counted at all.
func TestGRPCCallsEndedUnreadAreCounted(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--max-body", "1000", "--grpc-listen", addr)
	c := grpcClient(t, addr, nil)
	count := func(outcome string) float64 {
		return metricValue(t, s, `streamer_requests_total{outcome="`+outcome+`"}`)
	}

	_, fr := rawCall(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName)
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a call reset before its message counted canceled", 10*time.Second, func() bool { return count("canceled") == 1 })

	rawCallWith(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName, [][2]string{{"grpc-timeout", "50m"}})
	waitFor(t, "a call whose deadline passed before its message counted timed out", 10*time.Second, func() bool { return count("timed_out") == 1 })

	big := &pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{make([]byte, 8000)}},
	}}}
	_, err := c.ModelInfer(callCtx(t), big)
	wantCode(t, "a message over the limit", err, codes.ResourceExhausted, "larger than max")
	waitFor(t, "a message over the limit counted refused", 10*time.Second, func() bool { return count("rejected") == 1 })

	if got := count("canceled") + count("timed_out"); got != 2 {
		t.Errorf("canceled + timed out = %v after one call of each; want 2", got)
	}
}

// callsOnANewConnection says whether call, made on a client of its own
// to addr, succeeds within 2 s: a client refused backs off before it
// connects again, so one that waits for the server to take it tries
// each time afresh.
func callsOnANewConnection(t *testing.T, addr string, call func(context.Context, pb.GRPCInferenceServiceClient) error) bool {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return call(ctx, pb.NewGRPCInferenceServiceClient(conn)) == nil
}

// TestGRPCIdleConnectionGivesItsPlace: with --max-connections gRPC
// connections open, none with a call in progress, a new one takes the
// place of the one idle longest once that one has been idle for a second:
// the new client's call is served, the old client sees its connection
// closed, and /metrics and the log count the reclaim.
func TestGRPCIdleConnectionGivesItsPlace(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--grpc-listen", addr, "--max-connections", "1")
	first, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := pb.NewGRPCInferenceServiceClient(first).ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second connection's call to be served in the idle first's place", 15*time.Second, func() bool {
		return callsOnANewConnection(t, addr, func(ctx context.Context, c pb.GRPCInferenceServiceClient) error {
			_, err := c.ServerLive(ctx, &pb.ServerLiveRequest{})
			return err
		})
	})
	waitFor(t, "the first client to see its connection closed", 10*time.Second, func() bool {
		return first.GetState() != connectivity.Ready
	})
	waitFor(t, "/metrics to count the reclaim", 10*time.Second, func() bool {
		return metricValue(t, s, `streamer_connections_reclaimed_total{protocol="grpc"}`) == 1
	})
	s.waitLog(t, `level=INFO msg="gRPC connection closed for a new one to take its place`, 1)
}

// TestGRPCDrainNotHeldBySilentConnections: a connection that never sends
// the HTTP/2 preface does not hold the exit after SIGTERM for the
// handshake's timeout.
func TestGRPCDrainNotHeldBySilentConnections(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--grpc-listen", addr, "--read-timeout", "60s")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := grpcClient(t, addr, nil)
	if _, err := c.ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil {
		t.Fatal(err) // the service is up, and the silent connection accepted
	}
	if err := s.signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The handshake's timeout is 10s here: the drain's 1s bound on the
	// gRPC server, and the workers' stop, end well within 8s.
	code, err := s.wait(8 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exit %d %v, want 0 within 8s", code, err)
	}
}

// TestGRPCAClientThatReadsNothingIsDropped: grpc-go keeps a call's answer
// for its client with no deadline of its own, so a client frozen or gone
// that reads nothing (its flow-control window shut) and answers no ping
// held its answers in the server's memory for as long as its connection
// stayed open: a call in progress kept it from counting as idle. Such a
// client is asked for a ping's answer once quiet for --write-timeout, and
// its connection is closed when none comes.
func TestGRPCAClientThatReadsNothingIsDropped(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "echo", "--grpc-listen", addr, "--write-timeout", "1s", "--idle-timeout", "60s")
	// A window of nothing: the server can send no answer.
	_, fr := rawCall(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	msg, err := proto.Marshal(&pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{bytes.Repeat([]byte("a"), 32<<10)}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	data := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))), msg...)
	for len(data) > 0 {
		n := min(len(data), 16<<10) // HTTP/2's default largest frame
		if err := fr.WriteData(1, n == len(data), data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	// Read what comes, answering no ping, until the connection closes.
	closed := make(chan error, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				closed <- err
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("a client that reads nothing and answers no ping still holds its connection 15 s on, with a 1 s --write-timeout")
	}
}

// The largest --max-body (what the flag takes at most) bounds gRPC calls
// too: the 4 KiB added for a call's names and shapes wrapped it to a
// negative bound, and every call was refused as too large.
func TestGRPCTheLargestBodyLimitServes(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "echo", "--grpc-listen", addr, "--max-body", strconv.FormatInt(math.MaxInt64, 10))
	req := &pb.ModelInferRequest{ModelName: "echo", Inputs: []*pb.ModelInferRequest_InferInputTensor{{
		Name: "input", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("x")}},
	}}}
	if _, err := grpcClient(t, addr, nil).ModelInfer(callCtx(t), req); err != nil {
		t.Fatalf("ModelInfer under the largest --max-body: %v", err)
	}
}
