package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamer-dev/streamer/internal/redistest"
	"github.com/streamer-dev/streamer/supervisor"
)

// TestStatusCommand runs `streamer status` against a real server and checks
// that it prints what the server's own endpoints say.
func TestStatusCommand(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "echo")
	slots := s.waitAllReady(t, 2)
	for range 3 {
		s.predictJSON(t, "a", "b", "c")
	}
	out, err := runStatus(t, s.URL())
	if err != nil {
		t.Fatalf("streamer status: %v\n%s", err, out)
	}
	st := s.stats(t)
	for _, want := range []string{
		"model", "echo", "ready", "yes",
		"queue depth", "0 items",
		"requests          ok 3, rejected 0, timed out 0, failed 0, poisoned 0, canceled 0",
		"answered 9 (ok 9, failed 0: expired 0, poisoned 0, canceled 0, other 0), rejected 0",
		fmt.Sprintf("idle %d", st.Dispatch.Idle),
		"SLOT", "DEVICE", "PID", "STATE", "RESTARTS", "BATCHES",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("streamer status lacks %q:\n%s", want, out)
		}
	}
	batches := regexp.MustCompile(fmt.Sprintf(`(?m)^batches +%d, mean batch size %.2f$`, st.Batches, st.MeanBatchSize()))
	if st.Batches == 0 || !batches.MatchString(out) {
		t.Errorf("streamer status does not say the %d batches of mean size %.2f:\n%s", st.Batches, st.MeanBatchSize(), out)
	}
	for _, sl := range slots {
		row := regexp.MustCompile(fmt.Sprintf(`(?m)^%d +\S+ +%d +ready +0 +0 +\d+ `, sl.Slot, sl.PID))
		if !row.MatchString(out) {
			t.Errorf("streamer status has no row for slot %d, pid %d, ready:\n%s", sl.Slot, sl.PID, out)
		}
	}
}

// A server that is not there is an error that says where status looked.
func TestStatusCommandUnreachable(t *testing.T) {
	target := "http://" + freePort(t)
	out, err := runStatus(t, target)
	if err == nil {
		t.Fatalf("streamer status --target %s succeeded with nothing there:\n%s", target, out)
	}
	if !strings.Contains(out, target+"/v1/models") || !strings.Contains(out, "running there") {
		t.Errorf("streamer status --target %s: the error does not say where it looked or what to check:\n%s", target, out)
	}
}

// Another server's page is not printed whole: one line of it, and the
// question whether a streamer server runs there.
func TestStatusCommandOfAnotherServer(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<!DOCTYPE HTML>\n<html>\n<head><title>Error</title></head>\n<body>"+strings.Repeat("<p>not here</p>\n", 100)+"</body></html>\n")
	}))
	t.Cleanup(web.Close)
	out, err := runStatus(t, web.URL)
	if err == nil {
		t.Fatalf("streamer status of another server succeeded:\n%s", out)
	}
	if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 || !strings.Contains(out, "status 404: <!DOCTYPE HTML> <html>") ||
		!strings.Contains(out, "running there") || len(out) > 400 {
		t.Errorf("streamer status of another server: %d lines, %d bytes; want one short line saying so:\n%s", lines, len(out), out)
	}
}

// A --timeout of zero or less is refused as such, rather than run out at
// once and blamed on the server.
func TestStatusCommandRefusesANonPositiveTimeout(t *testing.T) {
	for _, timeout := range []string{"0s", "-1s"} {
		out, err := runStatusWith(t, nil, "--target", "http://"+freePort(t), "--timeout", timeout)
		if err == nil || !strings.Contains(out, "--timeout "+timeout+": want a positive duration") {
			t.Errorf("streamer status --timeout %s: %v:\n%s", timeout, err, out)
		}
	}
}

