package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// TestBrokerANodeWhoseWorkersCannotRunAdmitsNothing: a node whose only
// worker crashed, and takes seconds to start again, beats as a node leaving
// once --unavailable-after has passed: its front end says not ready and
// answers a new request 503 at once, as a local server would, rather than
// queueing it for nobody; the caller whose item crashed the worker is not
// failed for want of a node and gets its answer (422: the item is poison).
// Once the worker is back, requests are served again.
func TestBrokerANodeWhoseWorkersCannotRunAdmitsNothing(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "chaos:crash=boom,init-delay=3s", "--unavailable-after", "200ms")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	node.seenWorking(t)

	boom := predictLater(front, requestTimeout, "boom")
	waitReadyz(t, front, 0)
	if p, err := predictWithin(front, 5*time.Second, 0, "meanwhile"); err != nil || p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Error, "none of their workers can run") {
		t.Errorf("a request while no worker can run: %s, %v; want 503 saying so", p, err)
	}
	brokerLogField(t, node, "no worker of this node can run: front ends admit no requests for it until one can", "node")

	select {
	case got := <-boom:
		if got.err != nil || got.p.Status != http.StatusUnprocessableEntity {
			t.Errorf("the item that crashed the worker: %s, %v; want 422", got.p, got.err)
		}
	case <-time.After(requestTimeout):
		t.Fatal("the item that crashed the worker got no answer")
	}
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, requestTimeout, 0, "fine"); err != nil || p.Status != http.StatusOK {
		t.Errorf("once the worker is back: %s, %v; want 200", p, err)
	}
}

// TestBrokerANodeStartingSaysSo: a node listens while its workers start,
// as a local server does, and says so to a request and on /readyz, rather
// than blaming its front end or Redis, which serves; once started, it
// serves.
func TestBrokerANodeStartingSaysSo(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := launchServer(t, "--broker", rs.URL(), "--workers", "1", "--model", "chaos:init-delay=3s", "--log-format", "json")
	waitFor(t, "the node to listen", brokerWait, func() bool {
		status, _, err := node.get("/healthz")
		return err == nil && status == http.StatusOK
	})
	status, body, err := node.get("/readyz")
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), "this node is starting") {
		t.Errorf("GET /readyz while the workers start: %d %s, %v; want 503 saying the node is starting", status, body, err)
	}
	if p, err := predictWithin(node, 5*time.Second, 0, "early"); err != nil || p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Error, "this node is starting") {
		t.Errorf("a request while the workers start: %s, %v; want 503 saying the node is starting", p, err)
	}
	// Its front end has not looked at Redis yet: it does not say Redis is
	// down (an alert on streamer_broker_redis_up == 0 would fire at every
	// node's start).
	if status, body, err := node.get("/metrics"); err != nil || status != http.StatusOK || strings.Contains(string(body), "streamer_broker_redis_up") {
		t.Errorf("/metrics while the workers start: %d, %v; want no streamer_broker_redis_up yet:\n%s", status, err, body)
	}
	if status, body, err := node.get("/v1/stats"); err != nil || status != http.StatusOK || !strings.Contains(string(body), `"checked":false`) {
		t.Errorf("/v1/stats while the workers start: %d, %v; want its front end not checked yet:\n%s", status, err, body)
	}
	waitReadyz(t, node, http.StatusOK)
	if status, body, err := node.get("/metrics"); err != nil || status != http.StatusOK || !strings.Contains(string(body), "streamer_broker_redis_up 1") {
		t.Errorf("/metrics once started: %d, %v; want streamer_broker_redis_up 1:\n%s", status, err, body)
	}
	if p, err := predictWithin(node, requestTimeout, 0, "later"); err != nil || p.Status != http.StatusOK {
		t.Errorf("once started: %s, %v; want 200", p, err)
	}
}

// TestBrokerANodeWithoutAReadyWorkerIsNotReady: a node whose only worker
// was killed and takes seconds to start again says not ready on /readyz,
// naming its own workers, as a local server would (a readiness probe of a
// GPU node asks about its GPUs), while the fleet serves: the front end is
// ready, and a request the node itself takes is answered through Redis by
// the other node. Once its worker is back, the node is ready again.
func TestBrokerANodeWithoutAReadyWorkerIsNotReady(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	slow := startBrokerNode(t, rs, "--workers", "1", "--model", "chaos:init-delay=3s")
	startBrokerNode(t, rs, "--workers", "1", "--model", "chaos")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	waitReadyz(t, slow, http.StatusOK)

	ready := slow.readyWorkers(t)
	if len(ready) != 1 {
		t.Fatalf("the node's ready workers: %+v; want one", ready)
	}
	if err := syscall.Kill(ready[0].PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, slow, http.StatusServiceUnavailable)
	status, body, err := slow.get("/readyz")
	if err == nil && status == http.StatusServiceUnavailable && !strings.Contains(string(body), "no worker of this node is ready") {
		t.Errorf("GET /readyz of a node whose worker restarts: %d %s; want 503 naming its workers", status, body)
	}
	if status, body, err := front.get("/readyz"); err != nil || status != http.StatusOK {
		t.Errorf("GET /readyz of the front end meanwhile: %d %s, %v; want 200, as the other node runs", status, body, err)
	}
	if p, err := predictWithin(slow, requestTimeout, 0, "through the other node"); err != nil || p.Status != http.StatusOK {
		t.Errorf("a request to the node meanwhile: %s, %v; want 200, run by the other node", p, err)
	}
	waitReadyz(t, slow, http.StatusOK)
}
