package main

import (
	"encoding/json"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/streamer-dev/streamer/broker"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/supervisor"
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
// describes (see codecFor): info itself, or, for an ONNX file served by
// workers of st, info with the SHA-256 of the file st's newest workers
// open, which a reload that took a new file changes.
func servedDescription(info any, st *supervisor.Streamer) any {
	desc, ok := info.(*onnx.Description)
	if !ok || st == nil {
		return info
	}
	return reloadedDescription{desc: desc, st: st}
}

// reloadedDescription is an ONNX model's description whose checksum is
// read from the supervisor each time it is served.
type reloadedDescription struct {
	desc *onnx.Description
	st   *supervisor.Streamer
}

// MarshalJSON writes the description with the checksum of the file the
// newest workers open.
func (d reloadedDescription) MarshalJSON() ([]byte, error) {
	desc := *d.desc
	if settings, err := onnx.SettingsOf(d.st.Model()); err == nil && settings.SHA256 != "" {
		desc.SHA256 = settings.SHA256
	}
	return json.Marshal(desc)
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
// the runner (and a plugin's file name), label what the command line said.
func modelID(spec model.Spec, info any, plugin, label string) broker.ModelID {
	if desc, ok := info.(*onnx.Description); ok {
		wire, _ := json.Marshal(map[string]any{"inputs": desc.Inputs, "outputs": desc.Outputs})
		return broker.ModelID{Wire: "onnx " + string(wire), Name: spec.Runner, Label: label}
	}
	name := spec.Runner
	if plugin != "" {
		name += " " + filepath.Base(plugin)
	}
	return broker.ModelID{Wire: "generic", Name: name, Label: label}
}
