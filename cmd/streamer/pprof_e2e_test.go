package main

import (
	"bytes"
	"io"
	"net"
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

// A loopback --pprof answers only requests that name this machine: a web
// page whose name is rebound to 127.0.0.1 would otherwise read the
// profiles, and the command line with its token, from any browser here.
func TestPprofOnLoopbackAnswersOnlyThisMachinesNames(t *testing.T) {
	addr := freePort(t)
	startServer(t, "--model", "echo", "--pprof", addr, "--auth-token", "secret")
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: requestTimeout}
	for host, want := range map[string]int{
		addr:                         http.StatusOK,
		"localhost:" + port:          http.StatusOK,
		"[::1]:" + port:              http.StatusOK,
		"attacker.example:" + port:   http.StatusMisdirectedRequest,
		"192.0.2.1:" + port:          http.StatusMisdirectedRequest,
		"localhost.attacker.example": http.StatusMisdirectedRequest,
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/cmdline", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want || want != http.StatusOK && bytes.Contains(body, []byte("secret")) {
			t.Errorf("Host %s: %d %q; want %d", host, resp.StatusCode, body, want)
		}
	}
}

// Headers are read before the token is checked, so their size is bounded
// at 64 KiB, on the API's address as on --pprof: at net/http's 1 MiB, the
// 4096 connections --max-connections lets in could pin gigabytes without
// a token.
func TestHeadersOverTheirBoundAreRefused(t *testing.T) {
	pprofAddr := freePort(t)
	s := startServer(t, "--model", "echo", "--pprof", pprofAddr, "--auth-token", "secret")
	client := &http.Client{Timeout: requestTimeout}
	for _, url := range []string{s.URL() + "/v1/models", "http://" + pprofAddr + "/debug/pprof/"} {
		for size, want := range map[int]int{32 << 10: http.StatusOK, 80 << 10: http.StatusRequestHeaderFieldsTooLarge} {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer secret")
			req.Header.Set("X-Filler", strings.Repeat("a", size))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with %d KiB of headers: %d, want %d", url, size>>10, resp.StatusCode, want)
			}
		}
	}
}
