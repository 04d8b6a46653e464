package httpapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// GRPC serves the Open Inference Protocol's gRPC service
// (inference.GRPCInferenceService) for the handler New returned: the same
// model, backend, checks and counts as its v2 REST routes, so that a
// client built for Triton's or KServe's gRPC endpoint calls streamer
// unchanged. A request's inputs come as typed contents or as raw
// little-endian bytes (raw_input_contents, which tritonclient sends); the
// answer's outputs always come as raw bytes (raw_output_contents), as
// Triton answers. Of the calls Triton adds to the service it serves the two
// its clients make around inference, ModelConfig and ModelStatistics,
// with the facts of the REST routes /config and /stats, and its streaming
// inference, ModelStreamInfer. Errors carry the REST route's message with
// the gRPC code of its status (see grpcCode).
type GRPC struct {
	inferencepb.UnimplementedGRPCInferenceServiceServer
	h *handler
}

// NewGRPC returns the gRPC service of api, which must be a handler New
// returned; it panics otherwise, since nothing could be served.
func NewGRPC(api http.Handler) *GRPC {
	h, ok := api.(*handler)
	if !ok {
		panic("httpapi: NewGRPC needs the handler New returned")
	}
	return &GRPC{h: h}
}

// grpcCode is the gRPC code of an HTTP status the REST routes answer: the
// same fault, in the words gRPC clients act on. A full queue (429), as no
// worker able to run (503), is UNAVAILABLE, the passing condition that
// gRPC retry policies retry with a back-off; RESOURCE_EXHAUSTED is a
// request too large for the server (413), which no retry mends.
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusRequestEntityTooLarge:
		return codes.ResourceExhausted
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case StatusClientClosedRequest:
		return codes.Canceled
	}
	return codes.Internal
}

// grpcError is err as a gRPC status, with the message the REST route
// would give.
func grpcError(err error) error {
	var reqErr *requestError
	switch {
	case errors.As(err, &reqErr):
		return status.Error(grpcCode(reqErr.status), reqErr.msg)
	case err == supervisor.ErrShuttingDown: // bare: says no more than its name
		return status.Error(codes.Unavailable, ShuttingDown)
	}
	return status.Error(grpcCode(StatusOf(err)), err.Error())
}

// ServerLive answers while the process runs.
func (g *GRPC) ServerLive(context.Context, *inferencepb.ServerLiveRequest) (*inferencepb.ServerLiveResponse, error) {
	return &inferencepb.ServerLiveResponse{Live: true}, nil
}

// ServerReady says whether some worker can take work now.
func (g *GRPC) ServerReady(context.Context, *inferencepb.ServerReadyRequest) (*inferencepb.ServerReadyResponse, error) {
	return &inferencepb.ServerReadyResponse{Ready: g.h.backend.Ready()}, nil
}

// ServerMetadata names the server, its version and the extensions the
// service serves: the model's configuration and statistics, as the REST
// routes do. binary_tensor_data is the REST routes' alone; gRPC carries
// raw data in fields of its own.
func (g *GRPC) ServerMetadata(context.Context, *inferencepb.ServerMetadataRequest) (*inferencepb.ServerMetadataResponse, error) {
	return &inferencepb.ServerMetadataResponse{
		Name: g.h.serverMetadata.Name, Version: g.h.serverMetadata.Version, Extensions: []string{"model_configuration", "statistics"},
	}, nil
}

// model returns the served model's metadata if it is called name and has
// version (empty: any).
func (g *GRPC) model(name, version string) (ModelMetadata, error) {
	if err := g.h.noV2Model(); err != nil {
		return ModelMetadata{}, grpcError(err)
	}
	meta := g.h.tensors.Metadata()
	if err := checkModelRoute(meta, v2Route{model: name, version: version}); err != nil {
		return ModelMetadata{}, grpcError(err)
	}
	return meta, nil
}

// ModelReady says whether the model can run now.
func (g *GRPC) ModelReady(_ context.Context, req *inferencepb.ModelReadyRequest) (*inferencepb.ModelReadyResponse, error) {
	if _, err := g.model(req.GetName(), req.GetVersion()); err != nil {
		return nil, err
	}
	return &inferencepb.ModelReadyResponse{Ready: g.h.backend.Ready()}, nil
}

// ModelMetadata describes the model's inputs and outputs.
func (g *GRPC) ModelMetadata(_ context.Context, req *inferencepb.ModelMetadataRequest) (*inferencepb.ModelMetadataResponse, error) {
	meta, err := g.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inferencepb.ModelMetadataResponse{
		Name: meta.Name, Versions: meta.Versions, Platform: meta.Platform,
		Inputs: tensorMetadata(meta.Inputs), Outputs: tensorMetadata(meta.Outputs),
	}, nil
}

