// Package filekind names the kind of a file that is not a regular one, for
// the refusals of a path that names a directory, a named pipe or a device
// where a file is wanted: reading a pipe waits for a writer for ever, and a
// device such as /dev/zero never ends.
package filekind

import "os"

// Of names the kind of file mode is, with its article: "a directory", "a
// named pipe", "a socket", "a device", or "a special file"; "a regular
// file" for one.
func Of(mode os.FileMode) string {
	switch {
	case mode.IsRegular():
		return "a regular file"
	case mode.IsDir():
		return "a directory"
	case mode&os.ModeNamedPipe != 0:
		return "a named pipe"
	case mode&os.ModeSocket != 0:
		return "a socket"
	case mode&os.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}
