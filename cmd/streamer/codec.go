package main

import (
	"log/slog"
	"time"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/onnx"
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
	return httpapi.Generic{}, map[string]any{"model": name, "runner": spec.Runner, "settings": spec.Settings}, nil
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
