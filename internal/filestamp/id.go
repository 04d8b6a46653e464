//go:build linux || darwin

package filestamp

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the device, inode and change time of the file info describes.
// The change time is the kernel's, which no tool sets: a file written
// again to the same size and modification time (cp -p, tar, rsync -t)
// changes it.
func fileID(info os.FileInfo) (string, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	ctime := changeTime(st)
	return fmt.Sprintf("%d:%d:%d.%d", st.Dev, st.Ino, ctime.Sec, ctime.Nsec), true
}
