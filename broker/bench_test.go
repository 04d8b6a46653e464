package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

var echo = model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })

// The cost per item of the Go API through Redis, against the same in-process
// streamer called directly: run both with -cpu and compare ns/op.
//
//	go test -run '^$' -bench 'Predict' -benchtime 3s ./broker

func BenchmarkPredictLocal(b *testing.B) {
	st := localStreamer(b)
	benchPredict(b, st.Predict)
}

func BenchmarkPredictThroughRedis(b *testing.B) {
	benchPredict(b, throughRedis(b, localStreamer(b)).predict)
}

func localStreamer(b *testing.B) *supervisor.Streamer {
	return startStreamer(b, supervisor.Config{InProcess: echo, Workers: 2, BatchSize: 64})
}

// benchPredict runs one-item requests from 64 goroutines per CPU.
func benchPredict(b *testing.B, predict func(context.Context, [][]byte) ([][]byte, error)) {
	item := [][]byte{[]byte("hello, streamer")}
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := predict(context.Background(), item); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The sleep model's batching at moderate load on 4 workers, side by side in
// one run: a streamer called directly, the same with callers who take 2ms
// to come back (a client across a network), through Redis to one node of 4
// workers, and to two nodes of 2. A closed loop of one-item requests,
// reported as items/s, the fraction of the best possible for the model's
// cost and the mean batch.
//
//	go test -run '^$' -bench 'ClosedLoop' -benchtime 2000x ./broker

const (
	loopFixed   = 10 * time.Millisecond
	loopPerItem = 100 * time.Microsecond
	loopWorkers = 4
	loopBatch   = 64
)

var sleepModel = model.Func(func(ctx context.Context, items [][]byte) ([][]byte, error) {
	t := time.NewTimer(loopFixed + time.Duration(len(items))*loopPerItem)
	defer t.Stop()
	select {
	case <-t.C:
		return items, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
})

func BenchmarkClosedLoop(b *testing.B) {
	for _, clients := range []int{8, 64, 128, 256, 512} {
		for _, policy := range []supervisor.Batching{supervisor.BatchingGreedy, supervisor.BatchingAdaptive} {
			b.Run(fmt.Sprintf("clients=%d/%s/local", clients, policy), func(b *testing.B) {
				st := startStreamer(b, loopConfig(policy, loopWorkers))
				closedLoop(b, st.Predict, clients, nil, st)
			})
			b.Run(fmt.Sprintf("clients=%d/%s/local+2ms", clients, policy), func(b *testing.B) {
				st := startStreamer(b, loopConfig(policy, loopWorkers))
				closedLoop(b, func(ctx context.Context, items [][]byte) ([][]byte, error) {
					out, err := st.Predict(ctx, items)
					time.Sleep(2 * time.Millisecond)
					return out, err
				}, clients, nil, st)
			})
			b.Run(fmt.Sprintf("clients=%d/%s/redis", clients, policy), func(b *testing.B) {
				st := startStreamer(b, loopConfig(policy, loopWorkers))
				r := throughRedis(b, st)
				closedLoop(b, r.predict, clients, r.cpu, st)
			})
			b.Run(fmt.Sprintf("clients=%d/%s/redis-2-nodes", clients, policy), func(b *testing.B) {
				st1 := startStreamer(b, loopConfig(policy, loopWorkers/2))
				st2 := startStreamer(b, loopConfig(policy, loopWorkers/2))
				r := throughRedis(b, st1, st2)
				closedLoop(b, r.predict, clients, r.cpu, st1, st2)
			})
		}
	}
}

func loopConfig(policy supervisor.Batching, workers int) supervisor.Config {
	return supervisor.Config{InProcess: sleepModel, Workers: workers, BatchSize: loopBatch, Batching: policy, MaxLatency: 50 * time.Millisecond}
}

// closedLoop runs b.N one-item requests from clients goroutines, each
// sending its next when its last is answered, and reports the batches of
// the streamers that ran them, how long a caller's turn spends outside
// them ("away-ms": the d of BENCHMARKS.md's bound, the time from an answer
// at the streamer to the caller's next item there) and, given redisCPU,
// Redis's CPU time per item.
func closedLoop(b *testing.B, predict func(context.Context, [][]byte) ([][]byte, error), clients int, redisCPU func() time.Duration, ran ...*supervisor.Streamer) {
	item := [][]byte{[]byte("x")}
	counts := func() (answered, batches uint64, inside float64) {
		for _, st := range ran {
			s := st.Stats()
			answered, batches = answered+s.Answered, batches+s.Batches
			inside += s.Latency.EndToEnd.SumSeconds
		}
		return answered, batches, inside
	}
	answered, batches, inside := counts()
	var cpu time.Duration
	if redisCPU != nil {
		cpu = redisCPU()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := predict(context.Background(), item); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	answeredAfter, batchesAfter, insideAfter := counts()
	itemsPerS := float64(b.N) / elapsed.Seconds()
	perWorker := (clients + loopWorkers - 1) / loopWorkers
	best := float64(min(clients, loopWorkers*loopBatch)) / (loopFixed + time.Duration(min(perWorker, loopBatch))*loopPerItem).Seconds()
	b.ReportMetric(itemsPerS, "items/s")
	b.ReportMetric(itemsPerS/best, "of-best")
	b.ReportMetric(float64(answeredAfter-answered)/float64(max(batchesAfter-batches, 1)), "batch")
	// A caller's turns take elapsed × clients / N on the mean, of which
	// the streamers hold its item for their end-to-end time.
	turn := elapsed.Seconds() * float64(clients) / float64(b.N)
	b.ReportMetric((turn-(insideAfter-inside)/float64(max(answeredAfter-answered, 1)))*1000, "away-ms")
	if redisCPU != nil {
		b.ReportMetric(float64((redisCPU()-cpu).Microseconds())/float64(b.N), "redis-us/item")
	}
}

// redisPath is a front end's Predict, and the CPU time its Redis has used
// so far (its user and system time, as INFO reports them).
type redisPath struct {
	predict func(context.Context, [][]byte) ([][]byte, error)
	cpu     func() time.Duration
}

// throughRedis starts a Redis, a node running each of nodes and a front
// end.
func throughRedis(b *testing.B, nodes ...*supervisor.Streamer) redisPath {
	rs := redistest.Start(b, redistest.Options{})
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	b.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range nodes {
		n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: st, Capacity: st.Workers() * loopBatch * 2})
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	}
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		b.Fatal(err)
	}
	if err := fe.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fe.Close(context.Background()) })
	// The first answer says a node is there and reading.
	if _, err := fe.Predict(ctx, [][]byte{[]byte("warm")}); err != nil {
		b.Fatal(err)
	}
	return redisPath{predict: fe.Predict, cpu: func() time.Duration { return usedCPU(b, admin) }}
}

