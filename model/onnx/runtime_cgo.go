//go:build cgo

package onnx

import (
	"fmt"
	"strings"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

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
	case strings.Contains(msg, "failed to map segment") || strings.Contains(msg, "annot allocate memory"):
		// The library is there: the process may not map it.
		return fmt.Errorf("%w: load %s: %s; the process could not map it into memory: is its address space limited (ulimit -v, RLIMIT_AS), or the machine's memory spent?", ErrBadLibrary, lib, msg)
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
