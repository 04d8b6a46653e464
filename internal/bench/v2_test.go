package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metadataServer serves the v2 metadata of a model named demo.
func metadataServer(t *testing.T, metadata string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v2/models/demo" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(metadata))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

const demoMetadata = `{"name": "demo", "platform": "onnxruntime_onnx",
	"inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}],
	"outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, 3]}]}`

func TestV2RequestJSON(t *testing.T) {
	base := metadataServer(t, demoMetadata)
	cfg := Config{Protocol: ProtocolV2, ModelName: "demo", ItemsPerRequest: 2}
	path, body, headers, err := cfg.v2Request(context.Background(), http.DefaultClient, base, []any{5.1, 3.5, 1.4, 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if path != "/v2/models/demo/infer" || len(headers) != 0 {
		t.Fatalf("path %q, headers %q; want /v2/models/demo/infer and none", path, headers)
	}
	var req struct {
		Inputs []struct {
			Name, Datatype string
			Shape          []int64
			Data           []float64
		}
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	in := req.Inputs[0]
	if len(req.Inputs) != 1 || in.Name != "features" || in.Datatype != "FP32" || !slices.Equal(in.Shape, []int64{2, 4}) ||
		!slices.Equal(in.Data, []float64{5.1, 3.5, 1.4, 0.2, 5.1, 3.5, 1.4, 0.2}) {
		t.Fatalf("body %s: want features FP32 [2, 4] with the item twice", body)
	}
}

func TestV2RequestBinary(t *testing.T) {
	base := metadataServer(t, `{"name": "demo", "inputs": [
		{"name": "ids", "datatype": "INT64", "shape": [-1, -1]},
		{"name": "text", "datatype": "BYTES", "shape": [-1]}]}`)
	cfg := Config{Protocol: ProtocolV2Binary, ModelName: "demo", ItemsPerRequest: 3}
	item := map[string]any{"ids": []any{1.0, -2.0}, "text": "hi"}
	_, body, headers, err := cfg.v2Request(context.Background(), http.DefaultClient, base, item)
	if err != nil {
		t.Fatal(err)
	}
	if len(headers) != 1 || !strings.HasPrefix(headers[0], "Inference-Header-Content-Length: ") {
		t.Fatalf("headers %q; want the header length", headers)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(headers[0], "Inference-Header-Content-Length: "))
	var req struct {
		Inputs []struct {
			Name       string
			Shape      []int64
			Data       []any
			Parameters map[string]int
		}
		Parameters map[string]bool
	}
	if err := json.Unmarshal(body[:n], &req); err != nil {
		t.Fatalf("header %s: %v", body[:n], err)
	}
	raw := body[n:]
	ids, text := req.Inputs[0], req.Inputs[1]
	if !req.Parameters["binary_data_output"] || ids.Data != nil || ids.Parameters["binary_data_size"] != 3*2*8 ||
		!slices.Equal(ids.Shape, []int64{3, 2}) || !slices.Equal(text.Shape, []int64{3}) || text.Parameters["binary_data_size"] != 3*(4+2) {
		t.Fatalf("header %s: want ids [3, 2] of 48 bytes, text [3] of 18, and binary outputs asked for", body[:n])
	}
	if len(raw) != 48+18 {
		t.Fatalf("%d binary bytes; want 66", len(raw))
	}
	if v := int64(binary.LittleEndian.Uint64(raw[8:])); v != -2 {
		t.Fatalf("second id %d; want -2", v)
	}
	if l := binary.LittleEndian.Uint32(raw[48:]); l != 2 || string(raw[52:54]) != "hi" {
		t.Fatalf("first text element %q (length %d); want hi", raw[52:54], l)
	}
}

func TestV2RequestErrors(t *testing.T) {
	base := metadataServer(t, demoMetadata)
	for _, tc := range []struct {
		name string
		cfg  Config
		item any
		want string
	}{
		{"no model name", Config{Protocol: ProtocolV2}, []any{1.0}, "v2 name is not known"},
		{"unknown model", Config{Protocol: ProtocolV2, ModelName: "other"}, []any{1.0}, "404"},
		{"ragged", Config{Protocol: ProtocolV2, ModelName: "demo", ItemsPerRequest: 1}, []any{[]any{1.0}, 2.0}, `--input: input "features": ragged array`},
		{"string for a number", Config{Protocol: ProtocolV2Binary, ModelName: "demo", ItemsPerRequest: 1}, []any{"x"},
			`--input: input "features": element "x" is not a number or a boolean, as FP32 wants`},
		{"the default input for numbers, binary", Config{Protocol: ProtocolV2Binary, ModelName: "demo", ItemsPerRequest: 1}, "hello, streamer",
			`--input: input "features": element "hello, streamer" is not a number or a boolean`},
		{"the default input for numbers, JSON", Config{Protocol: ProtocolV2, ModelName: "demo", ItemsPerRequest: 1}, "hello, streamer",
			`--input: input "features": element "hello, streamer" is not a number or a boolean`},
	} {
		if _, _, _, err := tc.cfg.v2Request(context.Background(), http.DefaultClient, base, tc.item); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want one containing %q", tc.name, err, tc.want)
		}
	}
	// gRPC builds its request from the same metadata, and says the same.
	grpcCfg := Config{Protocol: ProtocolGRPC, ModelName: "demo", ItemsPerRequest: 1, Concurrency: 1}
	want := `--input: input "features": element "hello, streamer" is not a number or a boolean`
	if _, _, err := grpcCfg.grpcSender(http.DefaultClient, base, "127.0.0.1:1", "hello, streamer"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("grpc, the default input for numbers: error %v; want one containing %q", err, want)
	}
	bad := Config{Protocol: "soap", Concurrency: 1, ItemsPerRequest: 1, Duration: 1, Input: "1", RequestTimeout: time.Second}
	if _, err := bad.check(); err == nil || !strings.Contains(err.Error(), `--protocol "soap"`) {
		t.Errorf("protocol soap: error %v; want it named", err)
	}
}

func TestAppendNumberFP16(t *testing.T) {
	b, err := appendNumber(nil, "FP16", 1.5)
	if err != nil || binary.LittleEndian.Uint16(b) != 0x3e00 {
		t.Fatalf("FP16 1.5 = %x, %v; want 3e00", b, err)
	}
	b, _ = appendNumber(nil, "FP64", math.Pi)
	if math.Float64frombits(binary.LittleEndian.Uint64(b)) != math.Pi {
		t.Fatalf("FP64 pi did not round-trip")
	}
}
