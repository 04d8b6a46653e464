package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// --pprof serves the supervisor's profiles on their own address, and the
// API's address does not serve them.
func TestPprofServesProfilesApartFromTheAPI(t *testing.T) {
	addr := freePort(t)
	s := startServer(t, "--model", "echo", "--pprof", addr)
	s.predictJSON(t, "warm")

	client := &http.Client{Timeout: requestTimeout}
	resp, err := client.Get("http://" + addr + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	profile, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(profile, []byte{0x1f, 0x8b}) {
		t.Fatalf("CPU profile: status %d, %d bytes starting %q; want 200 and a gzipped profile", resp.StatusCode, len(profile), profile[:min(len(profile), 16)])
	}
	if status, _, err := s.get("/debug/pprof/"); err != nil || status != http.StatusNotFound {
		t.Fatalf("the API's address answered /debug/pprof/ with %d (%v), want 404", status, err)
	}
}

func TestPprofAddressInUseFailsServe(t *testing.T) {
	taken := freePort(t)
	first := startServer(t, "--model", "echo", "--pprof", taken)
	s := launchServer(t, "--model", "echo", "--pprof", taken)
	code, err := s.wait(stopTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(s.logs(), "--pprof "+taken) {
		t.Fatalf("exit code %d, output:\n%s\nwant 1 and a message naming --pprof %s", code, s.logs(), taken)
	}
	first.predictJSON(t, "still serving")
}