func tensorMetadata(specs []TensorSpec) []*inferencepb.ModelMetadataResponse_TensorMetadata {
	out := make([]*inferencepb.ModelMetadataResponse_TensorMetadata, len(specs))
	for i, s := range specs {
		out[i] = &inferencepb.ModelMetadataResponse_TensorMetadata{Name: s.Name, Datatype: s.Datatype, Shape: s.Shape}
	}
	return out
}

// ModelConfig gives the model's configuration in Triton's terms, as
// GET /v2/models/{model}/config does: perf_analyzer reads max_batch_size
// and the inputs from it before it measures.
func (g *GRPC) ModelConfig(_ context.Context, req *inferencepb.ModelConfigRequest) (*inferencepb.ModelConfigResponse, error) {
	meta, err := g.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inferencepb.ModelConfigResponse{Config: grpcConfig(g.h.modelConfig(meta))}, nil
}

// grpcConfig is the REST route's configuration as its message.
func grpcConfig(cfg tritonConfig) *inferencepb.ModelConfig {
	latest := &inferencepb.ModelVersionPolicy_Latest{NumVersions: uint32(cfg.VersionPolicy.Latest.NumVersions)}
	out := &inferencepb.ModelConfig{
		Name: cfg.Name, Platform: cfg.Platform, MaxBatchSize: int32(min(cfg.MaxBatchSize, math.MaxInt32)),
		VersionPolicy: &inferencepb.ModelVersionPolicy{PolicyChoice: &inferencepb.ModelVersionPolicy_Latest_{Latest: latest}},
		Input:         make([]*inferencepb.ModelInput, len(cfg.Input)),
		Output:        make([]*inferencepb.ModelOutput, len(cfg.Output)),
		Parameters:    make(map[string]*inferencepb.ModelParameter, len(cfg.Parameters)),
	}
	for i, t := range cfg.Input {
		out.Input[i] = &inferencepb.ModelInput{Name: t.Name, DataType: grpcDataType(t.DataType), Dims: t.Dims}
	}
	for i, t := range cfg.Output {
		out.Output[i] = &inferencepb.ModelOutput{Name: t.Name, DataType: grpcDataType(t.DataType), Dims: t.Dims}
	}
	if b := cfg.DynamicBatching; b != nil {
		out.SchedulingChoice = &inferencepb.ModelConfig_DynamicBatching{DynamicBatching: &inferencepb.ModelDynamicBatching{
			MaxQueueDelayMicroseconds: uint64(max(b.MaxQueueDelayMicroseconds, 0)),
		}}
	}
	for key, p := range cfg.Parameters {
		out.Parameters[key] = &inferencepb.ModelParameter{StringValue: p.StringValue}
	}
	return out
}

// grpcDataType is the enum value of a datatype named as in Triton's
// configuration (tritonType); TYPE_INVALID for a name it lacks, which no
// datatype served has.
func grpcDataType(name string) inferencepb.DataType {
	return inferencepb.DataType(inferencepb.DataType_value[name])
}

// ModelStatistics gives the model's counts and times in Triton's terms,
// as GET /v2/models/{model}/stats does; with no name, every model's, as
// GET /v2/models/stats does: the model served, or none.
func (g *GRPC) ModelStatistics(_ context.Context, req *inferencepb.ModelStatisticsRequest) (*inferencepb.ModelStatisticsResponse, error) {
	if req.GetName() == "" {
		if g.h.tensors == nil {
			return &inferencepb.ModelStatisticsResponse{ModelStats: []*inferencepb.ModelStatistics{}}, nil
		}
		return grpcStats(g.h.modelStats(g.h.tensors.Metadata())), nil
	}
	meta, err := g.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return grpcStats(g.h.modelStats(meta)), nil
}

// grpcStats is the REST route's statistics as their message.
func grpcStats(stats tritonStats) *inferencepb.ModelStatisticsResponse {
	resp := &inferencepb.ModelStatisticsResponse{ModelStats: make([]*inferencepb.ModelStatistics, len(stats.ModelStats))}
	for i, m := range stats.ModelStats {
		is := m.InferenceStats
		out := &inferencepb.ModelStatistics{
			Name: m.Name, Version: m.Version, LastInference: uint64(max(m.LastInference, 0)),
			InferenceCount: m.InferenceCount, ExecutionCount: m.ExecutionCount,
			InferenceStats: &inferencepb.InferStatistics{
				Success: grpcDuration(is.Success), Fail: grpcDuration(is.Fail), Queue: grpcDuration(is.Queue),
				ComputeInput: grpcDuration(is.ComputeInput), ComputeInfer: grpcDuration(is.ComputeInfer), ComputeOutput: grpcDuration(is.ComputeOutput),
				CacheHit: grpcDuration(is.CacheHit), CacheMiss: grpcDuration(is.CacheMiss),
			},
			BatchStats: make([]*inferencepb.InferBatchStatistics, len(m.BatchStats)),
		}
		for j, b := range m.BatchStats {
			out.BatchStats[j] = &inferencepb.InferBatchStatistics{
				BatchSize:    uint64(max(b.BatchSize, 0)),
				ComputeInput: grpcDuration(b.ComputeInput), ComputeInfer: grpcDuration(b.ComputeInfer), ComputeOutput: grpcDuration(b.ComputeOutput),
			}
		}
		resp.ModelStats[i] = out
	}
	return resp
}

