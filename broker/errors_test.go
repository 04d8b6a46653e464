package broker_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestStartErrorsAreToldApartWithErrorsIs: an embedder tells what a
// Start met with errors.Is alone. Redis down or hung is ErrUnavailable,
// and not the caller's deadline while that has time left (a check's own
// timeout was once in the chain); a wrong password is ErrRefused, for a
// front end and a node alike.
func TestStartErrorsAreToldApartWithErrorsIs(t *testing.T) {
	down := redistest.Start(t, redistest.Options{})
	down.Kill()
	hung := redistest.Start(t, redistest.Options{})
	hung.Vanish(t)
	locked := redistest.Start(t, redistest.Options{Password: "s3cret"})
	began := time.Now()
	for _, tc := range []struct {
		name, url string
		want      error
	}{
		{"redis down", down.URL(), supervisor.ErrUnavailable},
		{"redis hung", hung.URL(), supervisor.ErrUnavailable},
		{"a wrong password", "redis://:wrong@" + locked.Addr(), broker.ErrRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			check := func(who string, err error) {
				t.Helper()
				if !errors.Is(err, tc.want) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, broker.ErrModelMismatch) {
					t.Errorf("%s's start: %v; want it to be %v alone", who, err, tc.want)
				}
			}
			startEach(ctx, t, tc.url, check)
		})
	}
	// Each start is bounded by its own time, not the caller's 30 s: a
	// node's once waited for a hung Redis three times the client's
	// ReadTimeout.
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the starts took %s", took.Round(time.Millisecond))
	}
}

// echoItems is a model that answers each item with itself.
var echoItems = model.Func(func(_ context.Context, items [][]byte) ([][]byte, error) { return items, nil })

// newNode makes a node on redisURL for st, not started, shut down when the test
// ends.
func newNode(t *testing.T, redisURL string, st *supervisor.Streamer) *broker.Node {
	t.Helper()
	node, err := broker.NewNode(broker.NodeConfig{Config: broker.Config{URL: redisURL}, Streamer: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Shutdown(context.Background()) })
	return node
}

// TestANodeOnAStreamerNotStartedIsRefused: a node whose Streamer never
// started would run nothing, and front ends would blame its workers: its
// Start says what is missing instead, and succeeds once it is there.
func TestANodeOnAStreamerNotStartedIsRefused(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	st, err := supervisor.New(supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Shutdown(context.Background()) })
	node := newNode(t, rs.URL(), st)
	if err := node.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "Streamer is not started, or shut down") {
		t.Fatalf("a node's start on a streamer not started: %v; want a refusal saying so", err)
	}
	if err := st.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(context.Background()); err != nil {
		t.Fatalf("the node's start once its streamer runs: %v", err)
	}
	fe := startFront(t, rs, nil)
	answersEventually(t, fe, "x", "the node to answer")

	// One shut down is refused alike: its node would beat as one whose
	// workers cannot run, for ever.
	if err := st.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := newNode(t, rs.URL(), st).Start(context.Background()); err == nil || !strings.Contains(err.Error(), "Streamer is not started, or shut down") {
		t.Errorf("a node's start on a streamer shut down: %v; want a refusal saying so", err)
	}
}

// TestAJoinCutShortIsMadeAgain: a node whose start made its groups but
// could not list its own stream (here its user may not SADD; a reply lost
// on a slow link did it too) joins again at its next beats, until its
// stream is listed: front ends route callers back only to listed streams.
func TestAJoinCutShortIsMadeAgain(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	rs.Do(t, "ACL", "SETUSER", "node", "on", ">pw", "~streamer:*", "+@all", "-sadd")
	u, err := url.Parse(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("node", "pw")
	st := startStreamer(t, supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4})
	node := newNode(t, u.String(), st)
	if err := node.Start(context.Background()); !errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a node's start whose join is refused its last step: %v; want ErrUnavailable saying NOPERM", err)
	}
	own := "streamer:items:" + node.Name()
	if rs.Do(t, "SISMEMBER", "streamer:streams", own) != "0" {
		t.Fatal("the node's stream is listed, though its user may not list it")
	}
	rs.Do(t, "ACL", "SETUSER", "node", "+sadd")
	eventually(t, "the node's stream listed by a later join", func() bool {
		return rs.Do(t, "SISMEMBER", "streamer:streams", own) == "1"
	})
}

