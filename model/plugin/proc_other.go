//go:build !linux

package plugin

import (
	"io"
	"os/exec"
)

// setProcAttr does nothing where the kernel has no parent death signal: there
// a plugin whose worker is killed outright is left running.
func setProcAttr(*exec.Cmd, int) {}

// killGroup does nothing: the plugin process alone is killed.
func killGroup(int) {}

// groupGuard is Linux's: elsewhere there is none.
type groupGuard struct{}

func startGroupGuard(io.Writer) (*groupGuard, error) { return nil, nil }

func (g *groupGuard) pgid() int { return 0 }

func (g *groupGuard) ending() {}

func (g *groupGuard) stop() {}

// exiting cannot tell, where there is no /proc: a process is taken for
// running until it is reaped.
func exiting(int) bool { return false }
