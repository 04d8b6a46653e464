package broker_test

import (
	"context"
	"testing"
	"time"

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
	rs := redistest.Start(b, redistest.Options{})
	st := localStreamer(b)
	n, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: rs.URL()}, Streamer: st, Capacity: 256})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: rs.URL()}})
	if err != nil {
		b.Fatal(err)
	}
	if err := fe.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fe.Close(context.Background()) })
	for !fe.Ready() {
		if ctx.Err() != nil {
			b.Fatal("front end not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	benchPredict(b, fe.Predict)
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
