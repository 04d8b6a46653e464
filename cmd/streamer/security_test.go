package main

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

func TestSecurityListenDefaultIsLoopback(t *testing.T) {
	flag := newServeCommand().Flags().Lookup("listen")
	host, _, err := net.SplitHostPort(flag.DefValue)
	if err != nil {
		t.Fatalf("--listen default %q: %v", flag.DefValue, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("--listen defaults to %q; it must stay on loopback so that a server started without thought is not open to the network", flag.DefValue)
	}
}

func TestSecurityWarnsOfAnOpenAPIWithoutToken(t *testing.T) {
	tests := []struct {
		name, listen, token string
		warn                bool
	}{
		{"loopback without a token", "127.0.0.1:0", "", false},
		{"every address without a token", "0.0.0.0:0", "", true},
		{"every address with a token", "0.0.0.0:0", "t", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", tc.listen)
			if err != nil {
				t.Fatalf("listen on %s: %v", tc.listen, err)
			}
			defer l.Close()
			var logs bytes.Buffer
			s := &security{log: slog.New(slog.NewTextHandler(&logs, nil))}
			if tc.token != "" {
				s.token = httpapi.NewToken(tc.token)
			}
			if got := s.listener(l); got != l {
				t.Errorf("without a certificate the listener was wrapped: %T", got)
			}
			if warned := strings.Contains(logs.String(), "with no token"); warned != tc.warn {
				t.Errorf("warned %v, want %v; logs:\n%s", warned, tc.warn, logs.String())
			}
		})
	}
}
