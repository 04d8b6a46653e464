package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// jsonInputs builds a /predict body of n string items.
func jsonInputs(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"inputs": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"item-%d"`, i)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// TestRequestThatCanNeverFitGets413: a request with more items than the
// whole queue, or than --max-items, could wait forever for room; it is
// answered 413 naming the limit, with no Retry-After to follow, and a request
// within the limits is served.
func TestRequestThatCanNeverFitGets413(t *testing.T) {
	s := startServer(t, "--workers", "1", "--max-queue", "10", "--max-items", "6")
	tests := []struct {
		name  string
		items int
		want  int
		says  string
	}{
		{"over --max-items", 7, http.StatusRequestEntityTooLarge, "limit per request is 6"},
		{"over --max-queue", 11, http.StatusRequestEntityTooLarge, "limit per request is 6"},
		{"at --max-items", 6, http.StatusOK, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, hdr := s.post(t, "application/json", jsonInputs(tc.items))
			if status != tc.want {
				t.Fatalf("status %d (%s), want %d", status, body, tc.want)
			}
			if tc.says != "" && !strings.Contains(string(body), tc.says) {
				t.Errorf("body %s should name the limit (%q)", body, tc.says)
			}
			if status != http.StatusOK && hdr.Get("Retry-After") != "" {
				t.Errorf("413 with Retry-After %q: retrying cannot help", hdr.Get("Retry-After"))
			}
		})
	}
	if st := s.stats(t); st.Rejected != 7+11 {
		t.Errorf("rejected %d items, want %d", st.Rejected, 7+11)
	}
}

// TestMaxQueueBelowMaxItemsIsNamed: with --max-queue smaller than
// --max-items, the queue's size is the limit the answer names.
func TestMaxQueueBelowMaxItemsIsNamed(t *testing.T) {
	s := startServer(t, "--workers", "1", "--max-queue", "4")
	status, body, _ := s.post(t, "application/json", jsonInputs(5))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "whole queue holds (4)") {
		t.Fatalf("status %d (%s), want 413 naming the queue's size 4", status, body)
	}
}

// TestItemOverTheBatchByteLimitIsRefused: an item larger than a batch may
// carry is answered 413 at admission; it never reaches a worker, so no
// worker dies and the item is not taken for poison on a second try.
func TestItemOverTheBatchByteLimitIsRefused(t *testing.T) {
	s := startServer(t, "--workers", "1", "--max-batch-bytes", "1000")
	big := []byte(`{"inputs": ["` + strings.Repeat("x", 2000) + `"]}`)
	for try := range 2 {
		status, body, _ := s.post(t, "application/json", big)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "item 0") || !strings.Contains(string(body), "1000") {
			t.Fatalf("try %d: status %d (%s), want 413 naming the item and the limit", try, status, body)
		}
	}
	if st := s.stats(t); st.Crashes != 0 || st.Poisoned != 0 || st.Submitted != 0 {
		t.Fatalf("stats %+v: the item must be refused before it is queued", st)
	}
	if p := s.predictJSON(t, strings.Repeat("y", 900)); p.Status != http.StatusOK {
		t.Fatalf("an item within the limit: %s", p)
	}
}

// TestBatchByteLimitOverTheFrameIsRefused: serve will not start with a
// batch byte limit whose batches would not fit the pipe's frames.
func TestBatchByteLimitOverTheFrameIsRefused(t *testing.T) {
	s := launchServer(t, "--max-batch-bytes", "300000000")
	code, err := s.wait(stopTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(s.logs(), "does not fit the pipe's frame limit") {
		t.Fatalf("exit %d, output:\n%s\nwant 1 and the reason", code, s.logs())
	}
}

// TestServeRefusesFlagValuesNoServerCanUse: values that were taken for the
// default (zero or less), or that would swamp the machine, and flags that
// mean nothing without another, exit 1 at start with one line naming the
// flag, before any warning or worker.
func TestServeRefusesFlagValuesNoServerCanUse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-latency", "0"}, "--max-latency 0s: want a positive duration"},
		{[]string{"--max-latency", "-5s"}, "--max-latency -5s: want a positive duration"},
		{[]string{"--worker-timeout", "0"}, "--worker-timeout 0s: want a positive duration"},
		{[]string{"--init-timeout", "-1s"}, "--init-timeout -1s: want a positive duration"},
		{[]string{"--unavailable-after", "0"}, "--unavailable-after 0s: want a positive duration"},
		{[]string{"--grace", "-1s"}, "--grace -1s: must not be negative"},
		// Before the model loads, not once it has (a plugin's socket
		// directory made, a warning of echo printed).
		{[]string{"--read-timeout", "0"}, "--read-timeout 0s: want a positive duration"},
		{[]string{"--idle-timeout", "-1s"}, "--idle-timeout -1s: want a positive duration"},
		{[]string{"--max-connections", "0"}, "--max-connections 0: want at least 1"},
		{[]string{"--pipeline-depth", "0"}, "--pipeline-depth 0: want 1 to 1024"},
		{[]string{"--pipeline-depth", "9223372036854775807"}, "--pipeline-depth 9223372036854775807: want 1 to 1024"},
		{[]string{"--max-restarts", "0"}, "--max-restarts 0: want at least 1"},
		{[]string{"--max-body", "-1"}, "--max-body -1: want at least 1"},
		{[]string{"--workers", "100000"}, "--workers 100000: want at most 1024"},
		{[]string{"--intra-op-threads", "100000"}, "--intra-op-threads 100000: want 0 (the runtime's default) to 1024"},
		{[]string{"--intra-op-threads", "-1"}, "--intra-op-threads -1: want 0 (the runtime's default) to 1024"},
		{[]string{"--listen", ""}, "--listen is empty"},
		{[]string{"--plugin-sha256", strings.Repeat("0", 64)}, "--plugin-sha256 and --plugin-arg need --plugin"},
		{[]string{"--plugin-arg", "k=v"}, "--plugin-sha256 and --plugin-arg need --plugin"},
		{[]string{"--plugin", "/bin/true", "--model", "demo"}, `--model "demo" and --plugin both given`},
		{[]string{"--plugin", ""}, "--plugin is empty"},
		// Values that do not parse, in the words of the other refusals.
		{[]string{"--workers", "abc"}, `--workers "abc": want a whole number`},
		{[]string{"--batch-size", "0x20"}, `--batch-size "0x20": want a whole number`},
		{[]string{"--max-items", "99999999999999999999"}, `--max-items "99999999999999999999": want a whole number, and this one is out of range`},
		{[]string{"--max-latency", "10"}, `--max-latency "10": want a duration with its unit, such as 250ms, 30s or 2m`},
		{[]string{"--admin=maybe"}, `--admin "maybe": want true or false`},
		// Given empty, as by a shell variable that is not set, these
		// would serve other than asked: echo, no token, no checksum...
		{[]string{"--model", ""}, "--model is empty: give a model, or leave the flag out to serve the built-in echo"},
		{[]string{"--plugin", "/bin/true", "--plugin-sha256", ""}, "--plugin-sha256 is empty: give the binary's SHA-256, or leave the flag out to run it unchecked"},
		{[]string{"--auth-token-file", ""}, "--auth-token-file is empty: give the path of the token's file, or leave the flag out to serve without a token"},
		{[]string{"--tls-cert", "", "--tls-key", ""}, "--tls-cert is empty: give the certificate's PEM file, or leave the flag out to serve plain HTTP"},
		{[]string{"--broker", ""}, "--broker is empty: give a redis:// URL, or leave the flag out to serve alone"},
		{[]string{"--broker-ca", ""}, "--broker-ca is empty"},
		{[]string{"--memory-limit", "0"}, `--memory-limit "0": want at least 16MiB (leave it unset for no limit)`},
		{[]string{"--memory-limit", "NaN"}, `--memory-limit "NaN" is not a size`},
		{[]string{"--memory-limit", "inf"}, `--memory-limit "inf" is not a size`},
		{[]string{"--memory-limit", "1e30"}, `--memory-limit "1e30" is more bytes than any machine has`},
		{[]string{"--model", "echo", "--pad", "x=0"}, "--pad is for ONNX models, and --model echo is a built-in one"},
		{[]string{"--model", "sleep:1ms,0s", "--device", "cuda"}, "--device cuda is for ONNX models and plugins, and --model sleep:1ms,0s is a built-in one"},
		{[]string{"--model", "demo", "--pad", "x=0", "--pad", "x=1"}, `--pad "x=1": x is given twice`},
		{[]string{"--plugin", "/bin/true", "--pad", "x=0"}, "--pad is for ONNX models: a plugin pads its own inputs"},
		{[]string{"--model", "echo", "--intra-op-threads", "4"}, "--intra-op-threads is for ONNX models, and --model echo is a built-in one"},
		{[]string{"--plugin", "/bin/true", "--intra-op-threads", "4"}, "--intra-op-threads is for ONNX models: a plugin sets its own threads"},
		{[]string{"--model", "echo", "--ort-lib", "/x/libonnxruntime.so"}, "--ort-lib is for ONNX models, and --model echo is a built-in one"},
		{[]string{"--plugin", "/bin/true", "--ort-lib", "/x/libonnxruntime.so"}, "--ort-lib is for ONNX models: a plugin loads its own libraries"},
		{[]string{"--plugin", "/bin/true", "--plugin-arg", "k=1", "--plugin-arg", "k=2"}, `--plugin-arg "k=2": k is given twice`},
		{[]string{"--allow-origin", "app.example.com"}, `--allow-origin "app.example.com": want scheme://host[:port]`},
		{[]string{"--allow-origin", "https://app.example.com/page"}, `--allow-origin "https://app.example.com/page": want scheme://host[:port] alone`},
		{[]string{"--allow-origin", "https://*.example.com"}, `--allow-origin "https://*.example.com": want one origin: * stands alone for any`},
		{[]string{"--allow-origin", "http://app.example.com:99999"}, `--allow-origin "http://app.example.com:99999": port 99999: want 1 to 65535`},
		{[]string{"--allow-origin", "https://bücher.example"}, `--allow-origin "https://bücher.example": want the host in ASCII, as a browser sends it`},
		{[]string{"--listen", "::1:5005"}, "--listen ::1:5005: want host:port, an IPv6 address in brackets (as 127.0.0.1:5005, [::1]:5005, or :5005 for every interface): too many colons in address"},
		{[]string{"--listen", "127.0.0.1:http"}, `--listen 127.0.0.1:http: port "http": want a number from 1 to 65535`},
		{[]string{"--listen", "[::]:5005", "--pprof", "127.0.0.1:5005"}, "--pprof 127.0.0.1:5005: --listen takes that port too ([::]:5005): give each its own"},
		{[]string{"--listen", "127.0.0.1:5005", "--grpc-listen", "127.0.0.1:5005"}, "--grpc-listen 127.0.0.1:5005: --listen takes that port too (127.0.0.1:5005)"},
		{[]string{"--listen", "127.0.0.1:5005", "--grpc-listen", "localhost:05005"}, "--grpc-listen localhost:05005: --listen takes that port too (127.0.0.1:5005)"},
		// A browser writes these 127.0.0.1: as written, they never matched.
		{[]string{"--allow-origin", "http://127.1:8080"}, `--allow-origin "http://127.1:8080": host 127.1: write an IPv4 address as a browser does, four decimal parts without leading zeros (as 127.0.0.1)`},
		{[]string{"--allow-origin", "http://0x7f.0.0.1"}, `--allow-origin "http://0x7f.0.0.1": host 0x7f.0.0.1: write an IPv4 address as a browser does`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			s := launchServer(t, tc.args...) // no --model: the warning of echo would come first
			code, err := s.wait(readyTimeout)
			if err != nil || code != 1 {
				t.Fatalf("exit code %d, %v; want 1:\n%s", code, err, s.logs())
			}
			if out := strings.TrimSpace(s.logs()); !strings.HasPrefix(out, "streamer: "+tc.want) || strings.Contains(out, "\n") {
				t.Errorf("said:\n%s\nwant one line beginning %q", out, "streamer: "+tc.want)
			}
		})
	}
}

