package broker_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
)

// TestANodeBeatsEverySecond: with the default claim idle, a node's
// heartbeats in Redis are a second apart, not two (front ends take a node
// silent for three for gone, so one lost beat must not make it look gone).
// The scores are Redis's clock in milliseconds; the gaps' median is
// judged, so that one late tick on a loaded machine does not decide.
func TestANodeBeatsEverySecond(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, func(c *broker.NodeConfig) { c.ClaimIdle = broker.DefaultClaimIdle })

	var beats []int64
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for deadline := time.Now().Add(10 * time.Second); len(beats) < 6; <-poll.C {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, heartbeats at %v ms; want 6", beats)
		}
		score, err := strconv.ParseInt(rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()), 10, 64)
		if err != nil {
			t.Fatalf("the node's heartbeat: %v", err)
		}
		if len(beats) == 0 || score != beats[len(beats)-1] {
			beats = append(beats, score)
		}
	}
	gaps := make([]int64, 0, len(beats)-2)
	for i := 2; i < len(beats); i++ { // the first seen may be Start's own
		gaps = append(gaps, beats[i]-beats[i-1])
	}
	slices.Sort(gaps)
	if median := gaps[len(gaps)/2]; median > 1300 {
		t.Errorf("heartbeats %d ms apart on the median (gaps %v ms); want about 1000", median, gaps)
	}
}

// TestShutdownCalledTogetherLeavesOnce: callers that shut a node down at
// the same moment neither panic nor return before it has left.
func TestShutdownCalledTogetherLeavesOnce(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	n := startNode(t, rs, newRecorder(), 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := make(chan struct{})
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			<-start
			errs <- n.Shutdown(ctx)
		}()
	}
	close(start)
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if score := rs.Do(t, "ZSCORE", "streamer:nodes", n.Name()); score != "" {
			t.Fatalf("a Shutdown returned while the node was still listed alive (heartbeat %s)", score)
		}
	}
}
