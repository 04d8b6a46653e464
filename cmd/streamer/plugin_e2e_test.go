package main

// Integration tests of model plugins: `streamer serve --plugin BINARY` with
// real worker processes, each running its own real plugin process (the
// fillmask example, the Python example, and test plugins that crash, hang or
// misbehave on purpose).

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/supervisor"
	"github.com/vmihailenco/msgpack/v5"
)

// pluginBins builds the example and test plugins into a temporary folder.
func pluginBins(t *testing.T) map[string]string {
	t.Helper()
	pkgs := map[string]string{
		"fillmask":     "github.com/streamer-dev/streamer/examples/fillmask",
		"chaos":        "github.com/streamer-dev/streamer/model/plugin/internal/testplugins/chaos",
		"wrongversion": "github.com/streamer-dev/streamer/model/plugin/internal/testplugins/wrongversion",
		"silent":       "github.com/streamer-dev/streamer/model/plugin/internal/testplugins/silent",
		"unruly":       "github.com/streamer-dev/streamer/model/plugin/internal/testplugins/unruly",
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	bins := map[string]string{}
	for name, pkg := range pkgs {
		args = append(args, pkg)
		bins[name] = filepath.Join(dir, name)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("build plugins: %v\n%s", err, out)
	}
	return bins
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if stat, ok := procStat(child); ok && len(stat) > 1 && stat[1] == strconv.Itoa(pid) {
			kids = append(kids, child)
		}
	}
	return kids
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, parent pid, ...
func procStat(pid int) ([]string, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	stat, ok := procStat(pid)
	return !ok || len(stat) == 0 || stat[0] == "Z"
}

// isPluginGuard reports whether pid is the guard that leads a plugin's
// process group (see model/plugin's groupGuard), rather than the plugin.
func isPluginGuard(pid int) bool {
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.HasPrefix(string(cmdline), "streamer-plugin-guard\x00")
}

// pluginOf waits for the plugin process of a worker and returns its pid.
func pluginOf(t *testing.T, workerPID int) int {
	t.Helper()
	var plugin int
	waitFor(t, fmt.Sprintf("the plugin of worker %d", workerPID), readyTimeout, func() bool {
		for _, kid := range childrenOf(workerPID) {
			if !processGone(kid) && !isPluginGuard(kid) {
				plugin = kid
				return true
			}
		}
		return false
	})
	return plugin
}

func TestPlugin(t *testing.T) {
	bins := pluginBins(t)
	t.Run("fillmask on every worker, each on its own card", func(t *testing.T) { testFillMask(t, bins) })
	t.Run("init gets the plugin args and device", func(t *testing.T) { testPluginConfig(t, bins) })
	t.Run("a crashing plugin is a worker crash, its item isolated", func(t *testing.T) { testPluginCrash(t, bins) })
	t.Run("a hanging plugin is killed with its worker", func(t *testing.T) { testPluginHang(t, bins) })
	t.Run("a plugin dies with its worker", func(t *testing.T) { testPluginDiesWithWorker(t, bins) })
	t.Run("a plugin serves on through SIGTERM", func(t *testing.T) { testPluginIgnoresSIGTERM(t, bins) })
	t.Run("item errors and wrong output counts fail only their requests", func(t *testing.T) { testPluginBadAnswers(t, bins) })
	t.Run("a bad plugin binary fails the start clearly", func(t *testing.T) { testPluginStartErrors(t, bins) })
	t.Run("a binary replaced on disk is served after a reload, not a crash", func(t *testing.T) { testPluginReplacedWithoutAReload(t, bins) })
}

// testPluginReplacedWithoutAReload replaces the served plugin binary on
// disk, without a reload, and kills a worker: the restarted worker refuses
// the new binary, saying that it changed and that a reload serves it, and
// every answer still comes from the binary the server started. (Before,
// the restarted worker ran the new binary, and clients got answers from
// two models at once.) A reload then serves the new binary on every worker.
func testPluginReplacedWithoutAReload(t *testing.T, bins map[string]string) {
	live := filepath.Join(t.TempDir(), "model")
	install := func(from string) string {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		replaceFile(t, live, data, 0o755)
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	oldSum := install(bins["chaos"]) // answers each item with itself
	s := startPluginServer(t, "--plugin", live, "--workers", "2")
	before := s.waitAllReady(t, 2)
	const sentence = "Happy birthday to [MASK]."
	answersAll := func(want string) {
		t.Helper()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				p, err := s.tryPredictJSON(map[string]any{"inputs": []any{sentence}})
				if err != nil || p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{want}) {
					t.Errorf("%q: %s, %v; want %q", sentence, p, err, want)
				}
			})
		}
		wg.Wait()
	}
	answersAll(sentence)

	newSum := install(bins["fillmask"]) // answers "you"
	killWorker(t, before[1].PID)
	var slot supervisor.SlotStatus
	s.waitFor(t, "the killed worker's restart to run the replaced binary or refuse it", readyTimeout, func() bool {
		slot = s.slot(t, before[1].Slot)
		return slot.State == supervisor.SlotReady && slot.PID != before[1].PID || strings.Contains(slot.LastErr, "changed since it was loaded")
	})
	if slot.State == supervisor.SlotReady {
		t.Fatalf("the worker restarted after the binary was replaced without a reload runs it: %+v", slot)
	}
	why := fmt.Sprintf("the plugin binary changed since it was loaded (sha256 %s, now %s): reload to serve the new one", oldSum, newSum)
	if !strings.Contains(slot.LastErr, why) {
		t.Errorf("slot %d's last error %q does not say %q", slot.Slot, slot.LastErr, why)
	}
	answersAll(sentence)

	if err := s.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the reload to start new workers on both slots", readyTimeout, func() bool {
		ready := s.readyWorkers(t)
		return len(ready) == 2 && !slices.ContainsFunc(ready, func(w supervisor.SlotStatus) bool { return w.PID == before[0].PID })
	})
	answersAll("you")
}