func grpcDuration(d tritonDuration) *inferencepb.StatisticDuration {
	return &inferencepb.StatisticDuration{Count: d.Count, Ns: d.NS}
}

// CountUnread counts a ModelInfer call that ended before its handler ran,
// with the REST route's status for the same end: 408 for a message that
// did not arrive within the server's read timeout, 413 for one over the
// limit, 499 for a call its client canceled, 504 for one whose deadline
// passed.
func (g *GRPC) CountUnread(status int) { g.h.requests.count(status, nil) }

// ModelInfer runs one inference request: its batched inputs are cut into
// rows, each one item, as on the REST route. The call's deadline, when it
// has one, is the request's deadline, as is the "timeout" parameter; the
// sooner of the two wins.
func (g *GRPC) ModelInfer(ctx context.Context, req *inferencepb.ModelInferRequest) (*inferencepb.ModelInferResponse, error) {
	h := g.h
	switch msg, field := codecRefusal(req); field {
	case fieldTooLarge:
		h.requests.count(http.StatusRequestEntityTooLarge, nil)
		return nil, status.Error(codes.ResourceExhausted, msg)
	case fieldMalformed:
		h.requests.count(http.StatusBadRequest, nil)
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	meta, err := g.model(req.GetModelName(), req.GetModelVersion())
	if err != nil {
		h.requests.count(http.StatusNotFound, nil)
		return nil, err
	}
	if compressedCall(ctx) {
		// Counted as a compressed REST body is, by its message's size
		// decompressed (see inflatedBudget).
		n := int64(proto.Size(req))
		if !h.inflated.take(n) {
			err := inflatedFull(h.inflated.bound)
			h.requests.count(StatusOf(err), err)
			return nil, grpcError(err)
		}
		defer h.inflated.give(n)
	}
	st := h.getInferState()
	resp, inUse, err := g.infer(ctx, st, req, meta)
	if !inUse {
		h.putInferState(st)
	}
	if err != nil {
		status := StatusOf(err)
		h.requests.count(status, err)
		if status == http.StatusInternalServerError {
			remote := ""
			if p, ok := peer.FromContext(ctx); ok {
				remote = p.Addr.String()
			}
			h.logFailed("gRPC ModelInfer", remote, err)
		}
		return nil, grpcError(err)
	}
	h.requests.count(http.StatusOK, nil)
	return resp, nil
}

// StreamErrorCode is the parameter of a ModelStreamInfer answer that
// failed which holds the gRPC status code ModelInfer would have ended the
// request's call with, by its number (14 UNAVAILABLE, 3
// INVALID_ARGUMENT, ...), as an int64_param.
const StreamErrorCode = "streamer_error_code"

// streamInFlight bounds the requests of one ModelStreamInfer call under
// way at once: past it, the call reads its client's next request once one
// is answered, and the client's sends wait (HTTP/2's flow control), as
// its calls would wait for one connection's bound on calls at once.
const streamInFlight = 256

// ModelStreamInfer runs each request its client sends on the call, as
// ModelInfer runs one (the same checks, counts and deadlines, the
// "timeout" parameter included), each as soon as it comes, so that one
// call carries many requests to the batcher at once. Each request gets one
// message, sent as it is answered, so in the order they are answered, not
// sent: a client tells them apart by the id it gave. A request that fails
// gets its error's message in error_message, with its id, model and
// version, and the call goes on. Once the client has sent its last (it
// closed its side), the call ends, OK, as its last request is answered; a
// client that ends it first cancels the requests it has under way.
func (g *GRPC) ModelStreamInfer(stream inferencepb.GRPCInferenceService_ModelStreamInferServer) error {
	ctx := stream.Context()
	var (
		sending  sync.Mutex // a stream takes one message at a time
		sendErr  error      // the first failed send: the call is over
		inFlight = make(chan struct{}, streamInFlight)
		answered sync.WaitGroup
	)
	defer answered.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			answered.Wait()
			return sendErr
		}
		if err != nil {
			// grpc-go refused a message as it read it (over the limit,
			// or not to be decompressed), and ended the call: counted as
			// ModelInfer's would be.
			switch status.Code(err) {
			case codes.ResourceExhausted:
				g.h.requests.count(http.StatusRequestEntityTooLarge, nil)
			case codes.Internal:
				g.h.requests.count(http.StatusBadRequest, nil)
			}
			return err
		}
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
			g.h.requests.count(StatusClientClosedRequest, nil) // read, and never run
			return ctx.Err()
		}
		answered.Go(func() {
			defer func() { <-inFlight }()
			resp, err := g.ModelInfer(ctx, req)
			msg := &inferencepb.ModelStreamInferResponse{InferResponse: resp}
			if err != nil {
				st := status.Convert(err)
				msg.ErrorMessage = st.Message()
				// Triton's answer has no place for the code, which tells
				// a client what ModelInfer's would (retry UNAVAILABLE, not
				// INVALID_ARGUMENT): streamer's own parameter carries it.
				msg.InferResponse = &inferencepb.ModelInferResponse{Id: req.GetId(), ModelName: req.GetModelName(), ModelVersion: req.GetModelVersion(),
					Parameters: map[string]*inferencepb.InferParameter{StreamErrorCode: {ParameterChoice: &inferencepb.InferParameter_Int64Param{Int64Param: int64(st.Code())}}}}
			}
			sending.Lock()
			defer sending.Unlock()
			if sendErr == nil {
				sendErr = stream.Send(msg)
			}
		})
	}
}

