package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// With --log-format json, a duration is written as the text format writes
// it ("30s"), not as integer nanoseconds that a reader must divide.
func TestJSONLogsWriteDurationsAsText(t *testing.T) {
	var out bytes.Buffer
	log, err := serveOptions{logFormat: "json", logLevel: "info"}.logger(&out)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("draining", "grace", 30*time.Second, "after", 20*time.Millisecond, "workers", 2)
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	if line["grace"] != "30s" || line["after"] != "20ms" || line["workers"] != float64(2) {
		t.Errorf("logged %s; want grace 30s, after 20ms and workers the number 2", out.Bytes())
	}
}
