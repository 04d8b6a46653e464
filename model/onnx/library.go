package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
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

// runtimeEnv guards the ONNX Runtime environment. onnxruntime_go keeps one
// environment, bound to one loaded library, per process; every Runner of
// the process shares it. This is the one piece of package state: it mirrors
// the process-wide state inside onnxruntime_go, so that concurrent Opens do
// not race to create it and the last Close destroys it.
var runtimeEnv struct {
	sync.Mutex
	lib     string // the library the environment was created from
	version string
	users   int
}

// acquireRuntime loads lib and creates the environment, or joins the one
// that exists. It returns the ONNX Runtime version.
func acquireRuntime(lib string) (string, error) {
	runtimeEnv.Lock()
	defer runtimeEnv.Unlock()
	if runtimeEnv.users > 0 {
		if runtimeEnv.lib != lib {
			return "", fmt.Errorf("%w: this process already loaded %s; it cannot also load %s", ErrBadLibrary, runtimeEnv.lib, lib)
		}
		runtimeEnv.users++
		return runtimeEnv.version, nil
	}
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return "", loadError(lib, err)
	}
	runtimeEnv.lib, runtimeEnv.version, runtimeEnv.users = lib, ort.GetVersion(), 1
	return runtimeEnv.version, nil
}

// releaseRuntime leaves the environment and destroys it after its last user.
func releaseRuntime() {
	runtimeEnv.Lock()
	defer runtimeEnv.Unlock()
	runtimeEnv.users--
	if runtimeEnv.users == 0 {
		_ = ort.DestroyEnvironment()
		runtimeEnv.lib, runtimeEnv.version = "", ""
	}
}

// loadError explains why lib did not load, in one line that says what was
// looked for and how to fix it.
func loadError(lib string, err error) error {
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	switch {
	case strings.Contains(msg, "Error setting ORT API base"):
		return fmt.Errorf("%w: %s does not provide the ONNX Runtime C API version %d that onnxruntime_go needs (ONNX Runtime %s or later); %s", ErrBadLibrary, lib, apiVersion, minimumORT, fixHint)
	case lib == libraryName && strings.Contains(msg, "Error loading ONNX shared library"):
		return fmt.Errorf("%w: looked at the given path (none), $%s (not set), %s/%s in the working directory, the folders above it and next to the binary, and %s on the system library path; %s", ErrNoLibrary, EnvLibrary, libraryFolder, libraryName, libraryName, fixHint)
	}
	return fmt.Errorf("%w: load %s: %s; %s", ErrBadLibrary, lib, msg, fixHint)
}

// probeLibrary finds and loads the library once, to fail fast in the
// supervisor before any worker starts.
func probeLibrary(flagPath string) (lib, version string, err error) {
	lib, err = FindLibrary(flagPath)
	if err != nil {
		return "", "", err
	}
	version, err = acquireRuntime(lib)
	if err != nil {
		return "", "", err
	}
	releaseRuntime()
	return lib, version, nil
}
