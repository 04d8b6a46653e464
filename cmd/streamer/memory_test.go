package main

import (
	"testing"

	"github.com/streamer-dev/streamer/supervisor"
)

type fixedStats supervisor.Stats

func (f fixedStats) Stats() supervisor.Stats { return supervisor.Stats(f) }

// TestANodesWorkersKeepItFromLookingIdle: the memory watch of a node
// counts the items its workers run for other front ends, which its
// backend, counting its own HTTP callers alone, does not see: a node with
// no caller of its own but busy workers is not idle, and gives no memory
// back in the middle of a burst.
func TestANodesWorkersKeepItFromLookingIdle(t *testing.T) {
	noCallers := fixedStats{}
	for _, tc := range []struct {
		name         string
		workers      fixedStats
		lastAnswered uint64
		want         bool
	}{
		{"items running", fixedStats{Submitted: 10, Answered: 4}, 4, false},
		{"items queued", fixedStats{Queued: 3, Submitted: 10, Answered: 10}, 10, false},
		{"items answered since the last look", fixedStats{Submitted: 10, Answered: 10}, 4, false},
		{"nothing since the last look", fixedStats{Submitted: 10, Answered: 10}, 10, true},
	} {
		if got := quiet(nodeWork{callers: noCallers, workers: tc.workers}, tc.lastAnswered); got != tc.want {
			t.Errorf("%s: quiet = %v; want %v", tc.name, got, tc.want)
		}
	}
	callers := fixedStats{Submitted: 3, Answered: 2}
	if quiet(nodeWork{callers: callers, workers: fixedStats{Submitted: 5, Answered: 5}}, 7) {
		t.Error("a node with a caller of its own waiting is quiet; want it busy")
	}
}

// quiet says whether the memory watch finds st idle, its last look having
// seen lastAnswered answered: nothing under way, nothing done since.
func quiet(st statser, lastAnswered uint64) bool {
	done, busy := serverProgress(st)()
	return !busy && done == lastAnswered
}
