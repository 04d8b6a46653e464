//go:build unix

package plugin

import (
	"fmt"
	"os"
	"syscall"
)

// fileID is the device and inode of the file info describes.
func fileID(info os.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return ""
}