// A --target no server could answer as asked is refused before it is
// asked, in bench's words: a query would end up amid the paths, a port
// cannot be dialled; and a --ca is refused where there is no TLS to check.
func TestStatusCommandRefusesABadTarget(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "http://127.0.0.1:1?x=1"}, `--target "http://127.0.0.1:1?x=1": want no query or fragment`},
		{[]string{"--target", "http://127.0.0.1:99999"}, `--target "http://127.0.0.1:99999": port 99999: want 1 to 65535`},
		{[]string{"--target", "http://u:p@127.0.0.1:1"}, `--target "http://u:xxxxx@127.0.0.1:1": want no user or password in the URL: give the server's token with --token`},
		{[]string{"--target", "127.0.0.1:5005"}, `--target "127.0.0.1:5005": want an http:// or https:// URL`},
		{[]string{"--target", "http://127.0.0.1:1", "--ca", "ca.pem"}, "--ca: it checks the certificate of an https --target, and there is none"},
		// A scheme in capitals is https all the same: the CA is read.
		{[]string{"--target", "HTTPS://127.0.0.1:1", "--ca", "missing-ca.pem"}, "--ca: open missing-ca.pem"},
	} {
		out, err := runStatusWith(t, nil, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("streamer status %s: %v:\n%s\nwant it refused, saying %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}

// With --auth-token the server answers status only when it brings the
// token, given with --token or in the server's own variable; without one,
// or with a wrong one, the error says what to pass.
func TestStatusCommandWithAToken(t *testing.T) {
	const token = "status-token-83"
	s := startServer(t, "--workers", "1", "--model", "echo", "--auth-token", token)
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--token", nil, []string{"--token", token}},
		{"$" + envAuthToken, []string{envAuthToken + "=" + token}, nil},
		{"--token over a wrong $" + envAuthToken, []string{envAuthToken + "=wrong"}, []string{"--token", token}},
	} {
		out, err := runStatusWith(t, tc.env, append([]string{"--target", s.URL()}, tc.args...)...)
		if err != nil || !regexp.MustCompile(`(?m)^model +echo$`).MatchString(out) {
			t.Errorf("streamer status with the token in %s: %v\n%s", tc.name, err, out)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no token", nil, []string{"status 401", "--token", envAuthToken}},
		{"a wrong token", []string{"--token", "wrong-" + token}, []string{"status 401", "refused the token", "--auth-token"}},
	} {
		out, err := runStatusWith(t, nil, append([]string{"--target", s.URL()}, tc.args...)...)
		if err == nil {
			t.Errorf("streamer status with %s succeeded:\n%s", tc.name, out)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("streamer status with %s: the error lacks %q:\n%s", tc.name, want, out)
			}
		}
	}
}

// TestStatusCommandTrustsTheCAGiven: a server whose certificate a private
// CA signed is refused by status with an error that says to give the CA,
// and answers once --ca names it.
func TestStatusCommandTrustsTheCAGiven(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "status")
	pair := writeCertPair(t, dir, ca, 7)
	caFile := ca.write(t, dir)
	s := launchServer(t, "--workers", "1", "--model", "echo", "--tls-cert", pair.cert, "--tls-key", pair.key)
	target := "https://" + s.addr
	var out string
	s.waitFor(t, "status to answer over https with --ca", readyTimeout, func() bool {
		var err error
		out, err = runStatusWith(t, nil, "--target", target, "--ca", caFile)
		return err == nil
	})
	if !regexp.MustCompile(`(?m)^model +echo$`).MatchString(out) {
		t.Errorf("streamer status --ca: want the model echo:\n%s", out)
	}
	out, err := runStatusWith(t, nil, "--target", target)
	if err == nil || !strings.Contains(out, "certificate is not trusted") || !strings.Contains(out, "--ca") {
		t.Errorf("streamer status without the CA: %v; want an error saying to give it with --ca:\n%s", err, out)
	}
	// A certificate that names another host is no matter of the CA, which
	// the error blamed even with --ca given.
	_, port, _ := net.SplitHostPort(s.addr)
	out, err = runStatusWith(t, nil, "--target", "https://localhost:"+port, "--ca", caFile)
	if err == nil || !strings.Contains(out, "the server's certificate does not name localhost, the target's host") {
		t.Errorf("streamer status at a name the certificate does not hold: %v; want an error saying so:\n%s", err, out)
	}
}

func runStatus(t *testing.T, target string) (string, error) {
	t.Helper()
	return runStatusWith(t, nil, "--target", target)
}

// runStatusWith runs `streamer status args...` with env added to this
// process's environment, less any token of its own.
func runStatusWith(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, streamerBin, append([]string{"status", "--timeout", "10s"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envAuthToken+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMetricsEndpoint scrapes a real server's /metrics after some traffic,
// a refusal and a killed worker.
func TestMetricsEndpoint(t *testing.T) {
	s := startServer(t, "--workers", "2", "--model", "echo", "--cuda", "3,5")
	slots := s.waitAllReady(t, 2)
	for range 4 {
		s.predictJSON(t, "a", "b")
	}
	if status, _, _ := s.post(t, "application/json", []byte(`{"inputs": 7}`)); status != http.StatusBadRequest {
		t.Fatalf("a malformed body got %d, want 400", status)
	}
	killWorker(t, slots[0].PID)
	s.waitFor(t, "slot 0 to restart", readyTimeout, func() bool {
		sl := s.workers(t)[0]
		return sl.State == supervisor.SlotReady && sl.PID != slots[0].PID
	})
	metrics := func() string {
		status, body, err := s.get("/metrics")
		if err != nil || status != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", status, err)
		}
		return string(body)
	}
	text := metrics()
	for _, want := range []string{
		`streamer_requests_total{outcome="ok"} 4`,
		`streamer_requests_total{outcome="rejected"} 1`,
		`streamer_items_total{outcome="ok"} 8`,
		`streamer_end_to_end_seconds_count 8`,
		`streamer_queue_wait_seconds_count 8`,
		`streamer_compute_seconds_count 8`,
		`streamer_worker_crashes_total{slot="0"} 1`,
		`streamer_worker_restarts_total{slot="0"} 1`,
		`streamer_worker_crashes_total{slot="1"} 0`,
		`streamer_worker_state{device="cuda:3",slot="0",state="ready"} 1`,
		`streamer_worker_state{device="cuda:5",slot="1",state="ready"} 1`,
		`streamer_queue_depth_items 0`,
		`streamer_ready 1`,
		"streamer_batch_size_items_count ",
		`streamer_dispatches_total{reason="idle"} `,
		"streamer_batch_cost_fixed_seconds ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`streamer_worker_init_seconds\{slot="0"\} (\S+)`).FindStringSubmatch(text); m == nil {
		t.Errorf("/metrics has no init time for slot 0")
	} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v <= 0 {
		t.Errorf("slot 0's init time is %q, want a positive number of seconds", m[1])
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// TestStatusPageInBrowser loads GET / in headless Chromium and checks what
// the page shows after its script ran: the model, one row per slot with the
// pids of /v1/workers, and a worker killed with SIGKILL shown with its new
// pid and one restart.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := startServer(t, "--workers", "2", "--model", "echo")
	before := s.waitAllReady(t, 2)
	s.predictJSON(t, "a", "b")
	killWorker(t, before[1].PID)
	var after []supervisor.SlotStatus
	s.waitFor(t, "slot 1 to restart", readyTimeout, func() bool {
		after = s.readyWorkers(t)
		return len(after) == 2 && after[1].PID != before[1].PID
	})

	var dom string
	var rows map[string]map[string]string
	waitFor(t, "the page to show both slots with their new pids", 90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, s.URL()+"/")
		rows = workerRows(dom)
		for _, sl := range after {
			if rows[strconv.Itoa(sl.Slot)]["pid"] != strconv.Itoa(sl.PID) {
				return false
			}
		}
		return true
	})
	if !strings.Contains(dom, `<span id="model">echo</span>`) {
		t.Errorf("the page does not name the model echo")
	}
	if !strings.Contains(dom, `<td id="slot-count">2</td>`) || len(rows) != 2 {
		t.Errorf("the page does not show 2 slots (rows %v)", rows)
	}
	want := map[string]string{"0": "0", "1": "1"}
	for slot, restarts := range want {
		row := rows[slot]
		if row["restarts"] != restarts || row["state"] != "ready" {
			t.Errorf("slot %s on the page: %v, want ready with %s restarts", slot, row, restarts)
		}
	}
	if rows["1"]["pid"] == strconv.Itoa(before[1].PID) {
		t.Errorf("the page still shows the killed pid %d", before[1].PID)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// The page keeps its elements through the refreshes, writing only what
// changed, so that what an operator selects (an error in the workers
// table, to copy) stays selected. The real page is served through a proxy
// that adds a script of the test's: it notes the elements the first
// refresh shows and, two refreshes later, whether they are the same.
func TestStatusPageKeepsItsElements(t *testing.T) {
	chromium := chromiumPath(t)
	s := startServer(t, "--workers", "2", "--model", "echo")
	s.waitAllReady(t, 2)
	const watch = `<script>
(() => {
  const show = showWorkers;
  let calls = 0, row, pid, model;
  showWorkers = (slots, front) => {
    show(slots, front);
    const now = document.querySelector('#workers tr[data-slot="1"]');
    calls++;
    if (calls === 1) {
      [row, pid, model] = [now, now.cells[2].firstChild, document.getElementById("model").firstChild];
    } else if (calls === 3) {
      const order = [...document.getElementById("workers").rows].map(r => r.dataset.slot).join(",");
      document.body.dataset.kept = [now === row, now.cells[2].firstChild === pid,
        document.getElementById("model").firstChild === model, order].join(" ");
    }
  };
})();
</script>`
	dom := dumpDOM(t, chromium, pageWithScript(t, s, watch))
	if !strings.Contains(dom, `data-kept="true true true 0,1"`) {
		t.Errorf("after two refreshes the page's elements are not those it showed first "+
			"(want data-kept: the same row, pid and model text, rows in slot order):\n%s", dom)
	}
}

// pageWithScript serves s's status page, and the rest of its routes,
// through a proxy that adds script to the page, and returns the page's
// URL: the test's script watches, or drives, the real page's functions.
func pageWithScript(t *testing.T, s *server, script string) string {
	t.Helper()
	target, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			proxy.ServeHTTP(w, r)
			return
		}
		resp, err := http.Get(s.URL() + "/")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("</body>")) {
			http.Error(w, fmt.Sprintf("the page: %d %v", resp.StatusCode, err), http.StatusBadGateway)
			return
		}
		for _, h := range []string{"Content-Type", "Content-Security-Policy"} {
			w.Header().Set(h, resp.Header.Get(h))
		}
		_, _ = w.Write(bytes.Replace(body, []byte("</body>"), []byte(script+"</body>"), 1))
	}))
	t.Cleanup(page.Close)
	return page.URL + "/"
}

