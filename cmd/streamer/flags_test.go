package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/supervisor"
)

// Whole-number flags are read in base 10: a leading zero is no octal, and
// 0x no hexadecimal; a value past the type's range is refused.
func TestWholeNumberFlagsAreDecimal(t *testing.T) {
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var n int
	var big int64
	intVar(f, &n, "n", 64, "")
	intVar(f, &big, "big", 1, "")
	if n != 64 || f.Lookup("n").DefValue != "64" {
		t.Fatalf("default %d (shown %q), want 64", n, f.Lookup("n").DefValue)
	}
	if err := f.Parse([]string{"--n", "010", "--big", "9223372036854775807"}); err != nil || n != 10 || big != 1<<63-1 {
		t.Fatalf("--n 010 --big 9223372036854775807: %d, %d, %v; want 10 and the largest int64", n, big, err)
	}
	for _, bad := range []string{"0x20", "1e3", "", " 1", "99999999999999999999"} {
		if err := f.Set("n", bad); err == nil {
			t.Errorf("--n %q taken for %d; want a refusal", bad, n)
		}
	}
}

// The flags of a few words take them in any case, as --log-level does.
func TestWordFlagsTakeAnyCase(t *testing.T) {
	var o serveOptions
	cmd := &cobra.Command{}
	addServeFlags(cmd, &o)
	if err := cmd.Flags().Parse([]string{"--device", "CUDA", "--log-format", "JSON", "--batching", "Greedy"}); err != nil {
		t.Fatal(err)
	}
	if o.device != "cuda" || o.logFormat != "json" || o.policy() != supervisor.BatchingGreedy {
		t.Errorf("device %q, log format %q, batching %q; want cuda, json and greedy", o.device, o.logFormat, o.policy())
	}
}

// A server run as a container's first process with a plugin warns that the
// plugin's orphans are not reaped, naming the inits that reap them; run
// otherwise, or with no plugin to leave orphans, it warns of nothing.
func TestPid1WarningOnlyForAPluginAsProcess1(t *testing.T) {
	if got := pid1Warning(1, "./bin/fillmask"); !strings.Contains(got, "not reaped") || !strings.Contains(got, "docker run --init") {
		t.Errorf("as process 1 with a plugin: %q; want a warning naming docker run --init", got)
	}
	for _, c := range []struct {
		pid    int
		plugin string
	}{{1, ""}, {4242, "./bin/fillmask"}} {
		if got := pid1Warning(c.pid, c.plugin); got != "" {
			t.Errorf("as process %d with plugin %q: %q; want no warning", c.pid, c.plugin, got)
		}
	}
}
