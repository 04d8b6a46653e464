package plugin

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// BenchmarkPredict measures what the plugin hop adds to a batch of 64 small
// items: the same echo model (decode each item as a string, answer with the
// item) called in this process ("direct") and through a real plugin process
// over go-plugin's gRPC connection ("plugin"). The plugin run also reports
// the difference as overhead-µs/batch; "plugin-gomaxprocs1" is the same with
// the host on one thread, as a streamer worker runs.
//
//	go test -run '^$' -bench Predict -benchtime 2000x ./model/plugin
func BenchmarkPredict(b *testing.B) {
	const batch = 64
	values := make([]any, batch)
	for i := range values {
		values[i] = fmt.Sprintf("small item %04d", i)
	}
	items := pack(b, values...)

	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := echoDecode(items); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plugin", func(b *testing.B) { benchPlugin(b, items, 0) })
	// A worker serving a plugin runs with GOMAXPROCS=1 (see OpenSpec).
	b.Run("plugin-gomaxprocs1", func(b *testing.B) { benchPlugin(b, items, 1) })
}

// benchPlugin measures Predict through a real plugin process, with the host
// (this process) at the given GOMAXPROCS, 0 leaving it as it is.
func benchPlugin(b *testing.B, items [][]byte, procs int) {
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	m, err := Open(context.Background(), Config{Path: bin("chaos")})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	for range 100 { // warm the connection up
		if _, err := m.Predict(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	const directRuns = 2000
	for range directRuns {
		_, _ = echoDecode(items)
	}
	direct := time.Since(start) / directRuns

	b.ResetTimer()
	start = time.Now()
	for b.Loop() {
		outs, err := m.Predict(ctx, items)
		if err != nil || len(outs) != len(items) {
			b.Fatalf("Predict: %d outputs, %v", len(outs), err)
		}
	}
	perBatch := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64((perBatch-direct).Nanoseconds())/1e3, "overhead-µs/batch")
}

// echoDecode is the work the test plugin does for ordinary items.
func echoDecode(items [][]byte) ([][]byte, error) {
	outs := make([][]byte, len(items))
	for i, it := range items {
		var s string
		if err := msgpack.Unmarshal(it, &s); err != nil {
			return nil, err
		}
		outs[i] = it
	}
	return outs, nil
}
