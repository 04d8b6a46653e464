package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// TestEmbeddedServerWithItsOwnWorkers builds this program, runs it as a
// server whose workers are the same binary started again, and checks that
// requests are answered by worker processes with the settings the server
// gave them, that one bad item fails alone, and that SIGTERM drains it.
func TestEmbeddedServerWithItsOwnWorkers(t *testing.T) {
	s := startEmbed(t, buildEmbed(t), "--workers", "2", "--suffix", "?!")
	cmd, stderr, exited, base := s.cmd, s.log, s.exited, s.base

	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			text := fmt.Sprintf("hello %d", i)
			status, got := shoutAt(t, base, `{"texts":["`+text+`","x"]}`)
			want := []string{strings.ToUpper(text) + "?!", "X?!"}
			if status != http.StatusOK || len(got.Texts) != 2 || got.Texts[0] != want[0] || got.Texts[1] != want[1] {
				t.Errorf("request %d: %d %+v, want %q", i, status, got, want)
			}
		})
	}
	wg.Wait()
	for _, bad := range []string{"42", "null"} {
		if status, got := shoutAt(t, base, `{"texts":["fine", `+bad+`]}`); status != http.StatusUnprocessableEntity || !strings.Contains(got.Error, "item 1") || !strings.Contains(got.Error, "want a string") {
			t.Errorf("%s among the texts: %d %+v, want 422 naming item 1", bad, status, got)
		}
	}

	// Both workers are children of the server, not the server itself, and
	// each names its model as it described itself, with its own pid.
	pids := stderr.await(t, regexp.MustCompile(`"worker ready" slot=\d pid=(\d+) .*model="shout\\"\?!\\" in pid (\d+)"`), 2)
	if len(pids) != 2 || pids[0][1] == pids[1][1] || pids[0][1] == fmt.Sprint(cmd.Process.Pid) || pids[0][1] != pids[0][2] || pids[1][1] != pids[1][2] {
		t.Errorf("worker ready lines %q: want two worker processes apart from the server (pid %d), each naming its model", pids, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM the server exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not exit within 30s of SIGTERM")
	}
}

// echoPredictor answers each item with itself, counting the calls.
type echoPredictor struct{ calls int }

func (p *echoPredictor) Predict(_ context.Context, items [][]byte) ([][]byte, error) {
	p.calls++
	return items, nil
}

// TestShoutBodyRefusals: a body over the limit gets 413, one that is not
// the JSON asked for 400, and neither reaches the model; one at the limit
// is read.
func TestShoutBodyRefusals(t *testing.T) {
	sized := func(n int) string { // a request of n bytes
		const frame = `{"texts":[""]}`
		return `{"texts":["` + strings.Repeat("a", n-len(frame)) + `"]}`
	}
	tests := []struct {
		name  string
		body  string
		want  int
		calls int
	}{
		{"at the limit", sized(maxShoutBody), http.StatusOK, 1},
		{"over the limit", sized(maxShoutBody + 1), http.StatusRequestEntityTooLarge, 0},
		{"not JSON", `{"texts":`, http.StatusBadRequest, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := &echoPredictor{}
			rec := httptest.NewRecorder()
			shoutHandler(model).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/shout", strings.NewReader(tc.body)))
			var a shoutAnswer
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || rec.Code != tc.want || model.calls != tc.calls {
				t.Errorf("a body of %d bytes: %d %q (%v), the model called %d times; want %d and %d calls", len(tc.body), rec.Code, a.Error, err, model.calls, tc.want, tc.calls)
			}
			if tc.want != http.StatusOK && !strings.HasPrefix(a.Error, "body: ") {
				t.Errorf("refusal %q does not say the body is at fault", a.Error)
			}
		})
	}
}

// awaitAddress reads the server's stdout until it says where it listens.
func awaitAddress(t *testing.T, stdout io.Reader, exited <-chan error) string {
	t.Helper()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return a
	case err := <-exited:
		t.Fatalf("the server exited before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not listen within 30s")
	}
	return ""
}

