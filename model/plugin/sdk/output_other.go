//go:build !unix

package sdk

import "os"

// redirectOutput sends what the plugin prints through os.Stdout and
// os.Stderr to its real stderr, which the worker copies into the server log.
func redirectOutput(stderr *os.File) {
	os.Stdout = stderr
	os.Stderr = stderr
}
