//go:build !unix

package supervisor

import "os"

// exitSignal reports no signal: outside Unix a process is not ended by
// one.
func exitSignal(*os.ProcessState) (string, bool) { return "", false }
