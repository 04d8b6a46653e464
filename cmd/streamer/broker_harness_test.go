package main

// Helpers for the tests of the many-machine mode: real `streamer serve`
// processes sharing one real redis-server, as front ends (--workers 0) and
// GPU nodes (--workers > 0), and a look at what Redis holds for them.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/procstat"
	"github.com/streamer-dev/streamer/internal/redistest"
)

// The keys a broker under the default prefix keeps in Redis.
const (
	brokerItemsKey = "streamer:items"
	brokerNodesKey = "streamer:nodes"
	// brokerStreamsKey lists the nodes' own streams, brokerItemsKey+":NODE".
	brokerStreamsKey = "streamer:streams"
	brokerReplyKeys  = "streamer:reply:"
	// brokerEpochKey changes when Redis loses its data.
	brokerEpochKey = "streamer:epoch"
	// brokerModelKey holds the model the nodes serve.
	brokerModelKey = "streamer:model"
	// brokerSizesKey holds the mean size of the requests admitted of late.
	brokerSizesKey = "streamer:sizes"
	// brokerVersionsKey holds the version of each live node's model.
	brokerVersionsKey = "streamer:versions"
	brokerGroup       = "nodes"
)

// brokerWait bounds the waits of these tests on the cluster: for a
// process's start, a claim, a key's expiry. Each normally takes a second or
// two.
const brokerWait = 15 * time.Second

// launchBroker runs `streamer serve --broker url --log-format json args...`
// and waits until its front end has started, with Redis or without, or
// refused a permission (it then retries), without waiting for /readyz: a
// front end is ready only once some node is alive.
func launchBroker(t *testing.T, url string, args ...string) *server {
	t.Helper()
	s := launchServer(t, append([]string{"--broker", url, "--log-format", "json"}, args...)...)
	waitFor(t, "the front end to start", brokerWait, func() bool {
		_, up := jsonLogAttr(s.logs(), "front end sending requests through redis", "front")
		_, down := jsonLogAttr(s.logs(), "front end started without redis; retrying", "front")
		_, refused := jsonLogAttr(s.logs(), frontStartedRefused, "front")
		if !up && !down && !refused && s.exited() {
			t.Fatalf("the server exited before its front end started:\n%s", s.logs())
		}
		return up || down || refused
	})
	return s
}

// frontStartedRefused is the log line of a front end whose start Redis
// refuses a permission.
const frontStartedRefused = "front end started, but redis refuses its user a permission; retrying until it is granted (the README's \"Many machines\" lists what the user needs)"

// startBrokerNode runs a GPU node (the caller's args name the model and
// workers) and waits until it is ready: its workers are up and it has said
// it is alive on Redis.
func startBrokerNode(t *testing.T, rs *redistest.Server, args ...string) *server {
	t.Helper()
	return startBrokerNodeAt(t, rs.URL(), args...)
}

// startBrokerNodeAt is startBrokerNode with the broker URL given whole (a
// client_name in its query names the node's connections to Redis).
func startBrokerNodeAt(t *testing.T, url string, args ...string) *server {
	t.Helper()
	s := launchBroker(t, url, args...)
	brokerLogField(t, s, "node serving items from redis", "node")
	waitReadyz(t, s, http.StatusOK)
	return s
}

// startBrokerFront runs a front end (--workers 0). It is not waited for to
// be ready, as it may be started before any node.
func startBrokerFront(t *testing.T, rs *redistest.Server, args ...string) *server {
	t.Helper()
	return launchBroker(t, rs.URL(), append([]string{"--workers", "0"}, args...)...)
}

// waitReadyz waits until GET /readyz answers want (or, with want 0, anything
// but 200).
func waitReadyz(t *testing.T, s *server, want int) {
	t.Helper()
	what := fmt.Sprintf("GET /readyz to answer %d", want)
	if want == 0 {
		what = "GET /readyz to answer other than 200"
	}
	waitFor(t, what, brokerWait, func() bool {
		status, _, err := s.get("/readyz")
		if want == 0 {
			return err == nil && status != http.StatusOK
		}
		return err == nil && status == want
	})
}

// within polls cond every pollInterval until it holds or timeout passes,
// and reports whether it held.
func holdsWithin(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// brokerLogField waits for the JSON log line whose msg is msg and returns
// its attribute field, failing the test if the process exits first.
func brokerLogField(t *testing.T, s *server, msg, field string) string {
	t.Helper()
	var value string
	waitFor(t, fmt.Sprintf("the log line %q", msg), brokerWait, func() bool {
		if v, ok := jsonLogAttr(s.logs(), msg, field); ok {
			value = v
			return true
		}
		if s.exited() {
			t.Fatalf("the server exited before logging %q:\n%s", msg, s.logs())
		}
		return false
	})
	return value
}

// jsonLogAttr finds the first JSON log line whose msg is msg and returns its
// attribute field as text.
func jsonLogAttr(logs, msg, field string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil || line["msg"] != msg {
			continue
		}
		return fmt.Sprint(line[field]), true
	}
	return "", false
}

