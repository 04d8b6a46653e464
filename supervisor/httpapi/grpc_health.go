package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi/inferencepb"
)

// The services the health service knows, beside the inference service's own
// name, which is the server's readiness too.
const (
	// HealthServer, the empty name, is the server's readiness, as gRPC
	// probes ask for it by default: GET /readyz's answer.
	HealthServer = ""
	// HealthReadiness is the server's readiness by a name of its own.
	HealthReadiness = "readiness"
	// HealthLiveness is SERVING while the server answers at all: GET
	// /healthz's answer, for a liveness probe that must not fail while
	// the model loads or the server drains.
	HealthLiveness = "liveness"
)

// healthWatchEvery is how often a Watch call looks whether its service's
// status changed.
const healthWatchEvery = time.Second

// GRPCHealth is the standard gRPC health service (grpc.health.v1.Health)
// of the handler New returned, for the probes that speak it: Kubernetes'
// grpc probes, grpc_health_probe, proxies' health checks and gRPC clients'
// own. It knows the services HealthServer, HealthReadiness and
// HealthLiveness, and inference.GRPCInferenceService, whose status is the
// server's readiness; any other is NOT_FOUND to Check.
type GRPCHealth struct {
	healthpb.UnimplementedHealthServer
	h *handler
}

// NewGRPCHealth returns the health service of api, which must be a handler
// New returned; it panics otherwise.
func NewGRPCHealth(api http.Handler) *GRPCHealth {
	return &GRPCHealth{h: NewGRPC(api).h}
}

// status is service's status, and whether service is one the health service
// knows.
func (g *GRPCHealth) status(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	switch service {
	case HealthLiveness:
		return healthpb.HealthCheckResponse_SERVING, true
	case HealthServer, HealthReadiness, inferencepb.GRPCInferenceService_ServiceDesc.ServiceName:
		if g.h.backend.Ready() {
			return healthpb.HealthCheckResponse_SERVING, true
		}
		return healthpb.HealthCheckResponse_NOT_SERVING, true
	}
	return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
}

// Check answers service's status now.
func (g *GRPCHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, ok := g.status(req.GetService())
	if !ok {
		return nil, status.Error(codes.NotFound, unknownHealthService(req.GetService()))
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List answers the status of every service the health service knows.
func (g *GRPCHealth) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
	for _, name := range [...]string{HealthServer, HealthReadiness, HealthLiveness, inferencepb.GRPCInferenceService_ServiceDesc.ServiceName} {
		st, _ := g.status(name)
		out.Statuses[name] = &healthpb.HealthCheckResponse{Status: st}
	}
	return out, nil
}

// Watch sends service's status, then each change of it, looked at every
// healthWatchEvery, until the call ends. A service it does not know is
// SERVICE_UNKNOWN, as the protocol has it. Once the server shuts down, the
// call is ended UNAVAILABLE after its NOT_SERVING, so that the drain's end
// does not wait for the watchers.
func (g *GRPCHealth) Watch(req *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	t := time.NewTicker(healthWatchEvery)
	defer t.Stop()
	sent := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		st, _ := g.status(req.GetService())
		if st != sent {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			sent = st
		}
		if g.shuttingDown() {
			return status.Error(codes.Unavailable, ShuttingDown)
		}
		select {
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-t.C:
		}
	}
}

// shuttingDown reports whether the server drains.
func (g *GRPCHealth) shuttingDown() bool {
	b, ok := g.h.backend.(unreadier)
	return ok && errors.Is(b.NotReady(), supervisor.ErrShuttingDown)
}

func unknownHealthService(name string) string {
	return fmt.Sprintf("unknown service %q: the health service knows %q (the server's readiness), %q, %q and %q",
		name, HealthServer, HealthReadiness, HealthLiveness, inferencepb.GRPCInferenceService_ServiceDesc.ServiceName)
}
