package httpapi

import (
	"net/http"
	"strconv"
	"strings"
)

// This file serves the Open Inference Protocol (KServe v2) REST routes:
// health, server and model metadata, model readiness and inference. The
// inference route turns the request's tensors into items with the
// TensorModel (one item per row of the batch axis) and submits them as
// one request, through the path /predict takes.

// DefaultServerName is what GET /v2 calls the server when
// Config.ServerName is empty.
const DefaultServerName = "streamer"

// serverMetadataBody is the GET /v2 answer.
type serverMetadataBody struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// v2Route is a /v2/models/... path taken apart.
type v2Route struct {
	model   string
	version string // "" when the path has none
	action  string // "" (metadata), "ready", "infer", "config" or "stats"
}

// parseModelPath takes apart the path after /v2/models/: {model},
// {model}/ready, {model}/infer, {model}/config, {model}/stats, and the
// same after {model}/versions/{v}.
func parseModelPath(rest string) (v2Route, bool) {
	var route v2Route
	var more bool
	route.model, rest, more = strings.Cut(rest, "/")
	if route.model == "" {
		return route, false
	}
	if after, ok := strings.CutPrefix(rest, "versions/"); ok {
		route.version, rest, more = strings.Cut(after, "/")
		if route.version == "" {
			return route, false
		}
	}
	if !more {
		return route, true
	}
	switch rest {
	case "ready", "infer", "config", "stats":
		route.action = rest
		return route, true
	}
	return route, false
}

// serveV2 serves the /v2 routes and reports whether r was one of them.
func (h *handler) serveV2(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/v2", "/v2/":
		h.get(w, r, func() (int, any) { return http.StatusOK, h.serverMetadata })
	case "/v2/health/live":
		h.get(w, r, func() (int, any) { return http.StatusOK, map[string]bool{"live": true} })
	case "/v2/health/ready":
		h.get(w, r, func() (int, any) {
			if h.backend.Ready() {
				return http.StatusOK, map[string]bool{"ready": true}
			}
			return http.StatusServiceUnavailable, map[string]bool{"ready": false}
		})
	case "/v2/models/stats": // every model's: Triton's route
		h.get(w, r, func() (int, any) {
			if h.tensors == nil {
				return http.StatusOK, tritonStats{ModelStats: []tritonModelStats{}}
			}
			return http.StatusOK, h.modelStats(h.tensors.Metadata())
		})
	case "/v2/repository/index":
		h.repositoryIndex(w, r)
	default:
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v2/repository/models/"); ok {
			h.repositoryControl(w, r, rest)
			return true
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/v2/models/")
		if !ok {
			return false
		}
		route, ok := parseModelPath(rest)
		if !ok {
			return false
		}
		h.serveModel(w, r, route)
	}
	return true
}

// serveModel serves a /v2/models/{model}... route.
func (h *handler) serveModel(w http.ResponseWriter, r *http.Request, route v2Route) {
	if route.action == "infer" {
		if r.Method != http.MethodPost {
			h.methodNotAllowed(w, http.MethodPost)
			return
		}
		var meta ModelMetadata
		err := h.noV2Model()
		if err == nil {
			meta = h.tensors.Metadata()
			err = checkModelRoute(meta, route)
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.infer(w, r, meta, route.version)
		return
	}
	h.get(w, r, func() (int, any) {
		if err := h.noV2Model(); err != nil {
			return err.status, errorBody{Error: err.msg}
		}
		meta := h.tensors.Metadata()
		if err := checkModelRoute(meta, route); err != nil {
			return err.status, errorBody{Error: err.msg}
		}
		switch route.action {
		case "ready":
			ready := h.backend.Ready()
			status := http.StatusOK
			if !ready {
				status = http.StatusServiceUnavailable
			}
			return status, modelReadyBody{Name: meta.Name, Ready: ready}
		case "config":
			return http.StatusOK, h.modelConfig(meta)
		case "stats":
			return http.StatusOK, h.modelStats(meta)
		}
		return http.StatusOK, metadataForJSON(meta)
	})
}

// modelReadyBody is the GET /v2/models/{model}/ready answer.
type modelReadyBody struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
}

// metadataForJSON gives the lists the protocol requires as arrays, never
// null, leaving the model's own slices as they are.
func metadataForJSON(meta ModelMetadata) ModelMetadata {
	meta.Inputs = specsForJSON(meta.Inputs)
	meta.Outputs = specsForJSON(meta.Outputs)
	return meta
}

func specsForJSON(specs []TensorSpec) []TensorSpec {
	out := make([]TensorSpec, len(specs))
	copy(out, specs)
	for i := range out {
		if out[i].Shape == nil {
			out[i].Shape = []int64{}
		}
	}
	return out
}

// noV2Model refuses a model route when no TensorModel is configured.
func (h *handler) noV2Model() *requestError {
	if h.tensors != nil {
		return nil
	}
	return &requestError{status: http.StatusNotFound, msg: "no model is served over the v2 inference protocol here; " +
		"this server answers POST /predict (the server was started without a tensor model)"}
}

// checkModelRoute refuses a model name or version the model does not have.
func checkModelRoute(meta ModelMetadata, route v2Route) *requestError {
	if route.model != meta.Name {
		return &requestError{status: http.StatusNotFound, msg: "unknown model " + strconv.Quote(route.model) +
			"; this server serves model " + strconv.Quote(meta.Name)}
	}
	if route.version == "" || len(meta.Versions) == 0 {
		return nil
	}
	for _, v := range meta.Versions {
		if v == route.version {
			return nil
		}
	}
	return &requestError{status: http.StatusNotFound, msg: "model " + strconv.Quote(meta.Name) + " has no version " +
		strconv.Quote(route.version) + "; its versions are " + strings.Join(meta.Versions, ", ")}
}