func testFillMask(t *testing.T, bins map[string]string) {
	data, err := os.ReadFile(bins["fillmask"])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	s := startPluginServer(t, "--plugin", bins["fillmask"], "--plugin-sha256", hex.EncodeToString(sum[:]),
		"--plugin-arg", "order=4", "--workers", "4", "--cuda", "0,1,2,3", "--batch-size", "8")
	slots := s.waitAllReady(t, 4)

	in := []any{"Happy birthday to [MASK].", "The [MASK] barked at the postman.", "The sun rises in the [MASK].", "Once upon a [MASK] there was a king."}
	want := []any{"you", "dog", "east", "time"}
	if p := s.predictJSON(t, in...); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, want) {
		t.Errorf("fillmask: %s, want outputs %v", p, want)
	}
	if p := s.predictJSON(t, "no mask in this one"); p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "no [MASK]") {
		t.Errorf("a sentence without a mask: %s, want 422 saying so", p)
	}
	// The same plugin over the Open Inference Protocol, named after its
	// binary: one BYTES element per sentence.
	a := s.infer(t, "/v2/models/fillmask/infer", v2Request{Inputs: []v2Input{bytesElements(in...).flat()}})
	if a.Status != http.StatusOK {
		t.Fatalf("v2 infer: %s", a)
	}
	var words []string
	for _, e := range elements(t, a.output(t, "output").bytes(t)) {
		words = append(words, string(e))
	}
	if fmt.Sprint(words) != fmt.Sprint(want) {
		t.Errorf("v2 fillmask: %q, want %v", words, want)
	}
	wantError(t, "v2, a sentence without a mask", s.infer(t, "/v2/models/fillmask/infer", v2Request{Inputs: []v2Input{bytesElements("no mask in this one").flat()}}),
		http.StatusUnprocessableEntity, "no [MASK]")

	// Each worker started its own plugin, which inherited the worker's card.
	for _, slot := range slots {
		plugin := pluginOf(t, slot.PID)
		got, _ := workerEnv(t, plugin, "CUDA_VISIBLE_DEVICES")
		if got != slot.CUDA {
			t.Errorf("slot %d: plugin pid %d has CUDA_VISIBLE_DEVICES=%q, want its worker's %q", slot.Slot, plugin, got, slot.CUDA)
		}
		wantLog := fmt.Sprintf("slot=%d pid=%d stream=stderr line=\"[plugin fillmask] fillmask: 4-gram model", slot.Slot, slot.PID)
		s.waitLogged(t, wantLog) // the plugin's stderr, tagged with its slot
	}
}