// sigkillGroup ends a server and its workers at once, as a machine losing power
// would: SIGKILL to its whole process group, then waits for it to be gone.
func sigkillGroup(t *testing.T, s *server) {
	t.Helper()
	signalGroup(t, s, syscall.SIGKILL)
	if _, err := s.wait(stopTimeout); err != nil {
		t.Fatal(err)
	}
}

// freezeGroup stops a server's process group (SIGSTOP) and waits until the
// server itself is stopped: the signal is delivered, not yet acted on, when
// kill returns.
func freezeGroup(t *testing.T, s *server) {
	t.Helper()
	signalGroup(t, s, syscall.SIGSTOP)
	waitFor(t, "the server to stop", stopTimeout, func() bool {
		fields, err := procstat.Fields(s.cmd.Process.Pid)
		if err != nil {
			t.Fatalf("the server's state: %v", err)
		}
		return len(fields) > 0 && (fields[0] == "T" || fields[0] == "t")
	})
}

// signalGroup sends sig to a server's whole process group.
func signalGroup(t *testing.T, s *server, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("%v to the process group of %d: %v", sig, s.cmd.Process.Pid, err)
	}
}

// predicted is the outcome of a request sent from a goroutine.
type predicted struct {
	p   prediction
	err error
}

// predictLater posts one request of inputs, as predictWithin does, from a
// goroutine; its outcome comes on the channel.
func predictLater(s *server, clientTimeout time.Duration, inputs ...any) <-chan predicted {
	later := make(chan predicted, 1)
	go func() {
		p, err := predictWithin(s, clientTimeout, 0, inputs...)
		later <- predicted{p, err}
	}()
	return later
}

// predictWithin posts one request of inputs, with timeout_ms when it is not
// zero, through a client that gives up after clientTimeout; safe from any
// goroutine.
func predictWithin(s *server, clientTimeout time.Duration, timeoutMs int, inputs ...any) (prediction, error) {
	body := map[string]any{"inputs": inputs}
	if timeoutMs > 0 {
		body["timeout_ms"] = timeoutMs
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return prediction{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	status, data, hdr, err := s.do(ctx, http.MethodPost, "/predict", "application/json", raw)
	if err != nil {
		return prediction{}, fmt.Errorf("POST /predict %s: %w", raw, err)
	}
	return decodePrediction(status, data, hdr)
}

// redisKeys returns the keys matching pattern, sorted.
func redisKeys(t *testing.T, rs *redistest.Server, pattern string) []string {
	t.Helper()
	out := rs.Do(t, "KEYS", pattern)
	if out == "" {
		return nil
	}
	keys := strings.Split(out, "\n")
	slices.Sort(keys)
	return keys
}

// redisItems returns the items on the shared stream and the nodes' own,
// waiting or running.
func redisItems(t *testing.T, rs *redistest.Server) int {
	t.Helper()
	n := 0
	for _, key := range redisKeys(t, rs, brokerItemsKey+"*") {
		n += redisInt(t, rs, "XLEN", key)
	}
	return n
}

// redisInt runs a command answered by an integer.
func redisInt(t *testing.T, rs *redistest.Server, args ...string) int {
	t.Helper()
	out := rs.Do(t, args...)
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("%s: answer %q is not an integer", strings.Join(args, " "), out)
	}
	return n
}

// redisPending returns the items consumer holds in the group, read but
// not yet acknowledged, on the shared stream and the nodes' own, each as
// "stream id".
func redisPending(t *testing.T, rs *redistest.Server, consumer string) []string {
	t.Helper()
	var held []string
	for _, key := range redisKeys(t, rs, brokerItemsKey+"*") {
		// Each entry is id, consumer, idle time, deliveries.
		out := rs.Do(t, "XPENDING", key, brokerGroup, "-", "+", "100000", consumer)
		if out == "" {
			continue
		}
		lines := strings.Split(out, "\n")
		for i := 0; i+3 < len(lines); i += 4 {
			held = append(held, key+" "+lines[i])
		}
	}
	return held
}

// redisStreamItem is an item waiting on an items stream.
type redisStreamItem struct {
	front string // the id of the front end that asked
	value string // the item's bytes
}

// redisStreamItems returns the items on the shared stream and the nodes'
// own, by "stream id".
func redisStreamItems(t *testing.T, rs *redistest.Server) map[string]redisStreamItem {
	t.Helper()
	items := map[string]redisStreamItem{}
	for _, key := range redisKeys(t, rs, brokerItemsKey+"*") {
		out := rs.Do(t, "XRANGE", key, "-", "+")
		if out == "" {
			continue
		}
		// Each entry is its id, then field, value pairs; every entry has
		// the same fields, the batch key aside, which these tests never
		// set.
		lines := strings.Split(out, "\n")
		for i := 0; i < len(lines); {
			id := lines[i]
			i++
			var it redisStreamItem
			for ; i+1 < len(lines) && !isStreamID(lines[i]); i += 2 {
				switch lines[i] {
				case "h": // the header: front end, request number, ...
					it.front, _, _ = strings.Cut(lines[i+1], " ")
				case "v":
					it.value = lines[i+1]
				}
			}
			items[key+" "+id] = it
		}
	}
	return items
}

// isStreamID reports whether s looks like a stream entry id (ms-seq): no
// field name of an item does.
func isStreamID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}
