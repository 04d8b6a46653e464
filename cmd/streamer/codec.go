package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamer-dev/streamer/broker"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/onnx/demo"
	"github.com/streamer-dev/streamer/model/plugin"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// codecFor picks how the HTTP layer encodes and checks items for the model
// spec names, and what GET /v1/models says about it (name is what the
// command line called the model). An ONNX model gets a
// codec that checks every item against the model's inputs before it is
// queued and gives it a batch key (its shape signature), and a description
// of its inputs, outputs and batching; other models take any value.
func codecFor(spec model.Spec, name string) (httpapi.Codec, any, error) {
	if spec.Runner == onnx.SpecRunner {
		settings, err := onnx.SettingsOf(spec)
		if err != nil {
			return nil, nil, err
		}
		codec, desc, err := onnx.Codec(settings)
		if err != nil {
			return nil, nil, err
		}
		return codec, desc, nil
	}
	return httpapi.Generic{}, map[string]any{"model": name, "runner": spec.Runner, "settings": spec.PublicSettings()}, nil
}

// servedDescription is what GET /v1/models serves about the model info
// describes (see codecFor): info itself, or, for an ONNX file, info with
// the SHA-256 of the file models opens now: the file a node's newest
// workers open, which a reload that took a new file changes, or the file
// a front end read last (see liveSpec). models may be nil.
func servedDescription(info any, models specSource) any {
	desc, ok := info.(*onnx.Description)
	if !ok || models == nil {
		return info
	}
	return reloadedDescription{desc: desc, models: models}
}

// specSource gives the model spec served now: a Streamer's, or a front
// end's liveSpec.
type specSource interface{ Model() model.Spec }

// reloadedDescription is an ONNX model's description whose checksum is
// read from its spec source each time it is served.
type reloadedDescription struct {
	desc   *onnx.Description
	models specSource
}

// MarshalJSON writes the description with the checksum of the file the
// model's spec names now.
func (d reloadedDescription) MarshalJSON() ([]byte, error) {
	desc := *d.desc
	if settings, err := onnx.SettingsOf(d.models.Model()); err == nil && settings.SHA256 != "" {
		desc.SHA256 = settings.SHA256
	}
	return json.Marshal(desc)
}

// liveSpec is the model spec of a front end, which runs no workers to
// reload: its model's file or binary is read again at each SIGHUP (see
// refresh), so that a front end given the nodes' new model in a rolling
// upgrade by reloads names the version they run (its v2 routes, its
// /v1/models, the versions the broker counts), as a restart would.
type liveSpec struct{ p atomic.Pointer[model.Spec] }

func newLiveSpec(spec model.Spec) *liveSpec {
	l := &liveSpec{}
	l.p.Store(&spec)
	return l
}

// Model is the spec as last read.
func (l *liveSpec) Model() model.Spec { return *l.p.Load() }

// refresh reads the model's file or binary again, as a reload's workers
// would, and logs what it found: a new version, the same, or why it could
// not (the version read before stays).
func (l *liveSpec) refresh(ctx context.Context, say func(level slog.Level, msg string, args ...any)) {
	old := l.Model()
	fresh, err := load.Refresh(ctx, old)
	if err != nil {
		say(slog.LevelError, "SIGHUP: a front end reads its model's file again, and could not; serving on with the version read before (its nodes reload their own)", "err", err)
		return
	}
	l.p.Store(&fresh)
	before, now := answersVersion(old), answersVersion(fresh)
	if before == now {
		say(slog.LevelInfo, "SIGHUP: a front end has no workers to reload; its model's file read again is unchanged (its nodes reload their own)", "version", now)
		return
	}
	say(slog.LevelInfo, "SIGHUP: a front end has no workers to reload; its model's file read again is a new version (its nodes reload their own)", "version", now, "was", before)
}

// announceModel completes the model description with the server's batching
// limits and logs, once at start, what it says an operator should know
// (an ONNX model whose items run one by one).
func announceModel(info any, batchSize int, maxLatency time.Duration, log *slog.Logger) {
	desc, ok := info.(*onnx.Description)
	if !ok {
		return
	}
	desc.Batching.BatchSize = batchSize
	desc.Batching.MaxLatency = maxLatency.String()
	for _, note := range desc.Notes() {
		log.Info(note)
	}
}

// modelID names the model spec opens, described by info (see codecFor),
// for the check that the front ends and nodes under one key prefix serve
// the same: its wire is the codec (an ONNX model's inputs and outputs, so
// that a new file of the same model passes, or the generic one), its name
// the runner (and a plugin's file name), label what the command line said,
// and its version what makes its answers (see answersVersion), which the
// broker counts rather than compares.
func modelID(spec model.Spec, info any, pluginPath, label string) broker.ModelID {
	version := answersVersion(spec)
	if desc, ok := info.(*onnx.Description); ok {
		wire, _ := json.Marshal(map[string]any{"inputs": desc.Inputs, "outputs": desc.Outputs})
		return broker.ModelID{Wire: "onnx " + string(wire), Name: spec.Runner, Label: label, Version: version}
	}
	name := spec.Runner
	if pluginPath != "" {
		name += " " + filepath.Base(pluginPath)
	}
	return broker.ModelID{Wire: "generic", Name: name, Label: label, Version: version}
}

// answersVersion digests what makes the answers of the model spec opens:
// the runner and, for an ONNX model, its file's SHA-256 (its external
// weights folded in) and how its inputs are padded; for a plugin, its
// binary's SHA-256 and its arguments; for a built-in, its settings. Not
// what differs between machines that serve the same model: paths, file
// stamps, socket folders, devices, threads, the runtime library. It is ""
// where the content is not known (a front end without the model's file or
// binary), which the broker compares with nothing.
func answersVersion(spec model.Spec) string {
	var parts []string
	switch spec.Runner {
	case onnx.SpecRunner:
		settings, err := onnx.SettingsOf(spec)
		if err != nil {
			return ""
		}
		content := settings.SHA256
		if settings.Path == demo.Name {
			// Embedded: no file, and no checksum recorded.
			sum := sha256.Sum256(demo.ONNX())
			content = hex.EncodeToString(sum[:])
		}
		pad, _ := json.Marshal(settings.Pad) // a map: its keys sorted
		parts = []string{content, "pad " + string(pad)}
	case plugin.Runner:
		settings, err := plugin.SettingsOf(spec)
		if err != nil {
			return ""
		}
		parts = []string{strings.ToLower(cmp.Or(settings.SHA256, settings.Loaded))}
		for _, k := range slices.Sorted(maps.Keys(settings.Args)) {
			// Its values may be secrets: only their digest goes in.
			sum := sha256.Sum256([]byte(settings.Args[k]))
			parts = append(parts, k+"="+hex.EncodeToString(sum[:]))
		}
	default:
		// A built-in's settings are all model (sleep's costs, chaos's
		// faults).
		return digest(spec.Runner, string(spec.Settings))
	}
	if parts[0] == "" {
		return ""
	}
	return digest(append([]string{spec.Runner}, parts...)...)
}

// digest is the first 16 hex digits of the SHA-256 of parts, one a line:
// a model's version, short enough for a log line, long enough that two
// models never share one by chance.
func digest(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:8])
}
