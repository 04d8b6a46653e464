package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/builtin"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/workerproc"
)

// failOpenEnv, in a worker's environment, names a file whose presence
// makes the worker fail to open its model, as a model whose weights are
// gone does: a test has a worker start well, then its restarts fail.
const failOpenEnv = "SUPERVISOR_TEST_FAIL_OPEN_IF"

// failSlowlyEnv, beside failOpenEnv, is how long the worker takes to fail
// (a duration), as a model does that loads for a while before it finds its
// weights gone.
const failSlowlyEnv = "SUPERVISOR_TEST_FAIL_OPEN_AFTER"

// TestMain makes this test binary a worker process when a supervisor
// starts it, serving the built-in models, so the benchmarks and process
// tests exercise real children and real pipes without building the
// streamer binary.
func TestMain(m *testing.M) {
	if how := os.Getenv(hostilePartsEnv); how != "" && workerproc.Started() {
		hostileParts(how)
	}
	if os.Getenv(forgetfulEnv) != "" && workerproc.Started() {
		forgetfulMain()
	}
	if workerproc.Started() {
		workerproc.Main(func(_ context.Context, spec model.Spec) (model.Model, error) {
			if path := os.Getenv(failOpenEnv); path != "" {
				if _, err := os.Stat(path); err == nil {
					if after, err := time.ParseDuration(os.Getenv(failSlowlyEnv)); err == nil {
						time.Sleep(after)
					}
					return nil, errors.New("init: cannot load weights")
				}
			}
			if os.Getenv(growEnv) != "" {
				return grows{}, nil
			}
			if path := os.Getenv(orphanEnv); path != "" {
				return orphaner{pids: path}, nil
			}
			if path := os.Getenv(threadlessEnv); path != "" {
				return newThreadless(path), nil
			}
			return builtin.Open(spec)
		})
	}
	os.Exit(m.Run())
}

// processConfig starts workers running the named built-in model.
func processConfig(modelName string, workers, batchSize int) supervisor.Config {
	spec, ok, err := builtin.Parse(modelName)
	if !ok || err != nil {
		panic(fmt.Sprintf("not a built-in model: %s (%v)", modelName, err))
	}
	return supervisor.Config{
		Workers:   workers,
		BatchSize: batchSize,
		Process: supervisor.ProcessConfig{
			Model: spec,
			Path:  os.Args[0],
			Args:  []string{"-test.run=^$"},
		},
	}
}

func startBench(b *testing.B, cfg supervisor.Config) *supervisor.Streamer {
	b.Helper()
	s, err := supervisor.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	// Every slot must be ready before the clock starts.
	for deadline := time.Now().Add(30 * time.Second); ; {
		ready := 0
		for _, sl := range s.Slots() {
			if sl.State == supervisor.SlotReady {
				ready++
			}
		}
		if ready == cfg.Workers {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d workers ready", ready, cfg.Workers)
		}
		time.Sleep(time.Millisecond)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// closedLoop runs b.N single-item Predicts from clients goroutines, each
// sending its next item when the last is answered, and returns items/s.
// It also reports the CPU time this process (the supervisor and its
// callers) spent per item: on a shared machine that varies much less than
// throughput, which suffers from whatever else runs.
func closedLoop(b *testing.B, s *supervisor.Streamer, clients int) float64 {
	item, _ := msgpack.Marshal("hello, streamer")
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	cpu0 := cpuTime(b)
	for range clients {
		wg.Go(func() {
			req := [][]byte{item}
			for next.Add(1) <= int64(b.N) {
				if _, err := s.Predict(context.Background(), req); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/item")
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d requests failed", n)
	}
	return float64(b.N) / elapsed.Seconds()
}

// BenchmarkSleepLimit is scenario A: the sleep model (10ms + 100us per item)
// at batch 64, driven through the Go API with real worker processes, as a
// fraction of the physical limit workers × 64 / cost(64).
func BenchmarkSleepLimit(b *testing.B) {
	cost := builtin.NewSleep(10*time.Millisecond, 100*time.Microsecond)
	for _, workers := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s := startBench(b, processConfig("sleep:10ms,100us", workers, 64))
			perSec := closedLoop(b, s, 4*64*workers)
			limit := float64(workers) * 64 / cost.Cost(64).Seconds()
			b.ReportMetric(perSec, "items/s")
			b.ReportMetric(perSec/limit, "of-limit")
			b.ReportMetric(s.Stats().MeanBatchSize(), "mean-batch")
		})
	}
}

// BenchmarkEchoOverhead is scenario D: the echo model through worker
// processes, single-item submits, so only streamer's own cost shows.
func BenchmarkEchoOverhead(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			s := startBench(b, processConfig("echo", workers, 64))
			perSec := closedLoop(b, s, 512)
			b.ReportMetric(perSec, "items/s")
			b.ReportMetric(s.Stats().MeanBatchSize(), "mean-batch")
		})
	}
}

// BenchmarkLoneUser is scenario C: one client at a time on an idle server
// with the default --max-latency; it reports the median latency.
func BenchmarkLoneUser(b *testing.B) {
	s := startBench(b, processConfig("sleep:10ms,100us", 1, 64))
	item, _ := msgpack.Marshal("alone")
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := s.Predict(context.Background(), [][]byte{item}); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[len(latencies)/2])/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100])/float64(time.Millisecond), "p99-ms")
}
