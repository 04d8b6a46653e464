package main

import (
	"net/http"
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
	s := startPluginServer(t, "--plugin", pluginBins(t)["chaos"], "--workers", "1", "--batch-size", "4", "--worker-timeout", "2m")
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
