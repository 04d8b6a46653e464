package main

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TestLargeOutputsTogetherOverTheFrameLimit: a batch whose outputs together
// exceed the worker pipe's frame limit (256 MiB), though each fits alone,
// answers every item (before, every item of it failed as "frame too large").
// Four outputs of 70 MiB go through the plugin, its worker and the server;
// msgpack rather than JSON spares the copies that would not test anything.
func TestLargeOutputsTogetherOverTheFrameLimit(t *testing.T) {
	const items, mib = 4, 70
	// The answer, 280 MiB, may take a loaded machine's race-built client
	// longer than the default --write-timeout (30 s) to read.
	s := startPluginServer(t, "--plugin", pluginBins(t)["chaos"], "--workers", "1", "--batch-size", "4", "--worker-timeout", "2m", "--write-timeout", "3m")
	s.waitAllReady(t, 1)
	s.client.Timeout = 3 * time.Minute // hundreds of megabytes, copied from process to process
	inputs := make([]string, items)
	for i := range inputs {
		inputs[i] = "big:70"
	}
	body, err := msgpack.Marshal(map[string]any{"inputs": inputs})
	if err != nil {
		t.Fatal(err)
	}
	status, data, _ := s.post(t, "application/msgpack", body)
	var answer struct {
		Outputs []string `msgpack:"outputs"`
		Error   string   `msgpack:"error"`
	}
	if err := msgpack.Unmarshal(data, &answer); err != nil {
		t.Fatalf("%d outputs of %d MiB: status %d, answer %.300q; want every one answered", items, mib, status, data)
	}
	if status != http.StatusOK || len(answer.Outputs) != items {
		t.Fatalf("%d outputs of %d MiB: status %d, error %q; want every one answered", items, mib, status, answer.Error)
	}
	for i, out := range answer.Outputs {
		if len(out) != mib<<20 || strings.Trim(out, "b") != "" {
			t.Errorf("output %d: %d bytes, want %d bytes of the plugin's", i, len(out), mib<<20)
		}
	}
	st := s.stats(t)
	if len(st.BatchSizes) <= items || st.BatchSizes[items] != 1 {
		t.Errorf("batch sizes %v: want the %d items run as one batch", st.BatchSizes, items)
	}
	if st.Crashes != 0 {
		t.Errorf("%d crashes, want none", st.Crashes)
	}
}

// TestWorkerAndPluginGiveBackMemoryWhenIdle: after a batch with a large
// output, a worker and its plugin, once idle, return what the batch left
// in their heaps to the system, as the server does, rather than hold it
// (hundreds of megabytes each) until the runtime's collection minutes
// later.
func TestWorkerAndPluginGiveBackMemoryWhenIdle(t *testing.T) {
	const mib = 100
	const idleRSS = 80 << 20 // well above either process at rest, well below what the batch left
	s := startPluginServer(t, "--plugin", pluginBins(t)["chaos"], "--workers", "1", "--worker-timeout", "2m", "--write-timeout", "3m")
	worker := s.waitAllReady(t, 1)[0].PID
	plugin := pluginOf(t, worker)
	s.client.Timeout = 3 * time.Minute
	body, err := msgpack.Marshal(map[string]any{"inputs": []string{fmt.Sprintf("big:%d", mib)}})
	if err != nil {
		t.Fatal(err)
	}
	if status, data, _ := s.post(t, "application/msgpack", body); status != http.StatusOK || len(data) < mib<<20 {
		t.Fatalf("an output of %d MiB: status %d, %d bytes", mib, status, len(data))
	}
	for _, proc := range []struct {
		name string
		pid  int
	}{{"worker", worker}, {"plugin", plugin}} {
		var rss int
		deadline := time.Now().Add(readyTimeout)
		for rss = residentBytes(t, proc.pid); rss >= idleRSS && time.Now().Before(deadline); rss = residentBytes(t, proc.pid) {
			time.Sleep(pollInterval)
		}
		if rss >= idleRSS {
			t.Errorf("the %s holds %d MiB %s after a batch of %d MiB; want under %d MiB once idle", proc.name, rss>>20, readyTimeout, mib, idleRSS>>20)
		}
	}
}

// residentBytes reads the resident set size of process pid.
func residentBytes(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				t.Fatalf("VmRSS of %d: %q", pid, rest)
			}
			return kib << 10
		}
	}
	t.Fatalf("no VmRSS for process %d", pid)
	return 0
}