// A worker draining during a reload is listed beside its slot's new one,
// in a row of its own, and that row goes once the drain is over. (Before,
// rows were keyed by slot alone: each refresh during a reload added a row
// for the slot, and the rows stayed after the drain.) The test's script
// shows the page's table three lists of a slot with a draining worker,
// then one without it.
func TestStatusPageRowsOfADrainingWorker(t *testing.T) {
	chromium := chromiumPath(t)
	s := startServer(t, "--workers", "1", "--model", "echo")
	s.waitAllReady(t, 1)
	const drive = `<script>
(() => {
  const show = showWorkers;
  let calls = 0;
  showWorkers = (slots, front) => {
    if (++calls > 1) return; // the page's own refreshes after the first would undo the test's
    const fresh = {slot: 0, pid: 11, state: "ready", restarts: 0, in_flight: 0};
    const draining = {slot: 0, pid: 10, state: "draining", restarts: 0, in_flight: 1};
    const counts = [];
    for (let i = 0; i < 3; i++) {
      show([fresh, draining], front);
      counts.push(document.getElementById("workers").rows.length);
    }
    show([fresh], front);
    const rows = document.getElementById("workers").rows;
    counts.push(rows.length, rows[0].cells[2].textContent);
    document.body.dataset.rows = counts.join(" ");
  };
})();
</script>`
	dom := dumpDOM(t, chromium, pageWithScript(t, s, drive))
	if !strings.Contains(dom, `data-rows="2 2 2 1 11"`) {
		t.Errorf("rows after three refreshes of a slot with a draining worker, then one without (want data-rows 2 2 2 1, the new worker's pid 11):\n%s", dom)
	}
}

