//go:build !linux && !darwin

package plugin

import "os"

// fileID has nothing to go by here: the size and modification time alone
// do not stand for the content, so the binary is always read to compare.
func fileID(os.FileInfo) (string, bool) { return "", false }
