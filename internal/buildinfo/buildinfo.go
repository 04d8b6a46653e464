// Package buildinfo says which build of streamer is running, as the Go
// toolchain stamped it into the binary.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version is the main module's version as the binary was built: a tag, or
// the pseudo-version the toolchain derives from the commit it was built
// at ("+dirty" when the tree had changes); "devel" when nothing stamped
// it (a build outside a module's repository).
func Version() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}

// Line is Version with the commit and the toolchain, for `streamer
// version` and the log's first line: "v0.0.0-… (commit 1a2b3c4d5e6f, go1.26.8, linux/amd64)".
func Line() string {
	line := Version() + " ("
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				line += "commit " + s.Value[:min(len(s.Value), 12)] + ", "
			}
		}
	}
	return line + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}