// TestAModelMismatchFoundLaterIsAnErrModelMismatch: a front end started
// before the nodes of another model fails its calls with an error that is
// both ErrUnavailable (a 503) and ErrModelMismatch (no retry mends it),
// as its Start would have, had the nodes been first.
func TestAModelMismatchFoundLaterIsAnErrModelMismatch(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	fe := startFront(t, rs, func(c *broker.FrontEndConfig) { c.Model = broker.ModelID{Wire: "text", Name: "a"} })
	startNode(t, rs, echoItems, 4, func(c *broker.NodeConfig) { c.Model = broker.ModelID{Wire: "tensors", Name: "b"} })
	eventually(t, "the front end to find the nodes' model", func() bool {
		_, err := predict(t, fe, "x")
		return errors.Is(err, broker.ErrModelMismatch) && errors.Is(err, supervisor.ErrUnavailable)
	})
	if _, err := predict(t, fe, "x"); errors.Is(err, broker.ErrVersionMismatch) {
		t.Errorf("a call: %v; want no ErrVersionMismatch, as the nodes run this version", err)
	}
	if fe.Ready() {
		t.Error("the front end is ready, though the nodes read items otherwise than it writes them")
	}
}

// TestANodesMetricsAloneCanBeScraped: Collector(nil, node), for a process
// that runs a node and no front end, gives the node's metrics and no
// front end's.
func TestANodesMetricsAloneCanBeScraped(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	node := startNode(t, rs, echoItems, 4, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(broker.Collector(nil, node))
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("a scrape of a node's metrics alone: %v", err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	joined := strings.Join(names, " ")
	if !strings.Contains(joined, "streamer_broker_node_items_total") || strings.Contains(joined, "streamer_broker_backlog_items") {
		t.Errorf("a node's metrics alone: %s; want the node's, and none of a front end's", joined)
	}
}

// fakeServer listens on loopback and has serve talk on each connection
// accepted, until the test ends; it returns the server's redis:// URL.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	}()
	return "redis://" + ln.Addr().String() + "/0"
}

// TestAServerThatIsNotRedisIsRefusedAtStart: a URL that names a server
// of another protocol served for ever as not ready. A reply that is not
// Redis's makes the start of a front end or a node an ErrUnsupportedRedis
// that says what the server answered, and the node runs nothing; a server
// that accepts and says nothing (a Redis that hangs looks the same) is an
// outage, retried, whose error says what it waits for.
func TestAServerThatIsNotRedisIsRefusedAtStart(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	for _, tc := range []struct {
		name, url, answered string
	}{
		{"an HTTP server", "redis://" + web.Listener.Addr().String() + "/0", `"HTTP/1.1 400 Bad Request"`},
		{"an SSH banner", fakeServer(t, func(c net.Conn) {
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_8.9\r\n"))
			_, _ = io.Copy(io.Discard, c)
		}), `"SSH-2.0-OpenSSH_8.9"`},
		{"a server that says +OK to all", fakeServer(t, func(c net.Conn) {
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte("+OK\r\n"))
			}
		}), `"+OK"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := "does not speak the Redis protocol: it answered " + tc.answered
			check := func(who string, err error) {
				t.Helper()
				if !errors.Is(err, broker.ErrUnsupportedRedis) || errors.Is(err, supervisor.ErrUnavailable) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s's start: %v; want ErrUnsupportedRedis saying %q", who, err, want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			startEach(ctx, t, tc.url, check)
		})
	}
	t.Run("a server that says nothing", func(t *testing.T) {
		url := fakeServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
		fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fe.Close(context.Background()) })
		const waits = "the connection was accepted, and nothing answered: a Redis that hangs or is paused (DEBUG SLEEP, CLIENT PAUSE, a long script), or a server that is not Redis, waiting for more; retrying until it answers as Redis"
		if err := fe.Start(context.Background()); !errors.Is(err, supervisor.ErrUnavailable) || errors.Is(err, broker.ErrUnsupportedRedis) || !strings.Contains(err.Error(), waits) {
			t.Errorf("a front end's start: %v; want ErrUnavailable saying what it waits for", err)
		}
	})
}

// startEach starts a front end and a node of one worker on url within
// ctx, and gives check what each start returned.
func startEach(ctx context.Context, t *testing.T, url string, check func(who string, err error)) {
	t.Helper()
	fe, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: broker.Config{URL: url}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Close(context.Background()) })
	check("a front end", fe.Start(ctx))
	st := startStreamer(t, supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4})
	check("a node", newNode(t, url, st).Start(ctx))
}

// A config that NewFrontEnd or NewNode refuses is refused naming the
// field at fault, with its value, and what it may be: not the others it
// was checked with (before, "MaxBacklog, MaxItems, MaxItemBytes and Outage
// must not be negative" for one of them). ClaimIdle past an hour is
// refused by the broker itself, not only by streamer serve's flags.
func TestABadConfigIsRefusedNamingItsField(t *testing.T) {
	st, err := supervisor.New(supervisor.Config{InProcess: echoItems, Workers: 1, BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	base := broker.Config{URL: "redis://127.0.0.1:1"}
	with := func(tweak func(*broker.Config)) broker.Config {
		c := base
		tweak(&c)
		return c
	}
	for _, tc := range []struct {
		name   string
		front  *broker.FrontEndConfig
		node   *broker.NodeConfig
		want   string
		others []string // named by the error of another field
	}{
		{name: "MaxBacklog", front: &broker.FrontEndConfig{Config: base, MaxBacklog: -1}, want: "broker: MaxBacklog -1 must not be negative (zero means the default)", others: []string{"MaxItems", "Outage"}},
		{name: "Outage", front: &broker.FrontEndConfig{Config: base, Outage: -time.Second}, want: "broker: Outage -1s must not be negative", others: []string{"MaxBacklog"}},
		{name: "Capacity", node: &broker.NodeConfig{Config: base, Streamer: st, Capacity: -1}, want: "broker: Capacity -1 must not be negative", others: []string{"PoisonTTL"}},
		{name: "ClaimIdle below", front: &broker.FrontEndConfig{Config: with(func(c *broker.Config) { c.ClaimIdle = -1 })}, want: "broker: ClaimIdle -1ns: want 100ms to 1h0m0s", others: []string{"ReplyTTL"}},
		{name: "ClaimIdle above", node: &broker.NodeConfig{Config: with(func(c *broker.Config) { c.ClaimIdle = 2 * time.Hour }), Streamer: st}, want: "broker: ClaimIdle 2h0m0s: want 100ms to 1h0m0s", others: []string{"ReplyTTL"}},
		{name: "ReplyTTL", front: &broker.FrontEndConfig{Config: with(func(c *broker.Config) { c.ReplyTTL = 25 * time.Hour })}, want: "broker: ReplyTTL 25h0m0s: want 1s to 24h0m0s", others: []string{"ClaimIdle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.front != nil {
				_, err = broker.NewFrontEnd(*tc.front)
			} else {
				_, err = broker.NewNode(*tc.node)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want %q", err, tc.want)
			}
			for _, other := range tc.others {
				if strings.Contains(err.Error(), other) {
					t.Errorf("error %q names %s, which is not at fault", err, other)
				}
			}
		})
	}
}
