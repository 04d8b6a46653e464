package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

// The log lines of a mix of versions among the nodes, of its end, and of
// a front end of a version no node runs.
const (
	versionsMixed   = "the nodes under this key prefix run more than one version of the model: a request is answered by whichever version runs it (a rolling upgrade shows this until it is done; else give every node the same model file, plugin binary and --plugin-arg)"
	versionsUnmixed = "the nodes under this key prefix no longer run more than one version of the model"
	versionOfFront  = "this front end's model is another version than every node's: it names its own model (on the v2 routes too) while the nodes answer with theirs (give it the nodes' --model file, or binary and --plugin-arg; SIGHUP it once its file is replaced)"
)

// brokerVersions is what /v1/stats says of the versions of the model.
type brokerVersions struct {
	Broker struct {
		FrontEnd struct {
			Nodes         int64 `json:"nodes"`
			ModelVersions int64 `json:"model_versions"`
			OtherVersion  bool  `json:"other_version"`
		} `json:"front_end"`
		Node *struct {
			ModelVersions int64 `json:"model_versions"`
		} `json:"node"`
	} `json:"broker"`
}

func versionsOf(t *testing.T, s *server) brokerVersions {
	t.Helper()
	var v brokerVersions
	if status, body, err := s.get("/v1/stats"); err != nil || status != http.StatusOK || json.Unmarshal(body, &v) != nil {
		t.Fatalf("GET /v1/stats: %d %v %s", status, err, body)
	}
	return v
}

// TestBrokerNodesOfTwoVersionsAreSeen: two nodes of the same model but
// other settings (sleep:10ms,100us and sleep:10ms,200us, as two weights
// files of one signature, or two --plugin-arg) both serve under one
// prefix, as a rolling upgrade needs, but not unseen: every node and
// front end counts 2 versions in /v1/stats and streamer status, and logs
// a warning naming them, once; a front end of a third version says its
// own is none of the nodes'. Once a node has left, the count is 1 again.
func TestBrokerNodesOfTwoVersionsAreSeen(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	old := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:10ms,100us")
	upgraded := startBrokerNode(t, rs, "--workers", "1", "--model", "sleep:10ms,200us")
	front := startBrokerFront(t, rs, "--model", "sleep:10ms,100us")
	other := startBrokerFront(t, rs, "--model", "sleep:10ms,300us")
	waitReadyz(t, front, http.StatusOK)
	for i := range 4 {
		if p, err := predictWithin(front, requestTimeout, 0, "x"); err != nil || p.Status != http.StatusOK {
			t.Fatalf("request %d through a front end, nodes of two versions: %s, %v; want 200", i, p, err)
		}
	}
	waitFor(t, "the front end to count 2 versions", brokerWait, func() bool {
		v := versionsOf(t, front)
		return v.Broker.FrontEnd.Nodes == 2 && v.Broker.FrontEnd.ModelVersions == 2
	})
	if v := versionsOf(t, front); v.Broker.FrontEnd.OtherVersion {
		t.Errorf("the front end of the first node's model says it is of another version: %+v", v.Broker)
	}
	waitFor(t, "the upgraded node to count 2 versions", brokerWait, func() bool {
		v := versionsOf(t, upgraded)
		return v.Broker.Node != nil && v.Broker.Node.ModelVersions == 2
	})
	waitFor(t, "the front end of a third version to say so", brokerWait, func() bool {
		v := versionsOf(t, other)
		return v.Broker.FrontEnd.OtherVersion && v.Broker.FrontEnd.ModelVersions == 2
	})
	// Once in each process: a node process's front end says it, its node
	// only counts.
	lines := map[*server]int{old: 1, upgraded: 1, front: 1, other: 1}
	for s, want := range lines {
		waitFor(t, "the warning of two versions", brokerWait, func() bool { return len(logLines(s.logs(), versionsMixed)) == want })
		for _, line := range logLines(s.logs(), versionsMixed) {
			if versions := fmt.Sprint(line["versions"]); line["level"] != "WARN" || !regexp.MustCompile(`^[0-9a-f]{16} \(.+\); [0-9a-f]{16} \(.+\)$`).MatchString(versions) {
				t.Errorf("the warning of two versions: %v; want WARN naming two, each with its node", line)
			}
		}
	}
	brokerLogField(t, other, versionOfFront, "nodes")
	if strings.Contains(front.logs(), versionOfFront) {
		t.Errorf("the front end of the first node's model says it is of another version:\n%s", front.logs())
	}
	if status, body, err := front.get("/metrics"); err != nil || status != http.StatusOK || !regexp.MustCompile(`(?m)^streamer_broker_model_versions 2$`).Match(body) {
		t.Errorf("GET /metrics of the front end: %d %v; want streamer_broker_model_versions 2:\n%s", status, err, body)
	}
	out, err := runStatus(t, front.URL())
	if want := `(?m)^model versions +2 among the nodes: `; err != nil || !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("streamer status of the front end: %v; lacks %s:\n%s", err, want, out)
	}

	signalGroup(t, upgraded, syscall.SIGTERM)
	waitFor(t, "the front end to count 1 version once a node left", brokerWait, func() bool {
		return versionsOf(t, front).Broker.FrontEnd.ModelVersions == 1
	})
	brokerLogField(t, front, versionsUnmixed, "versions")
	for s, want := range lines {
		if n := len(logLines(s.logs(), versionsMixed)); n != want {
			t.Errorf("the warning of two versions logged %d times; want %d:\n%s", n, want, s.logs())
		}
	}
	if out, err := runStatus(t, front.URL()); err != nil || strings.Contains(out, "model versions") {
		t.Errorf("streamer status of the front end, one version left: %v; want no line of versions:\n%s", err, out)
	}
}

