package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/internal/bench"
	"github.com/streamer-dev/streamer/supervisor"
)

// statusReport is what `streamer status` reads from a running server.
type statusReport struct {
	model    string
	ready    bool
	notReady string // why, as /readyz says
	stats    supervisor.Stats
	requests map[string]uint64 // the requests answered by outcome; nil from a server that does not say
	slots    []supervisor.SlotStatus
	// broker is what a server behind Redis (--broker) says of it: its
	// front end's view, and its node's traffic on a GPU node.
	broker *struct {
		FrontEnd *broker.FrontEndStats `json:"front_end"`
		Node     *broker.NodeStats     `json:"node"`
	}
}

func newStatusCommand() *cobra.Command {
	var target, token, caFile string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running server's model, workers, queue and batching",
		Long: "status asks a running `streamer serve` for its model (/v1/models), workers\n" +
			"(/v1/workers), counters (/v1/stats) and readiness (/readyz), and prints them;\n" +
			"behind --broker, what it knows of Redis and its traffic there too.\n" +
			"A server with --auth-token wants its token: give --token, or $" + envAuthToken + "\n" +
			"(the variable the server reads too), which keeps it out of the process list.\n" +
			"A server with --tls-cert signed by a private CA wants that CA: give --ca.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %s: want a positive duration", timeout)
			}
			if _, err := bench.ParseTarget(target, "--token"); err != nil {
				return err
			}
			if caFile != "" && !bench.IsHTTPS(target) {
				return errors.New("--ca: it checks the certificate of an https --target, and there is none")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if token == "" {
				token = os.Getenv(envAuthToken)
			}
			c := statusClient{base: strings.TrimSuffix(target, "/"), token: strings.TrimSpace(token), client: http.DefaultClient}
			if caFile != "" {
				roots, err := readCA("--ca", caFile)
				if err != nil {
					return err
				}
				c.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
			}
			report, err := c.fetch(ctx)
			if err != nil {
				return err
			}
			return report.print(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&target, "target", "http://127.0.0.1:5005", "base URL of the server's HTTP API")
	cmd.Flags().StringVar(&token, "token", "", "the server's --auth-token, sent as Authorization: Bearer TOKEN (default $"+envAuthToken+")")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "longest to wait for the server's answers")
	cmd.Flags().StringVar(&caFile, "ca", "", "with an https --target: PEM file of the CA that signed the server's certificate (default: the system's)")
	return cmd
}

// statusClient asks one server for its status.
type statusClient struct {
	base   string // the server's URL, without a trailing slash
	token  string // sent as the bearer token; empty: none
	client *http.Client
}

// fetch reads the report from the server.
func (c statusClient) fetch(ctx context.Context) (statusReport, error) {
	base := c.base
	var r statusReport
	var info map[string]any
	if err := c.getJSON(ctx, base+"/v1/models", &info); err != nil {
		return r, err
	}
	r.model, _ = info["model"].(string)
	var stats struct {
		supervisor.Stats
		Requests map[string]uint64 `json:"requests"`
		Broker   json.RawMessage   `json:"broker"`
	}
	if err := c.getJSON(ctx, base+"/v1/stats", &stats); err != nil {
		return r, err
	}
	r.stats, r.requests = stats.Stats, stats.Requests
	if len(stats.Broker) > 0 {
		if err := json.Unmarshal(stats.Broker, &r.broker); err != nil {
			return r, fmt.Errorf("GET %s/v1/stats: its broker section: %w", base, err)
		}
	}
	if err := c.getJSON(ctx, base+"/v1/workers", &r.slots); err != nil {
		return r, err
	}
	var readiness map[string]string
	if err := c.getJSON(ctx, base+"/readyz", &readiness); err != nil {
		r.notReady = err.Error()
		if refused := new(refusedError); errors.As(err, &refused) {
			r.notReady = refused.why
		}
	} else {
		r.ready = true
	}
	return r, nil
}