// testPluginIgnoresSIGTERM: a plugin of the SDK that gets SIGTERM or
// SIGHUP, as every process of a service does when a service manager stops
// it (or `systemctl kill -s HUP` signals it), logs it and serves on until
// its worker stops it; dying of it would be its worker's crash.
func testPluginIgnoresSIGTERM(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"])
	worker := s.waitAllReady(t, 1)[0]
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"}[sig]
		if err := syscall.Kill(pluginOf(t, worker.PID), sig); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "the plugin to log the "+name+", or its worker to die", readyTimeout, func() bool {
			return strings.Contains(s.logs(), name+" ignored: a plugin") || strings.Contains(s.logs(), "worker died")
		})
		if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
			t.Errorf("a request after the plugin's %s: %s; want 200", name, p)
		}
		if w := s.workers(t); len(w) != 1 || w[0].PID != worker.PID || w[0].Crashes != 0 {
			t.Errorf("workers after the plugin's %s: %+v; want worker %d as before, with no crash", name, w, worker.PID)
		}
	}
}

func testPluginConfig(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"], "--plugin-arg", "lang=en", "--plugin-arg", "k=v=w", "--device", "cuda")
	want := map[string]any{"args": map[string]any{"lang": "en", "k": "v=w"}, "device": "cuda"}
	if p := s.predictJSON(t, "config"); p.Status != http.StatusOK || len(p.Outputs) != 1 || !reflect.DeepEqual(p.Outputs[0], want) {
		t.Errorf("the plugin's Init config: %s, want %v", p, want)
	}
	// The values reach the plugin, and nobody else: the API and the log
	// show their keys only, as they may be secrets.
	var info map[string]any
	s.getJSON(t, "/v1/models", &info)
	shown, _ := json.Marshal(info)
	if strings.Contains(string(shown), `"en"`) || strings.Contains(string(shown), "v=w") || !strings.Contains(string(shown), `"lang":"…"`) {
		t.Errorf("GET /v1/models shows the --plugin-arg values: %s", shown)
	}
	if strings.Contains(s.logs(), "v=w") {
		t.Errorf("the log shows a --plugin-arg value:\n%s", s.logs())
	}
}

func testPluginCrash(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"], "--workers", "2", "--batch-size", "8", "--max-latency", "20ms")
	s.waitAllReady(t, 2)

	var answered atomic.Int64
	loadDone := make(chan []error, 1)
	go func() { loadDone <- clientLoad(s, 8, 10, &answered) }()
	s.waitFor(t, "load to start", readyTimeout, func() bool { return answered.Load() >= 5 })

	p := s.predictJSON(t, "fine-1", "crash", "fine-2")
	if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "item 1") {
		t.Errorf("crashing request: %s, want 422 naming item 1", p)
	}
	// Every batch-mate of the crashing item was answered.
	for _, err := range <-loadDone {
		t.Error(err)
	}
	if st := s.stats(t); st.Crashes == 0 || st.Poisoned == 0 {
		t.Errorf("stats %+v: want the plugin's crashes counted and its item poisoned", st)
	}
	if sumRestarts(s.workers(t)) == 0 {
		t.Error("no worker was restarted after its plugin crashed")
	}
	s.waitLogged(t, "[plugin chaos] chaos plugin: crashing on a trigger item")
	s.waitAllReady(t, 2)
	if p := s.predictJSON(t, "crash"); p.Status != http.StatusUnprocessableEntity {
		t.Errorf("known poison: %s, want 422", p)
	}
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"after"}) {
		t.Errorf("after the crashes: %s", p)
	}
}