// logLines are the JSON log lines whose msg is msg.
func logLines(logs, msg string) []map[string]any {
	var found []map[string]any
	for line := range strings.Lines(logs) {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) == nil && fields["msg"] == msg {
			found = append(found, fields)
		}
	}
	return found
}

// TestBrokerANodeReloadedOnNewWeightsIsAnotherVersion: a node whose reload
// serves a new file of the same inputs and outputs (new weights), as a
// rolling upgrade does node by node, publishes the new file's version
// from then on: the nodes not yet reloaded count two versions. Before,
// the version was the one read at start, and the mix went unseen.
func TestBrokerANodeReloadedOnNewWeightsIsAnotherVersion(t *testing.T) {
	onnxModel(t, onnxtest.MLP) // fails the test at once when the runtime library is missing
	rs := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.onnx"), filepath.Join(dir, "second.onnx")
	installModel(t, first, onnxtest.MLP)
	installModel(t, second, onnxtest.MLP)
	old := startBrokerNode(t, rs, "--workers", "1", "--intra-op-threads", "1", "--model", first)
	upgraded := startBrokerNode(t, rs, "--workers", "1", "--intra-op-threads", "1", "--model", second, "--admin", "--auth-token", adminToken)
	upgraded.token = adminToken
	waitFor(t, "both nodes counted, of one version", brokerWait, func() bool {
		v := versionsOf(t, old)
		return v.Broker.FrontEnd.Nodes == 2 && v.Broker.FrontEnd.ModelVersions == 1
	})

	installModel(t, second, onnxtest.Demo)
	if status, answer := upgraded.admin(t, "/admin/reload", "{}"); status != http.StatusOK {
		t.Fatalf("POST /admin/reload of new weights: %d %v", status, answer)
	}
	waitFor(t, "the node not reloaded to count two versions", brokerWait, func() bool {
		v := versionsOf(t, old)
		return v.Broker.Node != nil && v.Broker.Node.ModelVersions == 2
	})
	if v := versionsOf(t, upgraded); v.Broker.FrontEnd.OtherVersion {
		t.Errorf("the reloaded node's front end says its version is none of the nodes': %+v", v.Broker)
	}
}

// TestBrokerAFrontEndReadsItsModelAgainOnSIGHUP: in a rolling upgrade by
// reloads, the model file is replaced and every server signalled. A node
// reloads its workers; a front end, which has none, reads its --model
// file again, and names the new version as the nodes do: its /v1/models
// gives the new file's checksum, and it no longer says its version is
// none of the nodes'. Before, it kept the version read at start until
// restarted, and its warning told to give it the file it had.
func TestBrokerAFrontEndReadsItsModelAgainOnSIGHUP(t *testing.T) {
	onnxModel(t, onnxtest.MLP) // fails the test at once when the runtime library is missing
	rs := redistest.Start(t, redistest.Options{})
	file := filepath.Join(t.TempDir(), "model.onnx")
	installModel(t, file, onnxtest.MLP)
	node := startBrokerNode(t, rs, "--workers", "1", "--intra-op-threads", "1", "--model", file)
	front := startBrokerFront(t, rs, "--model", file)
	waitFor(t, "the front end to count the node, of its own version", brokerWait, func() bool {
		v := versionsOf(t, front)
		return v.Broker.FrontEnd.Nodes == 1 && v.Broker.FrontEnd.ModelVersions == 1 && !v.Broker.FrontEnd.OtherVersion
	})

	data := installModel(t, file, onnxtest.Demo)
	if err := node.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the front end to see the node's new version as none of its own", brokerWait, func() bool {
		return versionsOf(t, front).Broker.FrontEnd.OtherVersion
	})
	if err := front.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the front end to name the nodes' version", brokerWait, func() bool {
		return !versionsOf(t, front).Broker.FrontEnd.OtherVersion
	})
	sum := sha256.Sum256(data)
	if status, body, err := front.get("/v1/models"); err != nil || status != http.StatusOK || !strings.Contains(string(body), hex.EncodeToString(sum[:])) {
		t.Errorf("GET /v1/models: %d %v %s; want the new file's sha256", status, err, body)
	}
	if !strings.Contains(front.logs(), "its model's file read again is a new version") {
		t.Errorf("the front end's log does not say it read a new version:\n%s", front.logs())
	}
}
