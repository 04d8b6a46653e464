package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

func TestOlderThan(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"5.0.14", true}, {"6.0.16", true}, {"6.2.0", false}, {"6.2.14", false},
		{"7.0.15", false}, {"10.1.0", false}, {"", false}, {"garbage", false}, {"x.y.z", false},
	} {
		if got := olderThan(tc.version, 6, 2); got != tc.want {
			t.Errorf("olderThan(%q, 6, 2) = %v, want %v", tc.version, got, tc.want)
		}
	}
}

// A Redis found unfit stops the node for good: a write of answers that
// goes through, which ends a refusal of the node's answers, does not end
// it.
func TestAnUnfitRedisStopsTheNodeForGood(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	st, err := supervisor.New(supervisor.Config{InProcess: model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil }), Workers: 1, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(NodeConfig{Config: Config{URL: rs.URL()}, Streamer: st, Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.rdb.Close() })
	unfit := errors.New("unfit")
	n.probe.verdict.Store(&unfit)
	n.probe.done.Store(true)
	if n.fit(context.Background()) || n.refusal() != "unfit" {
		t.Fatalf("fit %v, refusal %q; want the node unfit, saying why", n.fit(context.Background()), n.refusal())
	}
	n.refused.Swap(nil) // as a write that went through does
	if want, _ := n.wanted(); want != 0 || n.refusal() != "unfit" || n.Stats().Refused != "unfit" {
		t.Errorf("after a write: wants %d items, refusal %q, stats %q; want none, and the verdict", want, n.refusal(), n.Stats().Refused)
	}
}
