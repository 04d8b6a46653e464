package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

func openUnruly(t *testing.T, echoIDs string, crashed chan<- error) *Model {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := Open(ctx, Config{Path: bin("unruly"), Args: map[string]string{"echo-ids": echoIDs},
		Crashed: func(err error) { crashed <- err }})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestTheSDKEchoesBatchIDs: a plugin built with the SDK has each answer
// checked against its batch by id, not only by order.
func TestTheSDKEchoesBatchIDs(t *testing.T) {
	m := openChaos(t, Config{})
	assertServes(t, m)
	if !m.echoesIDs {
		t.Error("the SDK's answer did not carry its batch's id")
	}
}

// TestAnExtraAnswerGoesToNoBatch: a plugin that answers a batch twice is
// killed, and the extra answer never becomes the next batch's, whether the
// plugin echoes batch ids or, built before them, does not.
func TestAnExtraAnswerGoesToNoBatch(t *testing.T) {
	for _, echoIDs := range []string{"yes", "no"} {
		t.Run("echo-ids="+echoIDs, func(t *testing.T) {
			crashed := make(chan error, 1)
			m := openUnruly(t, echoIDs, crashed)
			items := pack(t, "double")
			outs, err := m.Predict(context.Background(), items)
			if err != nil || len(outs) != 1 || string(outs[0]) != string(items[0]) {
				t.Fatalf("the batch answered twice: %x, %v; want its own first answer", outs, err)
			}
			select {
			case err := <-crashed:
				if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "no batch was waiting") {
					t.Errorf("Crashed got %v, want ErrProtocol naming the answer no batch asked for", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the extra answer was not noticed")
			}
			outs, err = m.Predict(context.Background(), pack(t, "next"))
			if err == nil {
				t.Fatalf("the next batch got %x from a plugin that broke the protocol", outs)
			}
			// The plugin's crash, so that the worker's death has the batch
			// run again elsewhere; not a failure of the batch's own.
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("the next batch failed with %v; want the crash's error, wrapping ErrProtocol", err)
			}
		})
	}
}

// TestALateExtraAnswerGoesToNoBatch: a plugin that answers a batch twice,
// the second time while the next batch waits, never has that answer taken
// for the next batch's: with ids, the id gives it away; without, each
// batch went on a stream of its own, and the extra answer comes on the
// first batch's. The next batch gets its own answer, or fails as the
// plugin is killed for its breach.
func TestALateExtraAnswerGoesToNoBatch(t *testing.T) {
	for _, echoIDs := range []string{"yes", "no"} {
		t.Run("echo-ids="+echoIDs, func(t *testing.T) {
			crashed := make(chan error, 1)
			m := openUnruly(t, echoIDs, crashed)
			first := pack(t, "late:300ms")
			if outs, err := m.Predict(context.Background(), first); err != nil || len(outs) != 1 || string(outs[0]) != string(first[0]) {
				t.Fatalf("the batch answered twice: %x, %v; want its own first answer", outs, err)
			}
			next := pack(t, "next")
			outs, err := m.Predict(context.Background(), next)
			switch {
			case err == nil && (len(outs) != 1 || string(outs[0]) != string(next[0])):
				t.Fatalf("the next batch got %x, not its own answer", outs)
			case err != nil && !errors.Is(err, ErrProtocol):
				t.Errorf("the next batch failed with %v; want its answer, or the crash's error wrapping ErrProtocol", err)
			}
			select {
			case err := <-crashed:
				if !errors.Is(err, ErrProtocol) {
					t.Errorf("Crashed got %v, want ErrProtocol", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the late extra answer was not noticed")
			}
		})
	}
}

// TestAnAnswerWithAnotherBatchsIDIsRefused: the batch after one answered
// twice gets an error, never the extra answer, even when it is sent before
// the extra answer arrives.
func TestAnAnswerWithAnotherBatchsIDIsRefused(t *testing.T) {
	t.Run("the next batch at once", func(t *testing.T) {
		crashed := make(chan error, 1)
		m := openUnruly(t, "yes", crashed)
		if _, err := m.Predict(context.Background(), pack(t, "double")); err != nil {
			t.Fatal(err)
		}
		// The extra answer may come before the next batch is sent: that
		// batch then goes on a new stream and may get its own answer
		// before the plugin is killed. Never the extra one.
		for i := range 3 {
			items := pack(t, fmt.Sprintf("next-%d", i))
			outs, err := m.Predict(context.Background(), items)
			switch {
			case err == nil && (len(outs) != 1 || string(outs[0]) != string(items[0])):
				t.Fatalf("batch %d after the double answer got %x, not its own answer", i, outs)
			case err != nil && !errors.Is(err, ErrProtocol):
				t.Errorf("batch %d after the double answer failed with %v; want its answer, or the crash's error wrapping ErrProtocol", i, err)
			}
		}
		select {
		case err := <-crashed:
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("Crashed got %v, want ErrProtocol", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the extra answer was not noticed")
		}
		if outs, err := m.Predict(context.Background(), pack(t, "after")); !errors.Is(err, ErrProtocol) {
			t.Errorf("a batch after the plugin was killed: %x, %v; want the crash's error wrapping ErrProtocol", outs, err)
		}
	})
	t.Run("a wrong id", func(t *testing.T) {
		crashed := make(chan error, 1)
		m := openUnruly(t, "yes", crashed)
		assertServes(t, m)
		outs, err := m.Predict(context.Background(), pack(t, "wrong-id"))
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "answered batch 2 with the id 102") {
			t.Fatalf("an answer with another id: %x, %v; want ErrProtocol naming both ids", outs, err)
		}
		if cerr := <-crashed; cerr.Error() != err.Error() {
			t.Errorf("Crashed got %q, Predict returned %q", cerr, err)
		}
	})
}

// TestAPluginsOwnUnavailableFailsItsBatch: a live plugin that fails a
// batch with UNAVAILABLE (a backend of its own busy) fails that batch with
// its message, as with any other code; it is no crash, which would have
// its items taken for ones that kill the model. The next batch is served.
func TestAPluginsOwnUnavailableFailsItsBatch(t *testing.T) {
	crashed := make(chan error, 1)
	m := openUnruly(t, "yes", crashed)
	_, err := m.Predict(context.Background(), pack(t, "status:14"))
	if err == nil || errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "failing the stream with code 14") {
		t.Fatalf("a batch the plugin failed with UNAVAILABLE: %v; want its message, and no crash", err)
	}
	select {
	case err := <-crashed:
		t.Fatalf("the plugin was taken for crashed: %v", err)
	default:
	}
	assertServes(t, m)
}

// TestAStreamEndedUnansweredSaysSo: a plugin that ends its Predict stream
// without answering fails that batch saying so, not with a bare EOF, and
// serves the next on a new stream.
func TestAStreamEndedUnansweredSaysSo(t *testing.T) {
	m := openUnruly(t, "yes", make(chan error, 1))
	assertServes(t, m)
	_, err := m.Predict(context.Background(), pack(t, "end"))
	if err == nil || !strings.Contains(err.Error(), "ended its Predict stream without answering batch 2") {
		t.Fatalf("a batch whose stream the plugin ended: %v; want an error saying so", err)
	}
	assertServes(t, m)
}

// TestControllerProtoNamesWhatGoPluginServes: pluginpb/controller.proto,
// written for plugins in other languages, names the method go-plugin calls
// to stop a plugin: called by that name, a plugin built on go-plugin (as
// the SDK's are) stops.
func TestControllerProtoNamesWhatGoPluginServes(t *testing.T) {
	// The file is read as plugin authors' tools read it, for the three
	// names that make the method's path: no protoc is needed.
	text, err := os.ReadFile(filepath.Join("pluginpb", "controller.proto"))
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	pkg := regexp.MustCompile(`(?m)^package\s+([\w.]+)\s*;`).FindSubmatch(text)
	services := regexp.MustCompile(`(?m)^service\s+(\w+)\s*\{([^}]*)\}`).FindAllSubmatch(text, -1)
	if pkg == nil || len(services) != 1 {
		t.Fatalf("controller.proto: package %q, %d services; want a package and one service", pkg, len(services))
	}
	for _, rpc := range regexp.MustCompile(`(?m)^\s*rpc\s+(\w+)\s*\(`).FindAllSubmatch(services[0][2], -1) {
		methods = append(methods, "/"+string(pkg[1])+"."+string(services[0][1])+"/"+string(rpc[1]))
	}
	if len(methods) != 1 {
		t.Fatalf("controller.proto has methods %q, want Shutdown alone", methods)
	}

	m := openChaos(t, Config{})
	pid := pidOf(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// go-plugin's server stops before it sends the reply, which its
	// client does not wait for: UNAVAILABLE is its answer. Or the model
	// saw the plugin exit first and closed the connection under the call,
	// which then ends CANCELED.
	err = m.cc.Invoke(ctx, methods[0], &emptypb.Empty{}, &emptypb.Empty{})
	if code := status.Code(err); code != codes.OK && code != codes.Unavailable && code != codes.Canceled {
		t.Fatalf("%s: %v", methods[0], err)
	}
	waitFor(t, 5*time.Second, "the plugin to stop when asked", func() bool { return m.hasExited() })
	if !processGone(pid) {
		t.Errorf("plugin pid %d runs on after %s", pid, methods[0])
	}
}
