package filekind

import (
	"os"
	"testing"
)

func TestOf(t *testing.T) {
	for mode, want := range map[os.FileMode]string{
		0o644:                             "a regular file",
		os.ModeDir | 0o755:                "a directory",
		os.ModeNamedPipe | 0o600:          "a named pipe",
		os.ModeSocket | 0o600:             "a socket",
		os.ModeDevice | 0o600:             "a device",
		os.ModeDevice | os.ModeCharDevice: "a device",
		os.ModeIrregular:                  "a special file",
	} {
		if got := Of(mode); got != want {
			t.Errorf("Of(%s) = %q, want %q", mode, got, want)
		}
	}
}