// With a large --batch-size the batch sizes the page draws are many: it
// still shows what the server says, and no error of its own. It shows the
// requests by outcome and the items failed by kind, as /v1/stats has them.
func TestStatusPageInBrowserWithALargeBatchSize(t *testing.T) {
	chromium := chromiumPath(t)
	s := startServer(t, "--workers", "1", "--model", "echo", "--batch-size", strconv.Itoa(supervisor.MaxBatchSize))
	slots := s.waitAllReady(t, 1)
	s.predictJSON(t, "a", "b")
	var dom string
	waitFor(t, "the page to show the worker", 90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, s.URL()+"/")
		return workerRows(dom)["0"]["pid"] == strconv.Itoa(slots[0].PID)
	})
	for _, want := range []string{
		`<p id="error"></p>`,
		`<td id="requests">1 / 0 / 0 / 0 / 0 / 0</td>`,
		`<td id="failures">0 (0 / 0 / 0) / 0</td>`,
		`<td id="ready">yes</td>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if bars := len(regexp.MustCompile(`title="\d+ batches of \d+"`).FindAllString(dom, -1)); bars != 2 {
		t.Errorf("the page draws %d batch-size bars; want 2, up to the largest size seen", bars)
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// dumpDOM loads url in headless Chromium, lets its script run for three
// seconds of virtual time, and returns the DOM it built.
func dumpDOM(t *testing.T, chromium, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--dump-dom", url)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}

var (
	workerRow  = regexp.MustCompile(`<tr class="worker" data-slot="(\d+)"[^>]*>(.*?)</tr>`)
	workerCell = regexp.MustCompile(`<td class="([a-z-]+)[^"]*">([^<]*)</td>`)
)

