//go:build !linux

package plugin

// MaxSocketPath is the longest path a Unix socket may have: the 104 bytes
// of sun_path of the BSDs and macOS less the NUL that ends it (Windows
// takes 108).
const MaxSocketPath = 103
