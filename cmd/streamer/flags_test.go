package main

import (
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
