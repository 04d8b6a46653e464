//go:build !linux

package plugin

import "os/exec"

// setProcAttr does nothing where the kernel has no parent death signal: there
// a plugin whose worker is killed outright is left running.
func setProcAttr(*exec.Cmd) {}

// killGroup does nothing: the plugin process alone is killed.
func killGroup(int) {}
