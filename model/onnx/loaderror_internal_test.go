//go:build cgo

package onnx

import (
	"errors"
	"strings"
	"testing"
)

// A library that is there but could not be mapped (the address space
// limited by ulimit -v) is said so, not taken for a library to fetch
// again.
func TestALibraryThatCouldNotBeMappedIsNotToBeFetched(t *testing.T) {
	for _, lib := range []string{"/opt/ort/libonnxruntime.so", libraryName} { // a path, or found on the system's
		err := loadError(lib, errors.New(`Error loading ONNX shared library "`+lib+`": `+lib+`: failed to map segment from shared object`))
		if !errors.Is(err, ErrBadLibrary) || !strings.Contains(err.Error(), "ulimit -v") || strings.Contains(err.Error(), "make onnxruntime") {
			t.Errorf("loadError(%s): %v; want it to point at the address space's limit, not at fetching the library", lib, err)
		}
	}
}
