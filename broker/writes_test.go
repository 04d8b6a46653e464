package broker_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// slowWrites is a TCP proxy to a Redis that holds every chunk a client
// sends with an XACK in it (a node's write of answers, which acknowledges
// their items) until a second such chunk is held too, or for hold at most,
// and counts how many it held at once. The node's first question to Redis,
// COMMAND INFO with XACK among the commands it names, goes on at once: held,
// it counted as a write of answers, and the test's wait for the first
// write held was over before that write was made.
type slowWrites struct {
	ln     net.Listener
	hold   time.Duration
	mu     sync.Mutex
	now    int
	most   int
	two    chan struct{} // closed once two are held at once
	closed chan struct{}
}

func newSlowWrites(t *testing.T, to string, hold time.Duration) *slowWrites {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowWrites{ln: ln, hold: hold, two: make(chan struct{}), closed: make(chan struct{})}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		close(p.closed)
		_ = ln.Close()
		conns.Wait()
	})
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			// Either direction ending, or the test's end, closes both.
			end := func() { _ = c.Close(); _ = r.Close() }
			conns.Go(func() { _, _ = io.Copy(c, r); end() })
			conns.Go(func() { p.forward(c, r); end() })
			conns.Go(func() {
				<-p.closed
				end()
			})
		}
	})
	return p
}

// forward copies a client's commands to Redis, holding those that write
// answers.
func (p *slowWrites) forward(c, r net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if chunk := bytes.ToLower(buf[:n]); bytes.Contains(chunk, []byte("xack")) && !bytes.Contains(chunk, []byte("command")) {
				p.mu.Lock()
				p.now++
				if p.now == 2 && p.most < 2 {
					close(p.two)
				}
				p.most = max(p.most, p.now)
				p.mu.Unlock()
				select {
				case <-time.After(p.hold):
				case <-p.two:
				case <-p.closed:
				}
				p.mu.Lock()
				p.now--
				p.mu.Unlock()
			}
			if _, err := r.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *slowWrites) url() string { return "redis://" + p.ln.Addr().String() }

// mostAtOnce is the most answer writes the proxy held at once.
func (p *slowWrites) mostAtOnce() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most
}

// Two workers of a node finish one after the other while the first's
// answers are on their way to Redis: the second's go at once, on a
// connection of their own, rather than wait for the first write's round
// trip (at moderate load a node's two workers often finish within a
// fraction of a millisecond of each other, and their callers came back a
// round trip apart).
func TestASecondBatchsAnswersDoNotWaitForTheFirstsWrite(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	// Held longer than the second batch takes to finish, and shorter than
	// a write's time out (2s).
	proxy := newSlowWrites(t, rs.Addr(), 1500*time.Millisecond)
	rec := newRecorder()
	rec.hold["second"] = true
	startNodeOn(t, rs, supervisor.Config{InProcess: rec, Workers: 2, BatchSize: 1, Batching: supervisor.BatchingGreedy},
		func(c *broker.NodeConfig) { c.URL = proxy.url() })
	fe := startFront(t, rs, nil)
	eventually(t, "front end ready", fe.Ready)
	if got := proxy.mostAtOnce(); got != 0 {
		t.Fatalf("the proxy held %d chunks before any item was sent; it holds only writes of answers", got)
	}
	second := predictLater(t, fe, "second")
	eventually(t, "the second item running", func() bool { return rec.runs("second") == 1 })
	first := predictLater(t, fe, "first")
	eventually(t, "the first item's answers held on their way to Redis", func() bool { return proxy.mostAtOnce() == 1 })
	close(rec.release)
	for _, later := range []<-chan answer{first, second} {
		if a := <-later; a.err != nil {
			t.Fatal(a.err)
		}
	}
	if got := proxy.mostAtOnce(); got != 2 {
		t.Fatalf("the proxy held at most %d of the node's writes at once; want 2: the second batch's answers went while the first's were out", got)
	}
}
