package supervisor_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/workerproc"
)

// The in-process mode: a model.Model in this process, batched like any
// other. model.Func makes one of a function.
func ExampleStreamer_inProcess() {
	upper := model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
		out := make([][]byte, len(items))
		for i, it := range items {
			out[i] = []byte(strings.ToUpper(string(it)))
		}
		return out, nil
	})
	s, err := supervisor.New(supervisor.Config{InProcess: upper, BatchSize: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown(ctx)
	out, err := s.Predict(ctx, [][]byte{[]byte("hello"), []byte("world")})
	fmt.Println(string(out[0]), string(out[1]), err)
	// Output: HELLO WORLD <nil>
}

// Worker processes: this program is both the server and its workers. Main
// must ask workerproc.Started first, so that a worker never runs the
// server's code (examples/embed is a complete program).
func ExampleProcessConfig() {
	open := func(_ context.Context, spec model.Spec) (model.Model, error) {
		var settings struct {
			Greeting string `json:"greeting"`
		}
		if err := spec.Decode(&settings); err != nil {
			return nil, err
		}
		return model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) {
			return items, nil
		}), nil
	}
	if workerproc.Started() {
		workerproc.Main(open) // serves until told to stop, then exits
	}
	spec, err := model.NewSpec("greeter", map[string]string{"greeting": "hello"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	s, err := supervisor.New(supervisor.Config{
		Workers: 2,
		Process: supervisor.ProcessConfig{Model: spec}, // Path empty: this program
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer s.Shutdown(ctx)
	// s.Predict(ctx, items) …
}
