package plugin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/streamer-dev/streamer/internal/filestamp"
	"github.com/streamer-dev/streamer/model"
)

// CrashExitStatus is the exit status of a worker process whose plugin died.
const CrashExitStatus = 3

// Runner is the runner name of a plugin in a model.Spec.
const Runner = "plugin"

// Settings are what a worker needs to open a plugin: the serialisable part
// of Config, carried to the worker in a model.Spec.
type Settings struct {
	// Path is the plugin binary. Required.
	Path string `json:"path"`
	// Args are passed to the plugin's Init as key=value settings.
	Args map[string]string `json:"args,omitempty"`
	// Device is passed to the plugin's Init: "cpu" or "cuda". Empty means cpu.
	Device string `json:"device,omitempty"`
	// SHA256 is the binary's expected SHA-256 in hex; empty skips the check.
	SHA256 string `json:"sha256,omitempty"`
	// Loaded is the binary's SHA-256 in hex as the server read it, where
	// SHA256 does not pin it; Spec fills it in, and Refresh at each
	// reload. A worker refuses to run a binary whose content is no longer
	// this (ErrPluginChanged, which is model.ErrStale too): a worker
	// restarted after a crash must run the plugin the other workers run,
	// not a binary replaced on disk without a reload. Empty: no check.
	Loaded string `json:"loaded_sha256,omitempty"`
	// LoadedStamp is the binary's stamp (size, modification time, inode)
	// when Loaded was read: a worker that finds the binary with the same
	// stamp does not read it to compare.
	LoadedStamp string `json:"loaded_stamp,omitempty"`
	// SocketDir is where the plugin's private socket directory is made (see
	// Config.SocketDir). It says where, not what: it does not change the model.
	SocketDir string `json:"socket_dir,omitempty"`
	// StartTimeout bounds the wait for the plugin's handshake (see
	// Config.StartTimeout); zero means DefaultStartTimeout. streamer serve
	// sets it from --init-timeout, for a plugin that imports a framework
	// before its handshake (Python's torch takes seconds).
	StartTimeout Duration `json:"start_timeout,omitempty"`
}

// Duration is a time.Duration written in the settings' JSON as Go writes
// it ("1m48s"), where the model's settings are shown to people
// (/v1/models), not as a count of nanoseconds.
type Duration time.Duration

// MarshalText writes d as time.Duration's String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Spec is the Spec that opens this plugin in a worker. Unless SHA256 pins
// the binary, it reads the binary's SHA-256 as it is now into Loaded, with
// its stamp into LoadedStamp (unless Loaded is set), so that a worker
// started later, after a crash, refuses a binary that changed; a binary it
// cannot read (one the server may run but not read) is left unchecked,
// and one it cannot find to Check to report.
func (s Settings) Spec() (model.Spec, error) {
	if s.Path == "" {
		return model.Spec{}, errors.New("plugin: the binary's path is required")
	}
	if s.SHA256 == "" && s.Loaded == "" {
		if path, err := Check(s.Path, ""); err == nil {
			s.Loaded, s.LoadedStamp = loaded(path)
		}
	}
	return model.NewSpec(Runner, s)
}

// Refresh returns spec with the binary's SHA-256 and stamp read again: the
// spec of the workers a reload starts, which run the binary as it is now.
// A binary that SHA256 pins is left so: a reload runs only the binary of
// that checksum. It reads the binary once, in the supervisor; each worker
// compares the stamp, and reads the binary only when that differs.
func Refresh(spec model.Spec) (model.Spec, error) {
	settings, err := SettingsOf(spec)
	if err != nil || settings.SHA256 != "" {
		return spec, err
	}
	path, err := Check(settings.Path, "")
	if err != nil {
		return model.Spec{}, err
	}
	settings.Loaded, settings.LoadedStamp = loaded(path)
	return model.NewSpec(Runner, settings)
}

// loaded is the SHA-256 of the binary at path, in hex, and its stamp (see
// fileStamp; empty where there is none); both empty when it cannot be
// read, which leaves it unchecked.
func loaded(path string) (sum, stamp string) {
	before, _ := fileStamp(path)
	digest, err := fileSHA256(path)
	if err != nil {
		return "", ""
	}
	if after, err := fileStamp(path); err != nil || after != before {
		// Replaced while it was read: its stamp is not that of the
		// content hashed, and a worker must hash to compare.
		before = ""
	}
	return hex.EncodeToString(digest), before
}

