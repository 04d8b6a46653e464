package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/streamer-dev/streamer/broker"
	"github.com/streamer-dev/streamer/supervisor"
	"github.com/streamer-dev/streamer/supervisor/httpapi"
)

// brokerOptions are the flags of the many-machine mode.
type brokerOptions struct {
	url       string
	prefix    string
	claimIdle time.Duration
	replyTTL  time.Duration
	caFile    string

	// from names where url came from, for messages: --broker or
	// $STREAMER_BROKER. set lists the other broker flags given.
	from string
	set  []string
}

// envBroker is the environment variable that may hold the broker's URL:
// read when --broker is not given, and never shown as a default, as it may
// hold a password.
const envBroker = "STREAMER_BROKER"

func addBrokerFlags(f *pflag.FlagSet, o *brokerOptions) {
	f.StringVar(&o.url, "broker", "", "redis://[user:password@]host:port/db (or rediss:// for TLS) shared by front ends and GPU nodes: requests go through it and every node with --workers > 0 serves them; with ?master_name=NAME, host:port is a Sentinel (more: &addr=host:port) and the master of NAME is followed through failovers (also $"+envBroker+")")
	f.StringVar(&o.prefix, "stream-prefix", broker.DefaultPrefix, "prefix of every Redis key, to keep several models apart on one Redis")
	f.DurationVar(&o.claimIdle, "claim-idle", broker.DefaultClaimIdle, "with --broker: how long a node may hold items without a sign of life before another node claims and answers them (100ms to 1h)")
	f.DurationVar(&o.replyTTL, "reply-ttl", broker.DefaultReplyTTL, "with --broker: how long this front end's answers stay in Redis after the last was written, when nobody reads them (it died), 1s to 24h; its items carry it to the nodes")
	f.StringVar(&o.caFile, "broker-ca", "", "with a rediss:// --broker: PEM file of the CA that signed Redis's certificate (default: the system's)")
}

// resolve reads $STREAMER_BROKER when --broker is not given, and notes the
// broker flags given, from f. The variable set but empty is refused, as
// --broker given empty is (see refuseEmpty): it would serve alone.
func (o *brokerOptions) resolve(f *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	o.from = "--broker"
	if !f.Changed("broker") {
		if v, ok := lookupEnv(envBroker); ok {
			if strings.TrimSpace(v) == "" {
				return fmt.Errorf("$%s is set but empty: give a redis:// URL, or unset it to serve alone", envBroker)
			}
			o.url, o.from = v, "$"+envBroker
		}
	}
	for _, name := range []string{"stream-prefix", "claim-idle", "reply-ttl", "broker-ca"} {
		if f.Changed(name) {
			o.set = append(o.set, "--"+name)
		}
	}
	return nil
}

// check refuses the broker flags that cannot work: those of the
// many-machine mode without a broker, times too short, a CA without TLS.
func (o brokerOptions) check() error {
	if o.url == "" {
		if len(o.set) > 0 {
			return fmt.Errorf("%s needs --broker (or $%s): without it this server runs alone, and Redis is not used", strings.Join(o.set, ", "), envBroker)
		}
		return nil
	}
	if o.prefix == "" {
		return errors.New("--stream-prefix is empty: give every key a prefix, such as the model's name (default " + broker.DefaultPrefix + ")")
	}
	// The broker's bounds, which it enforces too: the flags are named
	// here, before anything is made.
	if o.claimIdle < broker.MinClaimIdle || o.claimIdle > broker.MaxClaimIdle {
		return fmt.Errorf("--claim-idle %s: want %s to %s (the wait before a dead node's items are claimed)", o.claimIdle, broker.MinClaimIdle, broker.MaxClaimIdle)
	}
	if o.replyTTL < broker.MinReplyTTL || o.replyTTL > broker.MaxReplyTTL {
		return fmt.Errorf("--reply-ttl %s: want %s to %s (how long a dead front end's answers stay in Redis)", o.replyTTL, broker.MinReplyTTL, broker.MaxReplyTTL)
	}
	if o.caFile != "" && !broker.TLSURL(o.url) {
		return fmt.Errorf("--broker-ca needs a rediss:// URL in %s: the CA checks a TLS connection, and this one has no TLS", o.from)
	}
	return nil
}

// brokerParts are the front end this process serves HTTP through and, with
// workers, the node that feeds them from Redis.
type brokerParts struct {
	front *broker.FrontEnd
	node  *broker.Node
	local *supervisor.Streamer
	opts  brokerOptions
	base  broker.Config // of both
	// frontStarted is set once the front end's Start has returned: on a
	// node, after its workers and the node have started.
	frontStarted atomic.Bool
}