// workerRows reads the page's workers table: slot → column → text.
func workerRows(dom string) map[string]map[string]string {
	rows := make(map[string]map[string]string)
	for _, m := range workerRow.FindAllStringSubmatch(dom, -1) {
		cells := make(map[string]string)
		for _, c := range workerCell.FindAllStringSubmatch(m[2], -1) {
			cells[c[1]] = c[2]
		}
		rows[m[1]] = cells
	}
	return rows
}

// With --auth-token the status page still opens, asks for the token while
// it has none, and shows the server's facts once given one.
func TestStatusPageInBrowserWithAToken(t *testing.T) {
	chromium := chromiumPath(t)
	t.Run("plain", func(t *testing.T) { testStatusPageWithToken(t, chromium, "page-token-51") })
	// Given in the address as written, not percent-encoded: the page's
	// decoding of it threw, and its script stopped, showing nothing.
	t.Run("with a bare %", func(t *testing.T) { testStatusPageWithToken(t, chromium, "a%zz-100%") })
}

func testStatusPageWithToken(t *testing.T, chromium, token string) {
	s := startServer(t, "--workers", "1", "--model", "echo", "--auth-token", token)
	s.token = token
	slots := s.waitAllReady(t, 1)

	dom := dumpDOM(t, chromium, s.URL()+"/")
	if !strings.Contains(dom, `<form id="auth">`) || strings.Contains(dom, `<span id="model">echo</span>`) {
		t.Errorf("without a token the page should show its token form and no data:\n%s", dom)
	}
	// One refresh's three reads refused, then nothing until a token is
	// given: before, the page asked every second, each ask counted and
	// logged as a guess at the token.
	if got := metricValue(t, s, `streamer_unauthorized_total{protocol="http"}`); got != 3 {
		t.Errorf(`after the page was open without a token, streamer_unauthorized_total{protocol="http"} is %v; want 3, one refresh`, got)
	}
	waitFor(t, "the page to show the worker with the token", 90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, s.URL()+"/#token="+token)
		return workerRows(dom)["0"]["pid"] == strconv.Itoa(slots[0].PID)
	})
	if !strings.Contains(dom, `<span id="model">echo</span>`) || !strings.Contains(dom, `<form id="auth" hidden="">`) {
		t.Errorf("with the token the page should show the model and hide its form:\n%s", dom)
	}
}