// getJSON decodes the 200 answer to GET url into v.
func (c statusClient) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.client.Do(req)
	if cert := new(tls.CertificateVerificationError); errors.As(err, &cert) {
		if host := new(x509.HostnameError); errors.As(err, host) {
			return fmt.Errorf("GET %s: the server's certificate does not name %s, the target's host (give --target a name the certificate holds, or serve one that names this host, an IP address among its SANs for an address): %w", url, host.Host, err)
		}
		return fmt.Errorf("GET %s: the server's certificate is not trusted (signed by a private CA? give it with --ca): %w", url, err)
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("GET %s: no answer within --timeout", url)
	}
	if err != nil {
		return fmt.Errorf("GET %s: %w (is `streamer serve` running there?)", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: read the answer: %w", url, err)
	}
	if resp.StatusCode == http.StatusUnauthorized && c.token == "" {
		return fmt.Errorf("GET %s: status 401: the server wants its --auth-token: pass it with --token, or in $%s", url, envAuthToken)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("GET %s: status 401: the server refused the token given (--token or $%s): is it the server's --auth-token?", url, envAuthToken)
	}
	if resp.StatusCode != http.StatusOK {
		return &refusedError{url: url, status: resp.StatusCode, why: refusalText(body)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: not a streamer answer: %w", url, err)
	}
	return nil
}

// refusedError is an answer other than 200, and what it says.
type refusedError struct {
	url    string
	status int
	why    string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("GET %s: status %d: %s", e.url, e.status, e.why)
}

// refusalText is what an answer other than 200 says, in one line: a
// streamer server's error, else the start of the body, which may be
// another server's page.
func refusalText(body []byte) string {
	var refusal struct{ Error string }
	if json.Unmarshal(body, &refusal) == nil && refusal.Error != "" {
		return refusal.Error
	}
	text := strings.Join(strings.Fields(string(body)), " ")
	if len(text) > 200 {
		text = strings.ToValidUTF8(text[:200], "") + "…"
	}
	return text + " (is `streamer serve` running there?)"
}

// print writes the report as aligned text.
func (r statusReport) print(out io.Writer) error {
	st := r.stats
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "model\t%s\n", r.model)
	if r.ready {
		fmt.Fprintf(w, "ready\tyes\n")
	} else {
		fmt.Fprintf(w, "ready\tno: %s\n", r.notReady)
	}
	if b := r.broker; b != nil && b.FrontEnd != nil {
		f := b.FrontEnd
		switch {
		case !f.Checked:
			fmt.Fprintf(w, "redis\tnot looked at yet: a node's front end starts once its workers are\n")
		case f.RedisUp:
			fmt.Fprintf(w, "redis\tup, nodes heard from %d, backlog %d of %d items\n", f.Nodes, f.Backlog, f.MaxBacklog)
		default:
			fmt.Fprintf(w, "redis\tdown: no node heard from; backlog %d of %d items when last seen\n", f.Backlog, f.MaxBacklog)
		}
		fmt.Fprintf(w, "front end\tanswers dropped %d (late, or second: a claim, a write retried), withdrawn %d, lost %d\n", f.Duplicates, f.Withdrawn, f.Lost)
		if f.ModelVersions > 1 {
			fmt.Fprintf(w, "model versions\t%d among the nodes: a request is answered by whichever runs it (a rolling upgrade, until it is done; the log names them)\n", f.ModelVersions)
		}
		if f.OtherVersion {
			fmt.Fprintf(w, "model version\tthis front end's is none of the nodes': it names its own model while they answer with theirs\n")
		}
	}
	if b := r.broker; b != nil && b.Node != nil {
		n := b.Node
		fmt.Fprintf(w, "node\tread %d, claimed %d, answered %d, expired %d, released %d, quarantined %d, withdrawn %d, write failures %d, held %d\n",
			n.Read, n.Claimed, n.Answered, n.Expired, n.Released, n.Quarantined, n.Withdrawn, n.WriteFailures, n.Held)
		if n.Refused != "" {
			fmt.Fprintf(w, "node refused\t%s\n", n.Refused)
		}
		if n.ModelVersions > 1 && (b.FrontEnd == nil || b.FrontEnd.ModelVersions <= 1) {
			// Beside a front end that says it already, said once.
			fmt.Fprintf(w, "model versions\t%d among the nodes: a request is answered by whichever runs it (a rolling upgrade, until it is done; the log names them)\n", n.ModelVersions)
		}
	}
	if st.RoomKept > 0 {
		fmt.Fprintf(w, "queue depth\t%d items, room for %d kept for a larger request\n", st.Queued, st.RoomKept)
	} else {
		fmt.Fprintf(w, "queue depth\t%d items\n", st.Queued)
	}
	if q := r.requests; q != nil {
		fmt.Fprintf(w, "requests\tok %d, rejected %d, timed out %d, failed %d, poisoned %d, canceled %d\n",
			q["ok"], q["rejected"], q["timed_out"], q["failed"], q["poisoned"], q["canceled"])
	}
	// Failed is part of Answered, and Expired, Poisoned and Canceled of
	// Failed; the rest failed in the model, or for want of anything to
	// run them (no worker able to; behind --broker, no node alive, or
	// Redis not serving): streamer_items_total's failed. Not "the
	// model's": an outage would be put on it.
	fmt.Fprintf(w, "items\tanswered %d (ok %d, failed %d: expired %d, poisoned %d, canceled %d, other %d), rejected %d\n",
		st.Answered, st.Answered-st.Failed, st.Failed, st.Expired, st.Poisoned, st.Canceled,
		st.Failed-st.Expired-st.Poisoned-st.Canceled, st.Rejected)
	lat := st.Latency
	if r.frontEnd() {
		fmt.Fprintf(w, "mean latency\tend to end %s\n", meanMs(lat.EndToEnd))
		fmt.Fprintf(w, "workers\tnone of its own, a front end: its nodes form the batches and run them (see each node's streamer status)\n")
		return w.Flush()
	}
	fmt.Fprintf(w, "batches\t%d, mean batch size %.2f\n", st.Batches, st.MeanBatchSize())
	d := st.Dispatch
	fmt.Fprintf(w, "dispatch reasons\tfull %d, idle %d, waited %d, max_latency %d, deadline %d, retry %d, recalled %d\n",
		d.Full, d.Idle, d.Waited, d.MaxLatency, d.Deadline, d.Retry, d.Recalled)
	if st.Reloads+st.ReloadFailures > 0 {
		line := fmt.Sprintf("ok %d, failed %d", st.Reloads, st.ReloadFailures)
		if st.LastReloadError != "" {
			line += "; the last failure: " + st.LastReloadError
		}
		fmt.Fprintf(w, "reloads\t%s\n", line)
	}
	if st.Cost.Fitted {
		fmt.Fprintf(w, "batch cost\t%.2f ms + %.3f ms per item\n", st.Cost.FixedMs, st.Cost.PerItemMs)
	} else {
		fmt.Fprintf(w, "batch cost\tnot fitted yet\n")
	}
	if r.broker != nil && r.broker.Node != nil {
		fmt.Fprintf(w, "mean latency\tqueue wait %s, compute %s, of its workers' items; end to end %s, of its callers' through redis\n",
			meanMs(lat.QueueWait), meanMs(lat.Compute), meanMs(lat.EndToEnd))
	} else {
		fmt.Fprintf(w, "mean latency\tqueue wait %s, compute %s, end to end %s\n",
			meanMs(lat.QueueWait), meanMs(lat.Compute), meanMs(lat.EndToEnd))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "SLOT\tDEVICE\tPID\tSTATE\tRESTARTS\tCRASHES\tBATCHES\tIN FLIGHT\tLAST ERROR")
	for _, sl := range r.slots {
		device := "-" // no card assigned: the worker sees what the server sees
		if sl.CUDA != "" {
			device = "cuda:" + sl.CUDA
		}
		pid := "-"
		if sl.PID != 0 {
			pid = fmt.Sprint(sl.PID)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n",
			sl.Slot, device, pid, sl.State, sl.Restarts, sl.Crashes, sl.Batches, sl.InFlight, sl.LastErr)
	}
	return w.Flush()
}

// frontEnd says whether the server is a front end behind Redis, with no
// workers of its own.
func (r statusReport) frontEnd() bool {
	return r.broker != nil && r.broker.FrontEnd != nil && r.broker.Node == nil
}

// meanMs is a histogram's mean in milliseconds, or "-" when it is empty.
func meanMs(h supervisor.Histogram) string {
	n := h.Count()
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", h.SumSeconds/float64(n)*1000)
}
