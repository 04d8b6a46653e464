package main

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
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