// While a reload drains a slot, two slots have its number: /metrics still
// answers, with the slot's counters once and the draining one counted in
// worker_state, and the counters go on where they were after the reload.
// (Before, /metrics answered 500 for the whole drain, as the two slots
// made the same series twice, and the reload set the counters to zero.)
func TestMetricsDuringAndAfterAReload(t *testing.T) {
	s := startAdminServer(t, "--workers", "1", "--model", "sleep:3s,0")
	first := s.waitAllReady(t, 1)
	killWorker(t, first[0].PID)
	s.waitFor(t, "the worker to restart", readyTimeout, func() bool {
		now := s.readyWorkers(t)
		return len(now) == 1 && now[0].PID != first[0].PID
	})
	running := make(chan error, 1)
	go func() {
		_, err := s.tryPredictJSON(map[string]any{"inputs": []any{"a"}})
		running <- err
	}()
	s.waitFor(t, "the batch to reach the worker", readyTimeout, func() bool {
		w := s.workers(t)
		return len(w) == 1 && w[0].InFlight == 1
	})
	reloaded := make(chan int, 1)
	go func() {
		status, _, _, _ := s.do(context.Background(), http.MethodPost, "/admin/reload", "application/json", nil)
		reloaded <- status
	}()
	s.waitFor(t, "the old worker to drain beside the new one", readyTimeout, func() bool { return len(s.workers(t)) == 2 })
	status, body, err := s.get("/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics while a slot drains: %d %v\n%s", status, err, body)
	}
	for _, want := range []string{
		`streamer_worker_state{device="unset",slot="0",state="draining"} 1`,
		`streamer_worker_crashes_total{slot="0"} 1`,
		`streamer_worker_restarts_total{slot="0"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics while a slot drains lacks %q:\n%s", want, body)
		}
	}
	if err := <-running; err != nil {
		t.Errorf("the request that ran through the reload: %v", err)
	}
	if status := <-reloaded; status != http.StatusOK {
		t.Fatalf("POST /admin/reload: %d", status)
	}
	status, body, err = s.get("/metrics")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics after the reload: %d %v", status, err)
	}
	for _, want := range []string{
		`streamer_worker_crashes_total{slot="0"} 1`,
		`streamer_worker_restarts_total{slot="0"} 1`,
		`streamer_worker_batches_total{slot="0"} 1`,
		`streamer_worker_state{device="unset",slot="0",state="ready"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics after the reload lacks %q:\n%s", want, body)
		}
	}
	out, err := runStatusWith(t, []string{envAuthToken + "=" + adminToken}, "--target", s.URL())
	if err != nil || !regexp.MustCompile(`(?m)^reloads +ok 1, failed 0$`).MatchString(out) {
		t.Errorf("streamer status after one reload (%v) does not say so:\n%s", err, out)
	}
}

