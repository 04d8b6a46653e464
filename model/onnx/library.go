package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/streamer-dev/streamer/internal/filekind"
)

// EnvLibrary is the environment variable that names the ONNX Runtime shared
// library when no path is given.
const EnvLibrary = "STREAMER_ORT_LIB"

// The library streamer fetches and the C API it needs. onnxruntime_go
// v1.27.0 is built against ORT_API_VERSION 24, which ONNX Runtime 1.24 and
// later provide.
const (
	libraryName   = "libonnxruntime.so"
	libraryFolder = "third_party/onnxruntime"
	apiVersion    = 24
	minimumORT    = "1.24"
	fixHint       = `run "make onnxruntime" to fetch it into third_party/onnxruntime, or set STREAMER_ORT_LIB to its path`
)

// Errors that Check and Open wrap, for callers that branch on them.
var (
	// ErrNoLibrary: no ONNX Runtime library was found where streamer looks.
	ErrNoLibrary = errors.New("ONNX Runtime library not found")
	// ErrBadLibrary: the library was found but cannot serve: it does not
	// load, or lacks the C API version onnxruntime_go needs.
	ErrBadLibrary = errors.New("unusable ONNX Runtime library")
)

// FindLibrary returns the ONNX Runtime library to load, looking in order at
// path (when not empty), $STREAMER_ORT_LIB, third_party/onnxruntime in the
// working directory or a folder above it or above the running binary, and
// last the bare library name, which the system's library path resolves when
// it is loaded. A path that is given but missing is an error.
func FindLibrary(path string) (string, error) {
	if path != "" {
		return existing(path, "the library path")
	}
	if env := os.Getenv(EnvLibrary); env != "" {
		return existing(env, "$"+EnvLibrary)
	}
	for _, dir := range searchDirs() {
		path := filepath.Join(dir, libraryFolder, libraryName)
		if info, err := os.Stat(path); err == nil && !info.IsDir() {
			return path, nil
		}
	}
	return libraryName, nil
}

func existing(path, from string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s names %s, which does not exist; %s", ErrNoLibrary, from, path, fixHint)
	}
	if info.IsDir() {
		return "", fmt.Errorf("%w: %s names %s, which is a folder, not the library file; %s", ErrNoLibrary, from, path, fixHint)
	}
	if !info.Mode().IsRegular() {
		// The loader would wait for a named pipe's writer for ever.
		return "", fmt.Errorf("%w: %s names %s, which is %s, not the library file; %s", ErrNoLibrary, from, path, filekind.Of(info.Mode()), fixHint)
	}
	// The loader searches the system for a name without a slash; a file
	// that was found must be loaded from where it is.
	if abs, err := filepath.Abs(path); err == nil {
		return abs, nil
	}
	return path, nil
}

// searchDirs are the folders whose third_party/onnxruntime may hold the
// library: the working directory and those above it, then the running
// binary's folder and the one above (bin/streamer in a checkout).
func searchDirs() []string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			dirs = append(dirs, dir)
			if filepath.Dir(dir) == dir || len(dirs) > 32 {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		dirs = append(dirs, dir, filepath.Dir(dir))
	}
	return dirs
}
