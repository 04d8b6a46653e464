package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestPluginLongErrorsAreCut: a plugin's error of megabytes reaches its
// callers, and the log, cut to a few KiB that say how much was cut.
func TestPluginLongErrorsAreCut(t *testing.T) {
	bin := pluginBins(t)["chaos"]
	s := startPluginServer(t, "--plugin", bin, "--workers", "1")
	for _, trigger := range []string{"long-error:5000", "long-reject:5000"} {
		p := s.predictJSON(t, trigger)
		if p.Status == http.StatusOK || len(p.Error) > 6<<10 || !strings.Contains(p.Error, "more bytes cut)") {
			t.Errorf("%s: status %d, an error of %d bytes; want it cut to a few KiB saying so", trigger, p.Status, len(p.Error))
		}
	}
	if n := len(s.logs()); n > 1<<20 {
		t.Errorf("the server log holds %d bytes after two long errors", n)
	}
}

// TestPluginEmptyItemError: an item a plugin fails with an empty error gets
// an error that says so, not the plugin's name followed by nothing.
func TestPluginEmptyItemError(t *testing.T) {
	bin := pluginBins(t)["chaos"]
	s := startPluginServer(t, "--plugin", bin, "--workers", "1")
	if p := s.predictJSON(t, "empty-reject"); p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "plugin chaos: the item failed, with an empty error") {
		t.Errorf("an item failed with an empty error: %s, want 422 saying so", p)
	}
}

// TestPluginCrashSaysWhy: whatever ended a plugin (a panic, an exit, an
// answer that broke the protocol), its worker tells the server why before
// it exits, and the reason, not the worker's own exit status alone, is in
// the error its callers get, in its slot's last error and in the log.
func TestPluginCrashSaysWhy(t *testing.T) {
	bins := pluginBins(t)
	for _, tc := range []struct {
		plugin, trigger, want string
	}{
		{"chaos", "panic", "its last words: panic: chaos plugin: panic on a trigger item"},
		{"chaos", "crash", "plugin process exited: exit status 3"},
		{"unruly", "wrong-id", "broke the protocol: it answered batch"},
	} {
		t.Run(tc.plugin+"-"+tc.trigger, func(t *testing.T) {
			s := startPluginServer(t, "--plugin", bins[tc.plugin], "--workers", "1")
			s.waitAllReady(t, 1)
			s.seenWorking(t)
			p := s.predictJSON(t, tc.trigger)
			if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, tc.want) {
				t.Errorf("the item that killed the plugin: %s; want 422 saying %q", p, tc.want)
			}
			s.waitFor(t, "the slot's last error to say why", readyTimeout, func() bool {
				w := s.workers(t)
				return len(w) == 1 && strings.Contains(w[0].LastErr, tc.want)
			})
			if !regexp.MustCompile(`msg="worker died".*` + regexp.QuoteMeta(tc.want)).MatchString(s.logs()) {
				t.Errorf("no worker death in the log says %q", tc.want)
			}
		})
	}
}
