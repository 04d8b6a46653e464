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
	err := loadError("/opt/ort/libonnxruntime.so", errors.New(`Error loading ONNX shared library "/opt/ort/libonnxruntime.so": /opt/ort/libonnxruntime.so: failed to map segment from shared object`))
	if !errors.Is(err, ErrBadLibrary) || !strings.Contains(err.Error(), "ulimit -v") || strings.Contains(err.Error(), "make onnxruntime") {
		t.Errorf("loadError: %v; want it to point at the address space's limit, not at fetching the library", err)
	}
}