// fileStamp says, in one string, which file is at path and when it was
// last changed: its size, modification time, device, inode and change
// time. A binary replaced (renamed into place) or written again changes
// it; a worker that finds the stamp the supervisor recorded need not read
// the binary. Where there is no change time to go by, it is an error: the
// binary is read.
func fileStamp(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	stamp, ok := filestamp.Of(info)
	if !ok {
		return "", errors.New("no change time to go by")
	}
	return stamp, nil
}

// checkLoaded refuses a binary whose content is no longer the one whose
// SHA-256 settings.Loaded records. It reads the binary only when its stamp
// is not the one recorded with it. A binary it cannot find or read is left
// to Open to report.
func checkLoaded(settings Settings) error {
	if settings.Loaded == "" {
		return nil
	}
	path, err := Check(settings.Path, "")
	if err != nil {
		return nil
	}
	if stamp, err := fileStamp(path); err == nil && stamp != "" && stamp == settings.LoadedStamp {
		return nil
	}
	sum, err := fileSHA256(path)
	if got := hex.EncodeToString(sum); err == nil && got != settings.Loaded {
		return model.Stale(fmt.Errorf("plugin %s: %w (sha256 %s, now %s): reload to serve the new one", settings.Path, ErrPluginChanged, settings.Loaded, got))
	}
	return nil
}

// SettingsOf reads a plugin's settings from spec.
func SettingsOf(spec model.Spec) (Settings, error) {
	var s Settings
	if spec.Runner != Runner {
		return s, fmt.Errorf("%w: runner %q is not %q", model.ErrUnknownModel, spec.Runner, Runner)
	}
	if err := spec.Decode(&s); err != nil {
		return s, err
	}
	if s.Path == "" {
		return s, fmt.Errorf("%w for plugin: no path", model.ErrBadSettings)
	}
	return s, nil
}

// OpenSpec opens spec's plugin the way a streamer worker process does: the
// plugin's output and go-plugin's log lines go to the worker's stderr, which
// the supervisor logs tagged with the slot, and the plugin's death ends the
// worker process with CrashExitStatus, so that the supervisor treats it as
// the worker's crash (restart, retry elsewhere, poison isolation). Before
// it exits, the worker tells why through the last words ctx carries (see
// model.WithLastWords): the plugin's exit status, its panic, or how it
// broke the protocol, which the worker's own exit status cannot say.
//
// A worker whose model is a plugin only relays bytes, so OpenSpec also runs
// it on one thread at a time (GOMAXPROCS=1, unless the environment sets
// GOMAXPROCS): with fewer idle threads to wake for each message, the hop to
// the plugin costs about a quarter less per batch.
func OpenSpec(ctx context.Context, spec model.Spec) (model.Model, error) {
	settings, err := SettingsOf(spec)
	if err != nil {
		return nil, err
	}
	if err := checkLoaded(settings); err != nil {
		return nil, err
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(1)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	lastWords := model.LastWords(ctx)
	m, err := Open(ctx, Config{
		Path:         settings.Path,
		Args:         settings.Args,
		Device:       settings.Device,
		SHA256:       settings.SHA256,
		SocketDir:    settings.SocketDir,
		StartTimeout: time.Duration(settings.StartTimeout),
		Output:       os.Stderr,
		Logger:       log,
		Crashed: func(err error) {
			fmt.Fprintf(os.Stderr, "worker: %v; exiting so that the supervisor restarts this worker\n", err)
			lastWords(err.Error())
			os.Exit(CrashExitStatus)
		},
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// CheckSpec checks spec's plugin binary without running it, so that a
// supervisor can refuse a missing, non-executable or tampered binary before
// it starts any worker.
func CheckSpec(spec model.Spec) error {
	settings, err := SettingsOf(spec)
	if err != nil {
		return err
	}
	_, err = Check(settings.Path, settings.SHA256)
	return err
}
