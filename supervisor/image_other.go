//go:build !linux

package supervisor

import "os"

// ownImage is the binary this program was started from, under its path:
// no name for the running image itself is known here.
func ownImage() (path, shown string, err error) {
	path, err = os.Executable()
	return path, path, err
}