// compressedCall reports whether the message of the call whose context is
// ctx came compressed (grpc-encoding): grpc-go tells it through the
// call's transport stream alone.
func compressedCall(ctx context.Context) bool {
	s, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ RecvCompress() string })
	if !ok {
		return false
	}
	c := s.RecvCompress()
	return c != "" && c != "identity"
}

// infer reads, runs and answers req; inUse says the supervisor may still
// read the request's items (see inferWith).
func (g *GRPC) infer(ctx context.Context, st *inferState, req *inferencepb.ModelInferRequest, meta ModelMetadata) (*inferencepb.ModelInferResponse, bool, error) {
	if err := st.readGRPC(req, meta, g.h.tensors); err != nil {
		g.h.countRejected(err)
		return nil, false, err
	}
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, false, &requestError{status: http.StatusGatewayTimeout, msg: "the call's deadline passed before it was read"}
		}
		if st.items.timeout == 0 || left < st.items.timeout {
			st.items.timeout = left
		}
	}
	answers, err := g.h.run(ctx, &st.items)
	if err != nil {
		if hasDeadline && errors.Is(err, supervisor.ErrCanceled) && !time.Now().Before(deadline) {
			// The client ends the call at its deadline, which may cancel
			// it before the request's own deadline is seen to pass.
			err = fmt.Errorf("%w: the call's deadline passed before its answer", supervisor.ErrDeadline)
		}
		return nil, true, byRow(err)
	}
	resp, err := st.grpcAnswer(g.h.tensors, meta, req, answers)
	return resp, false, err
}

// readGRPC reads a gRPC inference request into st, as read does a REST
// one: each input's data goes into the binary layout (typed contents are
// converted into st.arena; raw contents are used as they are), then the
// inputs are matched with the model's, checked and encoded into items.
func (st *inferState) readGRPC(req *inferencepb.ModelInferRequest, meta ModelMetadata, model TensorModel) error {
	for key, p := range req.GetParameters() {
		if err := st.grpcParameter(key, p); err != nil {
			return err
		}
	}
	raw := req.GetRawInputContents()
	inputs := req.GetInputs()
	if len(raw) > 0 && len(raw) != len(inputs) {
		return badRequest("raw_input_contents has " + strconv.Itoa(len(raw)) + " entries for " + strconv.Itoa(len(inputs)) +
			" inputs: give the raw data of every input, in the order of inputs, or of none")
	}
	ats := make([][2]int, len(inputs)) // each input's converted data in the arena
	for i, in := range inputs {
		ref := tensorRef{what: "input", index: i}
		if in.GetName() == "" {
			return badRequest(ref.String() + ": no name")
		}
		ref.name = []byte(in.GetName())
		dt, ok := dtypeOf([]byte(in.GetDatatype()))
		if !ok {
			return badRequest(ref.String() + ": unknown datatype " + strconv.Quote(in.GetDatatype()) + "; the datatypes are " + datatypeNames)
		}
		if len(in.GetShape()) > maxRank {
			return badRequest(ref.String() + `: "shape" has more than ` + strconv.Itoa(maxRank) + " axes")
		}
		for a, d := range in.GetShape() {
			if d < 0 {
				return badRequest(ref.String() + `: "shape" axis ` + strconv.Itoa(a) + " is " + strconv.FormatInt(d, 10) +
					"; a request's shape has no variable axes")
			}
		}
		for key := range in.GetParameters() {
			if sharedMemoryParameter([]byte(key)) {
				return sharedMemoryRefusal(ref)
			}
		}
		v := v2Input{name: ref.name, datatype: []byte(dt.name), dtype: dt, shape: in.GetShape(), rank: len(in.GetShape()), binarySize: -1}
		contents := in.GetContents()
		switch {
		case len(raw) > 0 && hasContents(contents):
			return badRequest(ref.String() + ": its data is given twice, in contents and in raw_input_contents: give it once")
		case len(raw) > 0:
			v.data, v.binarySize, v.dataName = raw[i], int64(len(raw[i])), "raw_input_contents"
		case hasContents(contents):
			start := len(st.arena)
			var err error
			if st.arena, v.elements, err = appendContents(st.arena, dt, contents, ref); err != nil {
				return err
			}
			v.dataName = "contents." + contentsField(dt)
			ats[i] = [2]int{start, len(st.arena)}
		case !emptyShape(v.shape):
			if field := contentsField(dt); field != "" {
				return badRequest(ref.String() + ": no data: give it in contents." + field + " or in raw_input_contents")
			}
			return badRequest(ref.String() + ": no data: give it in raw_input_contents (" + dt.name + " has no field in contents)")
		}
		st.req.inputs = append(st.req.inputs, v)
	}
	for i := range st.req.inputs {
		if in := &st.req.inputs[i]; in.binarySize < 0 {
			in.data = st.arena[ats[i][0]:ats[i][1]:ats[i][1]]
		}
	}
	for i, out := range req.GetOutputs() {
		ref := tensorRef{what: "output", index: i, name: []byte(out.GetName())}
		if out.GetName() == "" {
			ref.name = nil
			return badRequest(ref.String() + ": no name")
		}
		for key, p := range out.GetParameters() {
			if sharedMemoryParameter([]byte(key)) {
				return sharedMemoryRefusal(ref)
			}
			if key == "classification" && !zeroParameter(p) {
				return classificationRefusal(ref)
			}
		}
		st.req.outputs = append(st.req.outputs, v2Output{name: ref.name})
	}
	return st.makeItems(meta, model)
}