// TestServeWarnsOfAnOpenFilesLimitBelowItsConnections: a server that may
// open fewer files than --max-connections takes says so at start. Past
// the limit, new connections waited unanswered, never told 503, and dead
// workers could not be started again, without a word of why.
func TestServeWarnsOfAnOpenFilesLimitBelowItsConnections(t *testing.T) {
	for _, tc := range []struct {
		connections string
		warns       bool
	}{{"4096", true}, {"100", false}} {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -n 256 && exec "$0" serve --listen 127.0.0.1:0 --model echo --max-connections "$1"`, streamerBin, tc.connections)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var before []string // the lines before the server listens
		listening := false
		sc := bufio.NewScanner(stderr)
		for !listening && sc.Scan() {
			listening = strings.Contains(sc.Text(), "listening")
			before = append(before, sc.Text())
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if !listening {
			t.Fatalf("ulimit -n 256, --max-connections %s: the server did not start:\n%s", tc.connections, strings.Join(before, "\n"))
		}
		warned := strings.Contains(strings.Join(before, "\n"), "level=WARN msg=\"the open-files limit is below what --max-connections and the workers take")
		if warned != tc.warns {
			t.Errorf("ulimit -n 256, --max-connections %s: warned %v, want %v; the start's log:\n%s", tc.connections, warned, tc.warns, strings.Join(before, "\n"))
		}
	}
}