func testPluginHang(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"], "--workers", "2", "--worker-timeout", "500ms")
	before := s.waitAllReady(t, 2)
	plugins := []int{pluginOf(t, before[0].PID), pluginOf(t, before[1].PID)}
	s.seenWorking(t)

	start := time.Now()
	const requestTimeout = 8 * time.Second
	p, err := s.tryPredictJSON(map[string]any{"inputs": []any{"hang"}, "timeout_ms": requestTimeout.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if p.Status != http.StatusUnprocessableEntity && p.Status != http.StatusGatewayTimeout {
		t.Errorf("hanging request: %s, want 422 or 504", p)
	}
	if took < 500*time.Millisecond || took >= requestTimeout-time.Second {
		t.Errorf("hanging request answered after %s, want after the 500ms worker timeout", took)
	}
	if st := s.stats(t); st.Crashes == 0 {
		t.Error("no crash counted for the hanging plugin")
	}
	// The hung plugin was killed with its worker, not left behind.
	waitFor(t, "the hung plugin to be gone", 10*time.Second, func() bool {
		return processGone(plugins[0]) || processGone(plugins[1])
	})
	s.waitAllReady(t, 2)
	if p := s.predictJSON(t, "after"); p.Status != http.StatusOK {
		t.Errorf("after the hang: %s", p)
	}
}

func testPluginDiesWithWorker(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"], "--workers", "1")
	worker := s.waitAllReady(t, 1)[0].PID
	plugin := pluginOf(t, worker)
	p := s.predictJSON(t, "fork")
	forked, ok := 0, p.Status == http.StatusOK && len(p.Outputs) == 1
	if ok {
		n, isNumber := p.Outputs[0].(float64)
		forked, ok = int(n), isNumber
	}
	if !ok {
		t.Fatalf("fork: %s, want the pid of the plugin's child", p)
	}
	defer syscall.Kill(forked, syscall.SIGKILL)
	killWorker(t, worker)
	waitFor(t, fmt.Sprintf("plugin %d to die with its worker %d", plugin, worker), 10*time.Second, func() bool { return processGone(plugin) })
	waitFor(t, fmt.Sprintf("the plugin's child %d to die with its worker %d", forked, worker), 10*time.Second, func() bool { return processGone(forked) })

	var replacement supervisor.SlotStatus
	s.waitFor(t, "a new worker", readyTimeout, func() bool {
		ready := s.readyWorkers(t)
		if len(ready) == 1 && ready[0].PID != worker {
			replacement = ready[0]
			return true
		}
		return false
	})
	if newPlugin := pluginOf(t, replacement.PID); newPlugin == plugin {
		t.Errorf("the new worker serves the old plugin %d", plugin)
	}
	if p := s.predictJSON(t, "again"); p.Status != http.StatusOK {
		t.Errorf("after the kill: %s", p)
	}
}

func testPluginBadAnswers(t *testing.T, bins map[string]string) {
	s := startPluginServer(t, "--plugin", bins["chaos"], "--workers", "1", "--log-format", "json")
	worker := s.waitAllReady(t, 1)[0].PID
	tests := []struct {
		name       string
		inputs     []any
		wantStatus int
		wantErr    string
	}{
		// An item the model rejects is the client's problem; a batch the
		// model fails or miscounts is the model's.
		{"item error", []any{"fine", "reject"}, http.StatusUnprocessableEntity, `plugin chaos: chaos plugin: item "reject" rejected`},
		{"wrong output count", []any{"a", "b", "wrong-count"}, http.StatusInternalServerError, "outputs for a batch of"},
		{"batch error", []any{"batch-error"}, http.StatusInternalServerError, "chaos plugin: batch failed as asked"},
	}
	for _, tt := range tests {
		p := s.predictJSON(t, tt.inputs...)
		if p.Status != tt.wantStatus || !strings.Contains(p.Error, tt.wantErr) {
			t.Errorf("%s: %s, want %d with %q", tt.name, p, tt.wantStatus, tt.wantErr)
		}
	}

	// The plugin's stderr reaches the log as whole lines, tagged.
	if p := s.predictJSON(t, "say:plugin-marker-6131"); p.Status != http.StatusOK {
		t.Fatalf("say: %s", p)
	}
	var tagged bool
	s.waitFor(t, "the plugin's line in the log", 5*time.Second, func() bool {
		for _, line := range logLinesContaining(s.logs(), "plugin-marker-6131") {
			tagged = line["slot"] == float64(0) && line["pid"] == float64(worker) && line["line"] == "[plugin chaos] plugin-marker-6131"
		}
		return tagged
	})

	if st := s.stats(t); st.Crashes != 0 {
		t.Errorf("%d crashes: bad answers must not kill the worker", st.Crashes)
	}
	if now := s.readyWorkers(t); len(now) != 1 || now[0].PID != worker || now[0].Restarts != 0 {
		t.Errorf("workers %+v: want worker %d still serving", now, worker)
	}
	if p := s.predictJSON(t, "fine"); p.Status != http.StatusOK {
		t.Errorf("after the bad answers: %s", p)
	}
}

func testPluginStartErrors(t *testing.T, bins map[string]string) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	chatty := filepath.Join(dir, "chatty")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chatty, []byte("#!/bin/sh\necho hello, I am no plugin\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	noSocket := filepath.Join(dir, "nosocket")
	if err := os.WriteFile(noSocket, []byte("#!/bin/sh\necho '1|1|unix|/nonexistent/plugin.sock|grpc'\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("#!/bin/sh\necho '1|1|unix|'\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	longLine := filepath.Join(dir, "longline")
	if err := os.WriteFile(longLine, []byte("#!/bin/sh\nhead -c 200000 /dev/zero | tr '\\0' p\necho\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string // in the server's output
	}{
		{"missing", []string{"--plugin", filepath.Join(dir, "nope")}, []string{filepath.Join(dir, "nope") + ": no such file"}},
		{"not executable", []string{"--plugin", notExec}, []string{notExec + ": is not executable"}},
		{"checksum mismatch", []string{"--plugin", bins["chaos"], "--plugin-sha256", strings.Repeat("ab", 32)},
			[]string{bins["chaos"], "checksum mismatch", "want " + strings.Repeat("ab", 32)}},
		{"not a plugin", []string{"--plugin", trueBin}, []string{trueBin + ": not a streamer plugin", "exited before the handshake", "want a streamer model plugin"}},
		{"prints something else", []string{"--plugin", chatty}, []string{chatty + ": not a streamer plugin", `printed "hello, I am no plugin"`}},
		{"prints a handshake cut short", []string{"--plugin", short}, []string{short + ": not a streamer plugin", `its handshake line "1|1|unix|" has no protocol field`, `want a streamer model plugin`}},
		{"names a socket that is not there", []string{"--plugin", noSocket}, []string{noSocket, "could not be called", "no such file or directory"}},
		{"prints a line too long", []string{"--plugin", longLine}, []string{longLine + ": not a streamer plugin", "printed a line of more than 64 KiB on stdout"}},
		{"prints nothing", []string{"--plugin", bins["silent"], "--init-timeout", "5s"}, []string{bins["silent"] + ": not a streamer plugin", "printed no handshake within 4.5s"}},
		{"wrong protocol version", []string{"--plugin", bins["wrongversion"]}, []string{bins["wrongversion"] + ": not a streamer plugin", "want streamer plugin protocol version 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			s := launchPluginServer(t, append(tt.args, "--workers", "2")...)
			code, err := s.wait(20 * time.Second)
			if err != nil || code == 0 {
				t.Fatalf("serve with a bad plugin: exit code %d (%v), want a failed start", code, err)
			}
			t.Logf("failed after %s", time.Since(start))
			for _, want := range tt.want {
				if !strings.Contains(s.logs(), want) {
					t.Errorf("output does not contain %q:\n%s", want, s.logs())
				}
			}
		})
	}
}

// TestPythonPlugin serves the Python example, built on Debian's grpcio,
// which make install-tools installs.
func TestPythonPlugin(t *testing.T) {
	python := pythonWithGRPC(t)
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatal("the Python plugin test needs protoc; run make install-tools, which installs protobuf-compiler")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gen := exec.Command(protoc, "--python_out="+dir, "-I", filepath.Join(root, "model/plugin/pluginpb"), "model.proto")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generate the Python messages: %v\n%s", err, out)
	}
	wrapper := filepath.Join(dir, "python-plugin")
	script := fmt.Sprintf("#!/bin/sh\nPYTHONPATH=%s exec %s %s\n", dir, python, filepath.Join(root, "examples/python-plugin/plugin.py"))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	// A corpus it cannot read fails the start, saying why, with the call
	// named once.
	noCorpus := launchPluginServer(t, "--plugin", wrapper, "--workers", "1", "--plugin-arg", "corpus="+filepath.Join(dir, "nope.txt"))
	if code, err := noCorpus.wait(20 * time.Second); err != nil || code == 0 {
		t.Fatalf("serve with a corpus that is not there: exit code %d (%v), want a failed start", code, err)
	}
	if want := "plugin python-plugin: init: [Errno 2] No such file or directory"; !strings.Contains(noCorpus.logs(), want) {
		t.Errorf("serve with a corpus that is not there: output does not contain %q:\n%s", want, noCorpus.logs())
	}

	s := startPluginServer(t, "--plugin", wrapper, "--workers", "2",
		"--plugin-arg", "corpus="+filepath.Join(root, "examples/fillmask/corpus.txt"))
	slots := s.waitAllReady(t, 2)
	in := []any{"Happy birthday to [MASK].", "The [MASK] barked at the postman."}
	if p := s.predictJSON(t, in...); p.Status != http.StatusOK || !reflect.DeepEqual(p.Outputs, []any{"you", "dog"}) {
		t.Errorf("python fillmask: %s, want [you dog]", p)
	}
	if p := s.predictJSON(t, 42); p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "want a string, got int") {
		t.Errorf("a number for the python plugin: %s, want 422 saying it wants a string", p)
	}
	testPythonBadItems(t, s)
	s.waitLogged(t, "[plugin python-plugin] python-plugin: bigram model of")
	// It serves on through a SIGTERM or SIGHUP meant for the server.
	plugin := pluginOf(t, slots[0].PID)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGHUP: "SIGHUP"}[sig]
		if err := syscall.Kill(plugin, sig); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "the Python plugin to log the "+name+", or its worker to die", readyTimeout, func() bool {
			return strings.Contains(s.logs(), "python-plugin: "+name+" ignored") || strings.Contains(s.logs(), "worker died")
		})
	}
	for range 2 { // one batch on each worker, as a rule
		if p := s.predictJSON(t, in...); p.Status != http.StatusOK {
			t.Errorf("after the Python plugin's SIGTERM: %s", p)
		}
	}
	if st := s.stats(t); st.Crashes != 0 {
		t.Errorf("after the Python plugin's SIGTERM: %d crashes; want none", st.Crashes)
	}
	// A Python plugin dies with its worker too.
	killWorker(t, slots[0].PID)
	waitFor(t, "the Python plugin to die with its worker", 10*time.Second, func() bool { return processGone(plugin) })
	s.waitAllReady(t, 2)
	if p := s.predictJSON(t, in...); p.Status != http.StatusOK {
		t.Errorf("after a worker was killed: %s", p)
	}

	// So does one behind a wrapper that runs python without exec, which
	// leaves python a child of the shell that the worker started.
	noExec := filepath.Join(dir, "python-plugin-noexec")
	script = fmt.Sprintf("#!/bin/sh\nPYTHONPATH=%s %s %s\n", dir, python, filepath.Join(root, "examples/python-plugin/plugin.py"))
	if err := os.WriteFile(noExec, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s = startPluginServer(t, "--plugin", noExec, "--workers", "1",
		"--plugin-arg", "corpus="+filepath.Join(root, "examples/fillmask/corpus.txt"))
	worker := s.waitAllReady(t, 1)[0].PID
	if p := s.predictJSON(t, in...); p.Status != http.StatusOK {
		t.Fatalf("python behind a wrapper without exec: %s", p)
	}
	shell := pluginOf(t, worker)
	pythons := childrenOf(shell)
	if len(pythons) != 1 {
		t.Fatalf("the wrapper %d has children %v, want python alone", shell, pythons)
	}
	defer syscall.Kill(pythons[0], syscall.SIGKILL)
	killWorker(t, worker)
	waitFor(t, fmt.Sprintf("python %d, behind a wrapper without exec, to die with its worker", pythons[0]), 10*time.Second, func() bool { return processGone(pythons[0]) })
}

// testPythonBadItems: an item the Python plugin cannot take, sent in one
// msgpack request after a good one, fails alone, saying why, and the good
// one is answered. The plugin used to fail its whole batch on an item it
// could not decode ("every item: model failed", 500).
func testPythonBadItems(t *testing.T, s *server) {
	t.Helper()
	tests := []struct {
		name    string
		bad     any
		wantErr string // the plugin's message, after the item's index
	}{
		{"a map keyed by a number", map[int]string{1: "x"}, "want a string, got dict"},
		{"a string that is not UTF-8", "\xff\xfe", "item is not valid msgpack: 'utf-8' codec can't decode byte 0xff"},
	}
	for _, tt := range tests {
		body, err := msgpack.Marshal(map[string]any{"inputs": []any{"Happy birthday to [MASK].", tt.bad}})
		if err != nil {
			t.Fatal(err)
		}
		before := s.stats(t)
		p, err := decodePrediction(s.post(t, "application/msgpack", body))
		if err != nil {
			t.Fatalf("%s after a good item: %v", tt.name, err)
		}
		if p.Status != http.StatusUnprocessableEntity || !strings.HasPrefix(p.Error, "item 1: ") || !strings.Contains(p.Error, tt.wantErr) {
			t.Errorf("%s after a good item: %s; want 422 naming item 1 with %q", tt.name, p, tt.wantErr)
			continue
		}
		// The request fails as one of its items did: the other was
		// answered with its output.
		var after supervisor.Stats
		s.waitFor(t, "both items counted as answered", readyTimeout, func() bool {
			after = s.stats(t)
			return after.Answered-before.Answered >= 2
		})
		if answered, failed := after.Answered-before.Answered, after.Failed-before.Failed; answered != 2 || failed != 1 {
			t.Errorf("%s after a good item: %d items answered, %d of them failed; want 2 answered, 1 failed", tt.name, answered, failed)
		}
	}
}

// pythonWithGRPC finds a python3 that can import grpc, protobuf and msgpack,
// or fails the test saying what to install.
func pythonWithGRPC(t *testing.T) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, python := range candidates {
		if exec.Command(python, "-c", "import grpc, google.protobuf, msgpack, cryptography").Run() == nil {
			return python
		}
	}
	t.Fatal("the Python plugin test needs python3 with grpc, protobuf, msgpack and cryptography; run make install-tools, which installs python3-grpcio, python3-protobuf, python3-msgpack and python3-cryptography")
	return ""
}