// On a front end behind Redis, whose /v1/stats has no queue-wait or compute
// histograms (its nodes have them), the page still shows what there is.
// (Before, it stopped at the empty histograms and showed nothing more.) It
// shows what `streamer status` does: what the front end knows of Redis,
// and its own counts there, and of the latencies the end-to-end one alone;
// not the batches, dispatch reasons, batch cost and workers it does not
// have. (Before, it showed none of Redis, and those it does not have as 0,
// "not fitted yet", and queue wait and compute of "0.0 ms".) A node's page
// shows its traffic through Redis beside its batches.
func TestStatusPageInBrowserOnAFrontEnd(t *testing.T) {
	chromium := chromiumPath(t)
	rs := redistest.Start(t, redistest.Options{})
	node := startBrokerNode(t, rs, "--workers", "1", "--model", "echo")
	front := startBrokerFront(t, rs, "--max-queue", "40")
	waitReadyz(t, front, http.StatusOK)
	front.predictJSON(t, "a")
	var dom string
	if !holdsWithin(90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, front.URL()+"/")
		return strings.Contains(dom, `<td id="requests">1 / 0 / 0 / 0 / 0 / 0</td>`) &&
			strings.Contains(dom, `<td id="redis">up, nodes heard from 1, backlog 0 of 40 items</td>`)
	}) {
		t.Fatalf("the front end's page never showed the request, and redis up with 1 node and a backlog of 0 of 40 items:\n%s", dom)
	}
	for _, want := range []string{
		`<p id="error"></p>`,
		`<tr class="broker-front"><td>redis</td>`,
		`<td id="front-end">answers dropped 0 (late, or second: a claim, a write retried), withdrawn 0, lost 0</td>`,
		`<tr class="broker-node" hidden="">`,
		`<td id="slot-count">none of its own, a front end: its nodes form the batches and run them (see each node's status page)</td>`,
		`<td id="latency-what">mean latency: end to end (its nodes measure queue wait and compute)</td>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the front end's page lacks %s", want)
		}
	}
	if !regexp.MustCompile(`<td id="latency">\d+\.\d ms</td>`).MatchString(dom) {
		t.Errorf("the front end's page does not show its one request's end-to-end latency alone")
	}
	for _, id := range []string{"batches", "mean-batch", "recent-batch", "dispatch", "cost", "reloads"} {
		if !hiddenRow(dom, id) {
			t.Errorf("the front end's page shows the row %s, which a front end does not have", id)
		}
	}
	if !strings.Contains(dom, `<div class="own-workers" hidden="">`) {
		t.Errorf("the front end's page shows a workers table and batch sizes, which a front end does not have")
	}
	if t.Failed() {
		t.Logf("the front end's DOM:\n%s", dom)
	}

	waitFor(t, "the node's page to show its item through Redis", 90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, node.URL()+"/")
		return strings.Contains(dom, `<td id="node">read 1, claimed 0, answered 1, expired 0, released 0, quarantined 0, withdrawn 0, write failures 0, held 0</td>`)
	})
	for _, want := range []string{`<tr class="broker-node"><td>`, `<tr class="broker-front"><td>redis</td>`, `<td id="slot-count">1</td>`, `<tr class="broker-refused" hidden="">`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the node's page lacks %s", want)
		}
	}
	// Its workers ran the front end's item; none of its own callers came.
	if hiddenRow(dom, "batches") || !regexp.MustCompile(`<td id="latency">\d+\.\d ms / \d+\.\d ms / -</td>`).MatchString(dom) ||
		!strings.Contains(dom, "end to end, of its callers' through redis") {
		t.Errorf("the node's page does not show its batches, its workers' queue wait and compute, and no end-to-end time of its own callers, saying whose each is")
	}
	if t.Failed() {
		t.Logf("the node's DOM:\n%s", dom)
	}
}

// A server that has answered nothing yet shows its latencies as "-", as
// `streamer status` does: "0.0 ms" would read as a time measured. It shows
// its batches, and nothing of Redis, which it does not use.
func TestStatusPageInBrowserBeforeAnyRequest(t *testing.T) {
	chromium := chromiumPath(t)
	s := startServer(t, "--workers", "1", "--model", "echo")
	slots := s.waitAllReady(t, 1)
	var dom string
	waitFor(t, "the page to show the worker", 90*time.Second, func() bool {
		dom = dumpDOM(t, chromium, s.URL()+"/")
		return workerRows(dom)["0"]["pid"] == strconv.Itoa(slots[0].PID)
	})
	for _, want := range []string{
		`<td id="latency-what">mean latency: queue wait / compute / end to end</td>`,
		`<td id="latency">- / - / -</td>`,
		`<tr class="broker-front" hidden=""><td>redis</td>`,
		`<tr class="broker-node" hidden="">`,
		`<td id="batches">0</td>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if hiddenRow(dom, "batches") || hiddenRow(dom, "dispatch") {
		t.Errorf("the page of a server with workers of its own hides its batches or dispatch reasons")
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}

// hiddenRow says whether the row of the facts table that holds the cell id
// is hidden; false when there is none.
func hiddenRow(dom, id string) bool {
	m := regexp.MustCompile(`<tr([^>]*)>(?:<td[^>]*>[^<]*</td>)*<td id="` + regexp.QuoteMeta(id) + `">`).FindStringSubmatch(dom)
	return m != nil && strings.Contains(m[1], ` hidden=""`)
}

// A worker that dies of a panic is said to have, in the error its items
// get and in its slot's last error, not only by its exit status.
func TestACrashSaysThePanic(t *testing.T) {
	s := startServer(t, "--workers", "1", "--model", "chaos:panic=pan")
	s.waitAllReady(t, 1)
	s.seenWorking(t)
	p := s.predictJSON(t, "pan")
	if p.Status != http.StatusUnprocessableEntity || !strings.Contains(p.Error, "its last words: panic: chaos: panic on a trigger item") {
		t.Errorf("the panicking item: %s; want 422 quoting the panic", p)
	}
	s.waitFor(t, "the slot's last error to quote the panic", readyTimeout, func() bool {
		w := s.workers(t)
		return len(w) == 1 && strings.Contains(w[0].LastErr, "panic: chaos: panic on a trigger item")
	})
}

// chromiumPath is the headless browser the status page tests drive, which
// make install-tools installs.
func chromiumPath(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v); run make install-tools", err)
	}
	return chromium
}
