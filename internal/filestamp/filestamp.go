// Package filestamp says which file a path names and when it last
// changed, without reading it: enough to tell that a file read before is
// still the one that was read.
package filestamp

import (
	"fmt"
	"os"
)

// Of is the stamp of the file info describes: its size, modification time,
// device, inode and change time. The change time is the kernel's, which no
// tool sets: a file written again to the same size and modification time
// (cp -p, tar, rsync -t) changes it, as does a file renamed into place.
// Where the system gives no change time, ok is false: nothing short of the
// content tells the file has not changed.
func Of(info os.FileInfo) (stamp string, ok bool) {
	id, ok := fileID(info)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d:%d:%s", info.Size(), info.ModTime().UnixNano(), id), true
}
