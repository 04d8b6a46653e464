package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	pb "github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// gzipped is data compressed with gzip.
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawGzipCall calls method on addr with messages, each sent as it is,
// flagged compressed, under grpc-encoding gzip: what no client library
// sends when its data is broken. It returns the answers' messages,
// uncompressed, and the call's grpc-status and grpc-message.
func rawGzipCall(t *testing.T, addr, method string, messages ...[]byte) (answers [][]byte, code, msg string) {
	t.Helper()
	conn, fr := rawCallWith(t, addr, method, [][2]string{{"grpc-encoding", "gzip"}, {"grpc-accept-encoding", "gzip"}})
	_ = conn.SetDeadline(time.Now().Add(requestTimeout))
	for i, m := range messages {
		frame := append([]byte{1}, binary.BigEndian.AppendUint32(nil, uint32(len(m)))...)
		if err := fr.WriteData(1, i == len(messages)-1, append(frame, m...)); err != nil {
			t.Fatal(err)
		}
	}
	var data []byte
	dec := hpack.NewDecoder(4096, nil)
	for code == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%s: the call's answer: %v", method, err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			data = append(data, f.Data()...)
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, field := range fields {
				switch field.Name {
				case "grpc-status":
					code = field.Value
				case "grpc-message":
					msg = field.Value
				}
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%s: the call was reset (%v)", method, f.ErrCode)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}
	for len(data) >= 5 {
		n := int(binary.BigEndian.Uint32(data[1:5]))
		m := data[5 : 5+n]
		if data[0] == 1 {
			r, err := gzip.NewReader(bytes.NewReader(m))
			if err != nil {
				t.Fatalf("%s: an answer flagged compressed: %v", method, err)
			}
			if m, err = io.ReadAll(r); err != nil {
				t.Fatalf("%s: an answer flagged compressed: %v", method, err)
			}
		}
		answers = append(answers, m)
		data = data[5+n:]
	}
	return answers, code, msg
}

// TestGRPCBrokenGzipIsTheClientsMistake: a message flagged compressed
// under grpc-encoding gzip whose data is not gzip, or is cut short, is a
// malformed message, the client's mistake: INVALID_ARGUMENT naming it,
// where grpc-go ends the call INTERNAL; and on a stream, an answer to that
// request alone, where grpc-go ended the call, and with it the requests
// under way. Good gzip is read, and answered in gzip.
func TestGRPCBrokenGzipIsTheClientsMistake(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "sleep:300ms,0", "--max-latency", "1ms", "--grpc-listen", addr)
	request := func(id string) []byte {
		b, err := proto.Marshal(sleepRequest(id, "item "+id))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := gzipped(t, request("good"))
	broken := map[string][]byte{
		"not gzip":  []byte("plain bytes"),
		"cut short": good[:len(good)-12],
		"empty":     nil,
	}
	for name, m := range broken {
		_, code, msg := rawGzipCall(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName, m)
		if code != "3" || !strings.Contains(msg, "not valid gzip data") {
			t.Errorf("ModelInfer, %s: grpc-status %s %q; want 3 (INVALID_ARGUMENT) saying the data is not valid gzip", name, code, msg)
		}
	}
	// Read no further than the limit (8 MiB): 16 KiB that decompress to
	// 16 MiB are refused as a message over it.
	_, code, msg := rawGzipCall(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName, gzipped(t, make([]byte, 16<<20)))
	if code != "8" || !strings.Contains(msg, "larger than max") {
		t.Errorf("ModelInfer, gzip of 16 MiB: grpc-status %s %q; want 8 (RESOURCE_EXHAUSTED)", code, msg)
	}
	answers, code, msg := rawGzipCall(t, addr, pb.GRPCInferenceService_ModelInfer_FullMethodName, good)
	var resp pb.ModelInferResponse
	if code != "0" || len(answers) != 1 || proto.Unmarshal(answers[0], &resp) != nil || resp.Id != "good" {
		t.Fatalf("ModelInfer in good gzip: grpc-status %s %q, %d answers; want its answer", code, msg, len(answers))
	}

	answers, code, msg = rawGzipCall(t, addr, pb.GRPCInferenceService_ModelStreamInfer_FullMethodName,
		gzipped(t, request("first")), broken["not gzip"], gzipped(t, request("last")))
	if code != "0" {
		t.Errorf("ModelStreamInfer: grpc-status %s %q; want 0 once every request is answered", code, msg)
	}
	got := map[string]string{}
	for _, a := range answers {
		var r pb.ModelStreamInferResponse
		if err := proto.Unmarshal(a, &r); err != nil {
			t.Fatal(err)
		}
		if r.ErrorMessage != "" {
			got[r.InferResponse.GetId()] = "error: " + r.ErrorMessage
			continue
		}
		got[r.InferResponse.GetId()] = strings.Join(bytesElementsOf(t, r.InferResponse.RawOutputContents[0]), ",")
	}
	if len(got) != 3 || got["first"] != "item first" || got["last"] != "item last" || !strings.Contains(got[""], "not valid gzip data") {
		t.Errorf("ModelStreamInfer, a broken message between two good ones: answers %q; want both answered, the broken one refused", got)
	}
}
