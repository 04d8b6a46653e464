package plugin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/internal/procstat"
)

// binDir holds the test plugins, built once for the whole test binary.
var binDir string

// envHostPlugin makes the test binary a plugin host for TestPluginDiesWithItsHost.
const envHostPlugin = "PLUGIN_TEST_HOST_PLUGIN"

func TestMain(m *testing.M) {
	if path := os.Getenv(envHostPlugin); path != "" {
		os.Exit(hostPlugin(path))
	}
	dir, err := os.MkdirTemp("", "plugin-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := 1
	if err := buildTestPlugins(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildTestPlugins(dir string) error {
	const pkg = "github.com/streamer-dev/streamer/model/plugin/internal/testplugins/"
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), pkg+"chaos", pkg+"wrongversion", pkg+"silent", pkg+"unruly")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build test plugins: %v\n%s", err, out)
	}
	return nil
}

// hostPlugin opens the chaos plugin, has it start a child, prints both
// pids and waits to be killed.
func hostPlugin(path string) int {
	m, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	item, _ := msgpack.Marshal("fork")
	outs, err := m.Predict(context.Background(), [][]byte{item})
	var child int
	if err == nil {
		err = msgpack.Unmarshal(outs[0], &child)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(m.PID(), child)
	time.Sleep(time.Minute)
	return 0
}

func bin(name string) string { return filepath.Join(binDir, name) }

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool { return procstat.Ended(pid) }

func openChaos(t *testing.T, cfg Config) *Model {
	t.Helper()
	cfg.Path = bin("chaos")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func pack(t testing.TB, values ...any) [][]byte {
	t.Helper()
	items := make([][]byte, len(values))
	for i, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		items[i] = b
	}
	return items
}

func unpack(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatalf("output %x is not msgpack: %v", b, err)
	}
	return v
}

func pidOf(t *testing.T, m *Model) int {
	t.Helper()
	outs, err := m.Predict(context.Background(), pack(t, "pid"))
	if err != nil {
		t.Fatalf("Predict pid: %v", err)
	}
	var pid int
	if err := msgpack.Unmarshal(outs[0], &pid); err != nil || pid <= 0 {
		t.Fatalf("pid output %x: %v", outs[0], err)
	}
	return pid
}

// readLine reads the first line of r with a deadline.
func readLine(t *testing.T, r *bufio.Reader, within time.Duration) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		return s
	case <-time.After(within):
		t.Fatalf("no line within %s", within)
		return ""
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a number", s)
	}
	return n
}
