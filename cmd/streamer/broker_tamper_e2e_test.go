package main

// Front ends and nodes whose Redis holds, under their prefix, keys of
// another type than theirs (written by hand, or by another program that
// shares the Redis), driven through the binary.

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
)

// replaceWithHash is a script that replaces the key KEYS[1] with a hash,
// as an operator's mistake would.
const replaceWithHash = "redis.call('DEL', KEYS[1]); return redis.call('HSET', KEYS[1], 'zz', 'b')"

// TestBrokerANodesOwnStreamOfAnotherTypeUnderLoad: under load, the only
// node's own stream replaced by a hash stopped the node for good, while it
// beat as alive, and every caller waited for its deadline; and the
// admissions routed to the stream as it was a hash failed. The node now
// replaces the key with a new stream, saying what it held, such an
// admission goes to the shared stream, and every caller is answered (but
// those whose items were on the stream as it went, who are told so).
func TestBrokerANodesOwnStreamOfAnotherTypeUnderLoad(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:1ms,0s")
	name := brokerLogField(t, node, "node serving items from redis", "node")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)

	var answered atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for range 8 {
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := predictWithin(front, 5*time.Second, 0, "x")
				switch {
				case err == nil && p.Status == http.StatusOK:
					answered.Add(1)
				default:
					mu.Lock()
					failures = append(failures, p.String()+" "+errString(err))
					mu.Unlock()
				}
			}
		})
	}
	waitFor(t, "requests answered before the stream is replaced", brokerWait, func() bool { return answered.Load() >= 50 })
	rs.Do(t, "EVAL", replaceWithHash, "1", brokerItemsKey+":"+name)
	held := brokerLogField(t, node, "the node's own stream held another type than a stream: replaced by a new stream; what the key held is lost, and so are the items that were on the stream, whose front ends fail their callers", "held")
	after := answered.Load()
	waitFor(t, "requests answered after the stream is replaced", brokerWait, func() bool { return answered.Load() >= after+50 })
	close(stop)
	clients.Wait()
	if held != `a hash of 1 field: "zz" "b"` {
		t.Errorf("the node's log says the key held %q; want the hash's field and value", held)
	}
	// The items on the stream as it was deleted are gone with it, and
	// their callers told so: at most one a client. No other may fail.
	var other []string
	lost := 0
	for _, f := range failures {
		if strings.Contains(f, "lost the request's items") {
			lost++
		} else {
			other = append(other, f)
		}
	}
	if len(other) > 0 || lost > 8 {
		t.Errorf("%d requests failed around the stream's replacement by a hash, %d of them lost with it: %q", len(failures), lost, failures[:min(len(failures), 5)])
	}
	if typ := rs.Do(t, "TYPE", brokerItemsKey+":"+name); typ != "stream" {
		t.Errorf("the node's own stream is a %s; want a stream", typ)
	}
}

// TestBrokerASharedStreamOfAnotherTypeIsNamed: the shared stream replaced
// by a hash is left to an operator: the node and the front end say, in
// /readyz, that they take nothing and why, naming the key, requests get
// 503 naming it, and both serve again once it is deleted.
func TestBrokerASharedStreamOfAnotherTypeIsNamed(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:1ms,0s")
	front := startBrokerFront(t, rs)
	waitReadyz(t, front, http.StatusOK)
	rs.Do(t, "EVAL", replaceWithHash, "1", brokerItemsKey)
	const why = brokerItemsKey + " holds a hash, where streamer keeps"
	for _, s := range []*server{node, front} {
		waitFor(t, "/readyz naming the key of another type", brokerWait, func() bool {
			status, body, err := s.get("/readyz")
			return err == nil && status == http.StatusServiceUnavailable && strings.Contains(string(body), why)
		})
	}
	if p, err := predictWithin(front, 5*time.Second, 0, "x"); err != nil || p.Status != http.StatusServiceUnavailable || !strings.Contains(p.Error, why) {
		t.Errorf("a request while the shared stream is a hash: %s, %v; want 503 naming the key", p, err)
	}
	rs.Do(t, "DEL", brokerItemsKey)
	waitReadyz(t, node, http.StatusOK)
	waitReadyz(t, front, http.StatusOK)
	if p, err := predictWithin(front, 5*time.Second, 0, "x"); err != nil || p.Status != http.StatusOK {
		t.Errorf("a request once the key is deleted: %s, %v; want 200", p, err)
	}
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
