//go:build !linux

package workerproc

// takeName has nothing to do: here workers start from their binary's path,
// whose name they take.
func takeName() {}
