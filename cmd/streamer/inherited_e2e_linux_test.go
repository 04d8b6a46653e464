package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWorkersAndPluginsGetNoDescriptorTheServerInherited: a descriptor the
// server inherits without close-on-exec (a wrapper's `exec 9<file`, as
// `flock 9` takes a lock) stays open in the server, and reaches neither
// its workers nor their plugins.
func TestWorkersAndPluginsGetNoDescriptorTheServerInherited(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held")
	if err := os.WriteFile(held, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "wrapper")
	script := fmt.Sprintf("#!/bin/sh\nexec 9<%s\nexec %s \"$@\"\n", held, streamerBin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newServerFrom(t, wrapper, freePort(t), []string{"--plugin", pluginBins(t)["chaos"], "--workers", "1"}, nil, nil)
	s.waitReady(t)
	worker := s.waitAllReady(t, 1)[0].PID
	plugin := pluginOf(t, worker)

	holds := func(pid int) bool {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); target == held {
				return true
			}
		}
		return false
	}
	if !holds(s.cmd.Process.Pid) {
		t.Fatalf("the server does not hold %s open: the test's wrapper did not pass it on", held)
	}
	for what, pid := range map[string]int{"worker": worker, "plugin": plugin} {
		if holds(pid) {
			t.Errorf("the %s (pid %d) holds the file the server inherited open", what, pid)
		}
	}
}