// grpcParameter reads one of the request's parameters, as
// requestParameter does in JSON: timeout in microseconds, priority
// (checked, and ignored), and a sequence's, refused.
func (st *inferState) grpcParameter(key string, p *inferencepb.InferParameter) error {
	switch key {
	case "sequence_id", "sequence_start", "sequence_end":
		if zeroParameter(p) {
			return nil
		}
		return sequenceRefusal(key)
	case "timeout":
		us, ok := intParameter(p)
		switch {
		case !ok:
			return badRequest(`parameter "timeout" (microseconds) must be an int64_param or uint64_param`)
		case us < 0:
			return badRequest(`parameter "timeout" must be 0 (none) or a positive number of microseconds, not ` + strconv.FormatInt(us, 10))
		case us > maxTimeoutMicros:
			return badRequest(`parameter "timeout" ` + parameterText(p) + " is out of range: at most " + strconv.FormatInt(maxTimeoutMicros, 10) + " microseconds")
		}
		st.req.timeout = time.Duration(us) * time.Microsecond
	case "priority":
		if _, ok := intParameter(p); !ok {
			return badRequest(`parameter "priority" must be an int64_param or uint64_param`)
		}
	}
	return nil
}

// intParameter is p's whole number, false when p holds another type (or
// a uint64 past int64's range).
func intParameter(p *inferencepb.InferParameter) (int64, bool) {
	switch v := p.GetParameterChoice().(type) {
	case *inferencepb.InferParameter_Int64Param:
		return v.Int64Param, true
	case *inferencepb.InferParameter_Uint64Param:
		if v.Uint64Param > math.MaxInt64 {
			return math.MaxInt64, true
		}
		return int64(v.Uint64Param), true
	}
	return 0, false
}

// parameterText is p's number as it was sent.
func parameterText(p *inferencepb.InferParameter) string {
	if v, ok := p.GetParameterChoice().(*inferencepb.InferParameter_Uint64Param); ok {
		return strconv.FormatUint(v.Uint64Param, 10)
	}
	return strconv.FormatInt(p.GetInt64Param(), 10)
}

// zeroParameter says whether p holds its type's zero (or nothing).
func zeroParameter(p *inferencepb.InferParameter) bool {
	switch v := p.GetParameterChoice().(type) {
	case *inferencepb.InferParameter_BoolParam:
		return !v.BoolParam
	case *inferencepb.InferParameter_Int64Param:
		return v.Int64Param == 0
	case *inferencepb.InferParameter_Uint64Param:
		return v.Uint64Param == 0
	case *inferencepb.InferParameter_StringParam:
		return v.StringParam == ""
	case *inferencepb.InferParameter_DoubleParam:
		return v.DoubleParam == 0
	}
	return true
}

// emptyShape says whether shape holds no element, so that no data is
// data enough.
func emptyShape(shape []int64) bool {
	n, ok := elementCount(shape)
	return ok && n == 0
}

// hasContents says whether c holds any element.
func hasContents(c *inferencepb.InferTensorContents) bool {
	return c != nil && len(c.BoolContents)+len(c.IntContents)+len(c.Int64Contents)+len(c.UintContents)+
		len(c.Uint64Contents)+len(c.Fp32Contents)+len(c.Fp64Contents)+len(c.BytesContents) > 0
}

// contentsField names the field of InferTensorContents that holds dt's
// elements.
func contentsField(dt dtype) string {
	switch dt.name {
	case "BOOL":
		return "bool_contents"
	case "INT8", "INT16", "INT32":
		return "int_contents"
	case "INT64":
		return "int64_contents"
	case "UINT8", "UINT16", "UINT32":
		return "uint_contents"
	case "UINT64":
		return "uint64_contents"
	case "FP32":
		return "fp32_contents"
	case "FP64":
		return "fp64_contents"
	case "BYTES":
		return "bytes_contents"
	}
	return "" // FP16: raw only
}

