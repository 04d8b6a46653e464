package main

import (
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// codecFor picks how the HTTP layer encodes and checks items for the model
// spec names, and what GET /v1/models says about it.
func codecFor(spec model.Spec) (httpapi.Codec, any, error) {
	return httpapi.Generic{}, map[string]any{"model": spec.String()}, nil
}
