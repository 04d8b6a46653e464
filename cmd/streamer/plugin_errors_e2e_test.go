package main

import (
	"net/http"
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
