package plugin

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the device, inode and change time of the file info describes
// (see stamp_linux.go).
func fileID(info os.FileInfo) (string, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d:%d:%d.%d", st.Dev, st.Ino, st.Ctimespec.Sec, st.Ctimespec.Nsec), true
}