func shoutAt(t *testing.T, base, body string) (int, shoutAnswer) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Post(base+"/shout", "application/json", strings.NewReader(body))
	if err != nil {
		t.Errorf("POST /shout: %v", err)
		return 0, shoutAnswer{}
	}
	defer resp.Body.Close()
	var a shoutAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Errorf("answer of %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, a
}

// lockedBuffer collects the server's log from one goroutine while the test
// reads it from another; changed is signalled after every write.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

// await waits until the log holds n matches of re, and returns them.
func (b *lockedBuffer) await(t *testing.T, re *regexp.Regexp, n int) [][]string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if m := re.FindAllStringSubmatch(b.String(), -1); len(m) >= n {
			return m
		}
		select {
		case <-b.changed:
		case <-deadline:
			t.Fatalf("the log did not show %d lines matching %s within 30s", n, re)
			return nil
		}
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestEmbeddedServersShareRedis runs two copies of this program on one
// Redis, each sending its requests there (a front end) and serving those
// of both on its workers (a node): requests to either are answered. A
// copy of another suffix, another model, refuses to start, saying so; and
// SIGTERM drains each.
func TestEmbeddedServersShareRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	bin := buildEmbed(t)
	copies := []*embedded{
		startEmbed(t, bin, "--workers", "1", "--suffix", "?!", "--broker", rs.URL()),
		startEmbed(t, bin, "--workers", "1", "--suffix", "?!", "--broker", rs.URL()),
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			text := fmt.Sprintf("hello %d", i)
			status, got := shoutAt(t, copies[i%2].base, `{"texts":["`+text+`"]}`)
			if want := strings.ToUpper(text) + "?!"; status != http.StatusOK || len(got.Texts) != 1 || got.Texts[0] != want {
				t.Errorf("request %d: %d %+v, want %q", i, status, got, want)
			}
		})
	}
	wg.Wait()
	// Every item went through Redis's stream (or a node's own).
	added := 0
	for _, key := range strings.Fields(rs.Do(t, "KEYS", "streamer:items*")) {
		m := regexp.MustCompile(`entries-added\D+(\d+)`).FindStringSubmatch(rs.Do(t, "XINFO", "STREAM", key))
		if m == nil {
			t.Fatalf("XINFO STREAM %s says no entries-added", key)
		}
		n, _ := strconv.Atoi(m[1])
		added += n
	}
	if added != 40 {
		t.Errorf("%d items went through Redis; want the 40 sent", added)
	}
	if label := rs.Do(t, "HGET", "streamer:model", "label"); label != `shout with suffix "?!"` {
		t.Errorf("the prefix's model is %q; want the copies' shout", label)
	}

	other := exec.Command(bin, "--listen", "127.0.0.1:0", "--workers", "1", "--suffix", "!", "--broker", rs.URL())
	out, err := other.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another model is served under this key prefix") || !strings.Contains(string(out), "serve \\\"shout with suffix") {
		t.Errorf("a copy of another suffix: %v, %s; want it refused, naming the model served", err, out)
	}

	for _, c := range copies {
		if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range copies {
		select {
		case err := <-c.exited:
			if err != nil {
				t.Errorf("after SIGTERM a copy exited with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a copy did not exit within 30s of SIGTERM")
		}
	}
}

// embedded is this program, running.
type embedded struct {
	cmd    *exec.Cmd
	log    *lockedBuffer
	exited chan error
	base   string // its URL
}

// buildEmbed builds this program.
func buildEmbed(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "embed")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startEmbed runs bin with args, on a free port, until the test ends, and
// returns once it listens.
func startEmbed(t *testing.T, bin string, args ...string) *embedded {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &embedded{cmd: cmd, log: &lockedBuffer{changed: make(chan struct{}, 1)}, exited: make(chan error, 1)}
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", s.log.String())
		}
	})
	s.base = "http://" + awaitAddress(t, stdout, s.exited)
	return s
}