// appendContents appends the elements of c, which must be in dt's field
// alone and in its range, to dst in the binary layout, and counts them.
func appendContents(dst []byte, dt dtype, c *inferencepb.InferTensorContents, ref tensorRef) ([]byte, int64, error) {
	want := contentsField(dt)
	if want == "" {
		return dst, 0, badRequest(ref.String() + ": " + dt.name + " has no field in contents: send its data in raw_input_contents")
	}
	var count int
	fields := []struct {
		name string
		n    int
	}{
		{"bool_contents", len(c.GetBoolContents())}, {"int_contents", len(c.GetIntContents())},
		{"int64_contents", len(c.GetInt64Contents())}, {"uint_contents", len(c.GetUintContents())},
		{"uint64_contents", len(c.GetUint64Contents())}, {"fp32_contents", len(c.GetFp32Contents())},
		{"fp64_contents", len(c.GetFp64Contents())}, {"bytes_contents", len(c.GetBytesContents())},
	}
	for _, f := range fields {
		if f.n > 0 && f.name == want {
			count = f.n
		}
		if f.n > 0 && f.name != want {
			return dst, 0, badRequest(ref.String() + ": datatype " + dt.name + " takes its elements in contents." + want + ", but " +
				strconv.Itoa(f.n) + " came in contents." + f.name)
		}
	}
	outOfRange := func(i int, v string) error {
		return badRequest(ref.String() + ": element " + strconv.Itoa(i) + " is " + v + ", which does not fit " + dt.name)
	}
	if want != "bytes_contents" {
		// Once, rather than doubling as it fills: a tensor of 64 MiB held
		// up to twice that while it grew.
		dst = growBytes(dst, count*max(dt.size, 1))
	}
	switch want {
	case "bool_contents":
		for _, v := range c.BoolContents {
			b := byte(0)
			if v {
				b = 1
			}
			dst = append(dst, b)
		}
	case "int_contents":
		lo, hi := int32(math.MinInt32), int32(math.MaxInt32)
		switch dt.size {
		case 1:
			lo, hi = math.MinInt8, math.MaxInt8
		case 2:
			lo, hi = math.MinInt16, math.MaxInt16
		}
		for i, v := range c.IntContents {
			if v < lo || v > hi {
				return dst, 0, outOfRange(i, strconv.FormatInt(int64(v), 10))
			}
			dst = appendSized(dst, dt.size, uint32(v))
		}
	case "int64_contents":
		for _, v := range c.Int64Contents {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
		}
	case "uint_contents":
		hi := uint32(math.MaxUint32)
		switch dt.size {
		case 1:
			hi = math.MaxUint8
		case 2:
			hi = math.MaxUint16
		}
		for i, v := range c.UintContents {
			if v > hi {
				return dst, 0, outOfRange(i, strconv.FormatUint(uint64(v), 10))
			}
			dst = appendSized(dst, dt.size, v)
		}
	case "uint64_contents":
		for _, v := range c.Uint64Contents {
			dst = binary.LittleEndian.AppendUint64(dst, v)
		}
	case "fp32_contents":
		for _, v := range c.Fp32Contents {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case "fp64_contents":
		for _, v := range c.Fp64Contents {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
		}
	case "bytes_contents":
		for i, v := range c.BytesContents {
			if uint64(len(v)) > math.MaxUint32 {
				return dst, 0, outOfRange(i, strconv.Itoa(len(v))+" bytes")
			}
			dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
			dst = append(dst, v...)
		}
	}
	return dst, int64(count), nil
}

// appendSized appends the low size bytes of v, little-endian: an element
// of 1, 2 or 4 bytes, checked to fit.
func appendSized(dst []byte, size int, v uint32) []byte {
	switch size {
	case 1:
		return append(dst, byte(v))
	case 2:
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	}
	return binary.LittleEndian.AppendUint32(dst, v)
}

// grpcAnswer stacks the rows of each output the answer carries (those
// requested, in their order, else all the model's) into the answer's raw
// contents. A model answer that cannot be stacked is the model's fault.
func (st *inferState) grpcAnswer(model TensorModel, meta ModelMetadata, req *inferencepb.ModelInferRequest, answers [][]byte) (*inferencepb.ModelInferResponse, error) {
	if err := st.decodeAnswers(model, answers); err != nil {
		return nil, err
	}
	if err := st.selectOutputs(meta); err != nil {
		return nil, err
	}
	version := req.GetModelVersion()
	if version == "" && len(meta.Versions) > 0 {
		version = meta.Versions[0]
	}
	resp := &inferencepb.ModelInferResponse{
		ModelName: meta.Name, ModelVersion: version, Id: req.GetId(),
		Outputs:           make([]*inferencepb.ModelInferResponse_InferOutputTensor, len(st.selected)),
		RawOutputContents: make([][]byte, len(st.selected)),
	}
	for i, sel := range st.selected {
		name := meta.Outputs[sel.spec].Name
		shape := sel.shape
		if sel.batched {
			shape = append([]int64{int64(st.rows)}, sel.shape...)
		}
		resp.Outputs[i] = &inferencepb.ModelInferResponse_InferOutputTensor{Name: name, Datatype: sel.dt.name, Shape: shape}
		data := make([]byte, 0, sel.size)
		for _, tensors := range st.answers {
			data = append(data, findTensor(tensors, name, sel.spec).Data...)
		}
		resp.RawOutputContents[i] = data
	}
	return resp, nil
}

// Codec is the codec the service's server must use (grpc.ForceServerCodecV2),
// with GRPCGzip registered for calls compressed with gzip:
// protobuf, as gRPC's default, but a ModelInfer call is first scanned, and
// refused before it is decoded when its repeated entries would decode to
// far more memory than the call's size: each entry of inputs, outputs,
// raw_input_contents and the parameter maps, and each BYTES element of
// contents, decodes to an object or slice of its own, of 24 bytes to a few
// hundred, from as little as 2 bytes on the wire, so that 8 MiB of empty
// inputs would take some 500 MiB, and a few such calls a server's memory.
// A call may carry up to maxTensorEntries tensor entries (inputs, outputs
// and raw contents together, far more than any model has) and as many
// parameters, and up to the body limit / 12 BYTES elements (699 050 under
// the default 8 MiB), which bounds their slices to twice the limit; a
// client with more elements sends them as raw_input_contents, one slice an
// input.
func (g *GRPC) Codec() encoding.CodecV2 {
	return &inferCodec{base: encoding.GetCodecV2("proto"), maxElements: int(min(g.h.maxBody/12, math.MaxInt32)),
		maxDecoded: int(min(g.h.maxBody, math.MaxInt32/2) * 2)}
}

// maxTensorEntries bounds the inputs, outputs and raw contents of one gRPC
// call together, and its parameters (see Codec).
const maxTensorEntries = 4096

type inferCodec struct {
	base        encoding.CodecV2
	maxElements int
	maxDecoded  int // bytes of numeric contents and shapes decoded
}

func (c *inferCodec) Name() string { return c.base.Name() }

func (c *inferCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *inferCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*inferencepb.ModelInferRequest)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	wire := buf.ReadOnlyData()
	if why, ok := notGzip(wire); ok {
		refuseRequest(req, nil, fieldMalformed, "the message is not valid gzip data, as its grpc-encoding says it is: "+why)
		return nil
	}
	// A message that is not well formed is left to Unmarshal to refuse.
	n := countEntries(wire)
	// Refusals are not errors: gRPC would answer any error of the codec's
	// as INTERNAL. The request goes on, undecoded but for the refusal,
	// which ModelInfer answers (see codecRefusal).
	refuse := func(what string, got, most int, hint string) error {
		refuseRequest(req, wire, fieldTooLarge, "the request holds "+strconv.Itoa(got)+" "+what+", over the "+strconv.Itoa(most)+" one call may carry"+hint)
		return nil
	}
	switch {
	case n.tensors > maxTensorEntries:
		return refuse("entries of inputs, outputs and raw_input_contents", n.tensors, maxTensorEntries, "")
	case n.parameters > maxTensorEntries:
		return refuse("parameters", n.parameters, maxTensorEntries, "")
	case n.elements > c.maxElements:
		return refuse("BYTES elements in contents", n.elements, c.maxElements, " (the body limit, --max-body, / 12); send them in raw_input_contents")
	case n.decoded > c.maxDecoded:
		// A zero is a byte on the wire, and 8 in an int64: 8 MiB of them
		// held 64 MiB decoded, and as much again converted.
		return refuse("bytes of numbers in contents and shapes once decoded", n.decoded, c.maxDecoded, " (twice the body limit, --max-body); send them in raw_input_contents")
	}
	if err := proto.Unmarshal(wire, req); err != nil {
		// A client's mistake, as a malformed body is over REST: 400.
		refuseRequest(req, wire, fieldMalformed, "the message is not a well-formed ModelInferRequest: "+err.Error())
		return nil
	}
	// A client's own unknown fields mean nothing here, and may not pass
	// for a refusal of the codec's.
	req.ProtoReflect().SetUnknown(nil)
	return nil
}