// brokerParts makes the front end, and the node when st is not nil, of
// the model id, whose spec models gives as it is now.
func (o serveOptions) brokerParts(st *supervisor.Streamer, models specSource, id broker.ModelID, log *slog.Logger) (*brokerParts, error) {
	if o.workers < 0 {
		return nil, fmt.Errorf("--workers %d: must not be negative", o.workers)
	}
	broker.SendRedisLogTo(log)
	base := broker.Config{
		URL: o.broker.url, Prefix: o.broker.prefix, ClaimIdle: o.broker.claimIdle,
		ReplyTTL: o.broker.replyTTL, Model: id, Logger: log.With("broker", o.broker.prefix),
	}
	if id.Version != "" {
		// A reload's new file is a new version, as is a front end's read
		// again at a SIGHUP.
		base.ModelVersion = func() string { return answersVersion(models.Model()) }
	}
	if o.broker.caFile != "" {
		pool, err := readCA("--broker-ca", o.broker.caFile)
		if err != nil {
			return nil, err
		}
		base.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	backlog := o.maxQueue
	if backlog == 0 {
		// The same on every process, whatever its workers: each admits
		// against its own bound.
		backlog = 100 * o.batchSize
	}
	front, err := broker.NewFrontEnd(broker.FrontEndConfig{Config: base, MaxBacklog: backlog, MaxItems: o.maxItems, MaxItemBytes: o.maxBatchBytes})
	if err != nil {
		return nil, o.broker.wrap(err)
	}
	p := &brokerParts{front: front, local: st, opts: o.broker, base: base}
	if st != nil {
		// As much as the workers can run soon: a batch running and those
		// formed ahead on every worker.
		capacity := o.workers * o.batchSize * max(o.pipeline, 1)
		if p.node, err = broker.NewNode(broker.NodeConfig{Config: base, Streamer: st, Capacity: capacity}); err != nil {
			return nil, o.broker.wrap(err)
		}
	}
	return p, nil
}

// wrap names where the URL came from in err, a broker's refusal of it.
func (o brokerOptions) wrap(err error) error {
	return fmt.Errorf("%s: %s", o.from, strings.TrimPrefix(err.Error(), "broker: "))
}

// check asks Redis, before the workers load the model, whether it can
// serve: a URL it refuses (a wrong password or database, a cluster), or a
// prefix whose nodes serve another model than the node's, ends the server
// now, not once the model has loaded. Redis not answering is left to the
// starts, which ride it out.
func (p *brokerParts) check(ctx context.Context) error {
	if fatal := fatalAtStart(broker.Check(ctx, p.base)); fatal != nil {
		return p.opts.wrap(fatal)
	}
	if p.node != nil {
		if err := p.node.CheckModel(ctx); err != nil {
			return p.opts.wrap(err)
		}
	}
	return nil
}

// start runs the node, then the front end. Redis being down is logged, not
// fatal: both keep trying, and /readyz says not ready meanwhile. A Redis
// that can never serve (a cluster, a version too old) is fatal, and so is
// one that answers but refuses the URL's user, password or database: the
// URL is wrong, and no retry mends it.
func (p *brokerParts) start(ctx context.Context, log *slog.Logger) error {
	if p.node != nil {
		if err := p.started(p.node.Start(ctx), log.With("node", p.node.Name()), "node", "node serving items from redis"); err != nil {
			return err
		}
	}
	err := p.front.Start(ctx)
	p.frontStarted.Store(true)
	return p.started(err, log.With("front", p.front.ID()), "front end", "front end sending requests through redis")
}

// started judges err, what a start of the node or the front end (who)
// returned: fatal (see fatalAtStart), or logged as a start that Redis
// refuses a permission, or without Redis (retrying either way), or with
// it.
func (p *brokerParts) started(err error, log *slog.Logger, who, with string) error {
	if fatal := fatalAtStart(err); fatal != nil {
		return p.opts.wrap(fatal)
	}
	switch {
	case errors.Is(err, broker.ErrPermission):
		// Not a mistake in the URL: an operator may grant it.
		log.Error(who+" started, but redis refuses its user a permission; retrying until it is granted (the README's \"Many machines\" lists what the user needs)", "err", err)
	case err != nil:
		log.Warn(who+" started without redis; retrying", "err", err)
	default:
		log.Info(with)
	}
	return nil
}

// fatalAtStart is err, an error of a start, when it ends the server: Redis
// cannot serve, or refuses the URL; nil when a retry may mend it.
func fatalAtStart(err error) error {
	if errors.Is(err, broker.ErrUnsupportedRedis) || errors.Is(err, broker.ErrModelMismatch) || errors.Is(err, broker.ErrNameTaken) {
		return err
	}
	return broker.Refusal(err)
}

// stops are the shutdowns in order: the front end first, which waits for
// the answers to its callers, then the node, which finishes the items it
// holds.
func (p *brokerParts) stops() []func(context.Context) error {
	stops := []func(context.Context) error{p.front.Close}
	if p.node != nil {
		stops = append(stops, p.node.Shutdown)
	}
	return stops
}

// backend is what the HTTP layer talks to: the front end, with the local
// workers' slots and batch counters on a node.
func (p *brokerParts) backend() httpapi.Backend {
	if p.local == nil {
		return p.front
	}
	return nodeBackend{p.front, p.local, p.node, &p.frontStarted}
}

// nodeBackend sends requests through Redis and describes the local workers.
type nodeBackend struct {
	*broker.FrontEnd
	local        *supervisor.Streamer
	node         *broker.Node
	frontStarted *atomic.Bool
}

// errNodeStarting is a node's answer until its front end has started: it
// listens while its workers start, as a local server does.
var errNodeStarting = fmt.Errorf("%w: this node is starting: it takes requests once its workers are up and it has joined redis", supervisor.ErrUnavailable)

// PredictRequest sends the request through Redis, once the node has
// started.
func (b nodeBackend) PredictRequest(ctx context.Context, req supervisor.Request) ([][]byte, error) {
	if !b.frontStarted.Load() {
		return nil, errNodeStarting
	}
	return b.FrontEnd.PredictRequest(ctx, req)
}

// errNodeWorkersDown is a node's readiness while none of its own workers
// is ready (restarting, or unable to start): the requests it takes still
// go through Redis, to other nodes, but it runs nothing.
var errNodeWorkersDown = fmt.Errorf("%w: no worker of this node is ready, so it runs no items (its own requests go through redis to other nodes meanwhile)", supervisor.ErrUnavailable)

// NotReady says why the node is not ready: it is starting, it takes no
// items (Redis refuses its reads or answers, or the shared stream's key
// holds another type), its front end says why the fleet takes no
// request, or none of its own workers is ready, as a local server would
// say: a readiness probe of a GPU node asks about its GPUs, not its
// neighbours'.
func (b nodeBackend) NotReady() error {
	if !b.frontStarted.Load() {
		return errNodeStarting
	}
	if err := b.node.NotReady(); err != nil {
		return err
	}
	if err := b.FrontEnd.NotReady(); err != nil {
		return err
	}
	if !b.local.Ready() {
		return errNodeWorkersDown
	}
	return nil
}

// Ready reports whether the node takes requests and runs items itself.
func (b nodeBackend) Ready() bool { return b.NotReady() == nil }

func (b nodeBackend) Slots() []supervisor.SlotStatus { return b.local.Slots() }

// BrokerStats are what the front end and the node did through Redis.
func (b nodeBackend) BrokerStats() any {
	return map[string]any{"front_end": b.FrontEnd.FrontEndStats(), "node": b.node.Stats()}
}

// Metrics are the front end's and the node's counters of their traffic
// through Redis, for /metrics.
func (b nodeBackend) Metrics() prometheus.Collector { return broker.Collector(b.FrontEnd, b.node) }

// Stats are the front end's request counters, and its callers' time from
// end to end, with the local batches, and their queue wait and compute
// time: the workers run items of every front end, and the node's callers'
// items run on every node.
func (b nodeBackend) Stats() supervisor.Stats {
	st := b.local.Stats()
	front := b.FrontEnd.Stats()
	st.Submitted, st.Answered, st.Failed, st.Rejected = front.Submitted, front.Answered, front.Failed, front.Rejected
	st.Expired, st.Poisoned, st.Canceled = front.Expired, front.Poisoned, front.Canceled
	st.RoomKept = front.RoomKept // in the shared backlog, not the local queue
	st.Latency.EndToEnd = front.Latency.EndToEnd
	return st
}

var errNoBroker = errors.New("--workers 0 runs a front end only, which needs --broker (or STREAMER_BROKER)")

// readCA reads the PEM certificates of the CA file that flag names.
func readCA(flag, file string) (*x509.CertPool, error) {
	pem, err := readSmallFile(flag, file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, file)
	}
	return pool, nil
}