// usedCPU is the CPU time rdb's server has used, user and system.
func usedCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var used time.Duration
	found := 0
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		seconds, err := strconv.ParseFloat(value, 64)
		if err != nil {
			b.Fatalf("INFO cpu: %s: %v", line, err)
		}
		used += time.Duration(seconds * float64(time.Second))
		found++
	}
	if found != 2 {
		b.Fatalf("INFO cpu has no used_cpu_user and used_cpu_sys:\n%s", info)
	}
	return used
}

// The floor under a pass through Redis, without streamer: a script that
// adds a closed loop's cohort of items (16 of them, as at 64 clients on 4
// workers) to a stream, after the quiet of a batch's run (10 ms), and a
// reader blocked on that stream, as a node's. It reports the medians, in
// microseconds, from the script's send to its reply ("reply-us") and to
// the reader's wake with the items ("reader-us"), and a PING's after the
// same quiet ("ping-us"): what a machine's wake-up from idle costs each
// pass of a turn, against which BenchmarkClosedLoop's away-ms (two passes
// and the rest) compares.
//
//	go test -run '^$' -bench 'BarePass' -benchtime 300x ./broker
func BenchmarkBarePass(b *testing.B) {
	rs := redistest.Start(b, redistest.Options{})
	ctx := context.Background()
	writer := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	reader := redis.NewClient(&redis.Options{Addr: rs.Addr(), ReadTimeout: -1})
	b.Cleanup(func() { _ = writer.Close(); _ = reader.Close() })
	if err := writer.XGroupCreateMkStream(ctx, "s", "g", "0").Err(); err != nil {
		b.Fatal(err)
	}
	add := redis.NewScript(`for i = 1, #ARGV do redis.call('XADD', KEYS[1], '*', 'h', '0', 'v', ARGV[i]) end return #ARGV`)
	items := make([]any, 16)
	for i := range items {
		items[i] = "x"
	}
	if err := add.Load(ctx, writer).Err(); err != nil {
		b.Fatal(err)
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	var reply, woke, ping []time.Duration
	b.ResetTimer()
	for range b.N {
		read := make(chan time.Time, 1)
		go func() {
			err := reader.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 64}).Err()
			if err != nil {
				b.Error(err)
			}
			read <- time.Now()
		}()
		time.Sleep(loopFixed)
		start := time.Now()
		if err := add.Run(ctx, writer, []string{"s"}, items...).Err(); err != nil {
			b.Fatal(err)
		}
		reply = append(reply, time.Since(start))
		woke = append(woke, (<-read).Sub(start))
		time.Sleep(loopFixed)
		start = time.Now()
		if err := writer.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		ping = append(ping, time.Since(start))
		if err := writer.XTrimMaxLen(ctx, "s", 0).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(median(reply), "reply-us")
	b.ReportMetric(median(woke), "reader-us")
	b.ReportMetric(median(ping), "ping-us")
}