// The field numbers under which the codec leaves its refusal in a request
// it did not decode, by kind: the largest protobuf allows, among the
// request's unknown fields, where no field of the protocol is. Only the
// codec leaves unknown fields in a request it hands on.
const (
	fieldTooLarge  = protowire.MaxValidNumber     // RESOURCE_EXHAUSTED, as a 413
	fieldMalformed = protowire.MaxValidNumber - 1 // INVALID_ARGUMENT, as a 400
)

// refuseRequest leaves req, whose wire form is wire, undecoded but for
// msg, the codec's refusal, under field, its kind, and the names of the
// request, as far as they are well formed: its model, version and id,
// which a refusal on a stream is answered with (see ModelStreamInfer).
func refuseRequest(req *inferencepb.ModelInferRequest, wire []byte, field protowire.Number, msg string) {
	proto.Reset(req)
	eachField(wire, func(num protowire.Number, typ protowire.Type, v []byte) {
		if typ != protowire.BytesType || !utf8.Valid(v) { // a string, as the answer must hold it
			return
		}
		switch num {
		case fieldModelName:
			req.ModelName = string(v)
		case fieldModelVersion:
			req.ModelVersion = string(v)
		case fieldID:
			req.Id = string(v)
		}
	})
	b := protowire.AppendTag(nil, field, protowire.BytesType)
	req.ProtoReflect().SetUnknown(protowire.AppendString(b, msg))
}

