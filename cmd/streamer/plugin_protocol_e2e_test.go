package main

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPluginAnswersReachOnlyTheirCallers: a plugin that answers a batch twice
// (as a Python generator that yields an error and then falls through to a
// second yield does) is killed and restarted; no later caller gets the answer
// meant for an earlier one. With batch ids echoed the second answer is known
// by its id; without (a plugin built before ids), by arriving when no batch
// waits for one.
func TestPluginAnswersReachOnlyTheirCallers(t *testing.T) {
	bin := pluginBins(t)["unruly"]
	for _, echoIDs := range []string{"yes", "no"} {
		t.Run("echo-ids="+echoIDs, func(t *testing.T) {
			s := startPluginServer(t, "--plugin", bin, "--plugin-arg", "echo-ids="+echoIDs, "--workers", "1")
			s.waitAllReady(t, 1)
			if p := s.predictJSON(t, "double"); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"double"}) {
				t.Errorf("the batch answered twice: %s, want its own answer", p)
			}
			for i := range 20 {
				in := fmt.Sprintf("caller-%d", i)
				p := s.predictJSON(t, in)
				if p.Status == http.StatusOK && !reflect.DeepEqual(p.Outputs, []any{in}) {
					t.Fatalf("caller %d got %v, another caller's answer", i, p.Outputs)
				}
			}
			s.waitFor(t, "the plugin's broken protocol in the log", readyTimeout, func() bool {
				return strings.Contains(s.logs(), "plugin broke the protocol: it sent an answer (id ")
			})
			if st := s.stats(t); st.Crashes == 0 {
				t.Error("no crash counted for a plugin that broke the protocol")
			}
			s.waitAllReady(t, 1)
			if p := s.predictJSON(t, "after"); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"after"}) {
				t.Errorf("after the restart: %s", p)
			}
		})
	}
}

// While callers come, a plugin killed for answering a batch twice takes
// down no other caller's request: the batches it held or was being sent
// are run again by the next plugin, as after any crash. (Before, a batch
// sent as the plugin was killed failed with "the client connection is
// closing", a 500 for callers who had sent nothing wrong.) The plugin
// echoes batch ids, as the SDK's do: one that does not is matched by
// order, and its extra answer, when the next batch is already waiting,
// fails that batch as answered with the wrong number of outputs.
func TestPluginInBreachFailsNoOtherCaller(t *testing.T) {
	s := startPluginServer(t, "--plugin", pluginBins(t)["unruly"], "--plugin-arg", "echo-ids=yes", "--workers", "2",
		"--max-restarts", "1000", "--max-latency", "1ms")
	s.waitAllReady(t, 2)
	var doubles atomic.Int64
	stop := closedLoop(t, 8, func(c, r int) error {
		if c == 0 && r%5 == 2 && doubles.Load() < 60 {
			doubles.Add(1)
			_, err := s.tryPredictJSON(map[string]any{"inputs": []any{"double"}})
			return err // it may fail: its plugin broke the protocol
		}
		in := fmt.Sprintf("caller-%d-%d", c, r)
		p, err := s.tryPredictJSON(map[string]any{"inputs": []any{in}})
		switch {
		case err != nil:
			return err
		case p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{in}):
			return fmt.Errorf("caller %d, request %d: %s", c, r, p)
		}
		return nil
	})
	s.waitFor(t, "sixty plugins in breach", 2*readyTimeout, func() bool {
		return doubles.Load() >= 60 && strings.Count(s.logs(), "plugin broke the protocol") >= 60
	})
	stop()
}