// codecRefusal returns the codec's refusal of req and its kind, if it
// left one; field is 0 when it did not.
func codecRefusal(req *inferencepb.ModelInferRequest) (msg string, field protowire.Number) {
	unknown := req.ProtoReflect().GetUnknown()
	if len(unknown) == 0 {
		return "", 0
	}
	eachField(unknown, func(num protowire.Number, typ protowire.Type, v []byte) {
		if (num == fieldTooLarge || num == fieldMalformed) && typ == protowire.BytesType {
			msg, field = string(v), num
		}
	})
	return msg, field
}

// The field numbers countEntries and refuseRequest follow.
const (
	fieldModelName         = 1 // ModelInferRequest.model_name
	fieldModelVersion      = 2 // ModelInferRequest.model_version
	fieldID                = 3 // ModelInferRequest.id
	fieldRequestParameters = 4 // ModelInferRequest.parameters
	fieldInputs            = 5 // ModelInferRequest.inputs
	fieldOutputs           = 6 // ModelInferRequest.outputs
	fieldRawContents       = 7 // ModelInferRequest.raw_input_contents
	fieldShape             = 3 // InferInputTensor.shape
	fieldInputParameters   = 4 // InferInputTensor.parameters
	fieldContents          = 5 // InferInputTensor.contents
	fieldOutputParameters  = 2 // InferRequestedOutputTensor.parameters
	fieldFP32Contents      = 6 // InferTensorContents.fp32_contents
	fieldFP64Contents      = 7 // InferTensorContents.fp64_contents
	fieldBytesContents     = 8 // InferTensorContents.bytes_contents
)

// decodedSize is the bytes one element of field num of
// InferTensorContents takes decoded, but for bytes_contents: bool 1,
// int32 and uint32 4, int64, uint64 and float64 8, float32 4.
var decodedSize = [...]int{1: 1, 2: 4, 3: 8, 4: 4, 5: 8, 6: 4, 7: 8}

// entryCounts are the repeated entries of a ModelInferRequest that each
// decode to an object or slice of their own, and the bytes its numbers
// take decoded.
type entryCounts struct{ tensors, parameters, elements, decoded int }

// numbersIn is the count of numbers of a field whose wire type is typ and
// value, if packed, v: packed fixed-size numbers take fixed bytes each,
// packed varints (fixed 0) end each in a byte under 0x80; unpacked, a
// field is one number.
func numbersIn(typ protowire.Type, v []byte, fixed int) int {
	switch {
	case typ != protowire.BytesType:
		return 1
	case fixed > 0:
		return len(v) / fixed
	}
	n := 0
	for _, b := range v {
		if b < 0x80 {
			n++
		}
	}
	return n
}

// countEntries counts the entries of a ModelInferRequest in its wire form,
// as far as it is well formed.
func countEntries(b []byte) entryCounts {
	var n entryCounts
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) {
		if typ != protowire.BytesType {
			return
		}
		switch num {
		case fieldRequestParameters:
			n.parameters++
		case fieldRawContents:
			n.tensors++
		case fieldOutputs:
			n.tensors++
			eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte) {
				if num == fieldOutputParameters && typ == protowire.BytesType {
					n.parameters++
				}
			})
		case fieldInputs:
			n.tensors++
			eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) {
				switch {
				case num == fieldShape:
					n.decoded += 8 * numbersIn(typ, v, 0)
				case typ != protowire.BytesType:
				case num == fieldInputParameters:
					n.parameters++
				case num == fieldContents:
					eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) {
						switch {
						case num == fieldBytesContents && typ == protowire.BytesType:
							n.elements++
						case num > 0 && int(num) < len(decodedSize):
							size, fixed := decodedSize[num], 0
							if num == fieldFP32Contents || num == fieldFP64Contents {
								fixed = size
							}
							n.decoded += size * numbersIn(typ, v, fixed)
						}
					})
				}
			})
		}
	})
	return n
}

// eachField calls f with each field of the message b, and the value of
// those of the bytes type; it stops at the first that is not well formed.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return
		}
		f(num, typ, v)
		b = b[n:]
	}
}
