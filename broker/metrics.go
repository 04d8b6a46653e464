package broker

import "github.com/prometheus/client_golang/prometheus"

// Collector returns the metrics of a front end and of a node beside it,
// either of them nil when the process runs none (fe's alone is
// fe.Metrics()), read from their counters when scraped:
//
//	streamer_broker_redis_up                    1 when Redis answered the last check
//	streamer_broker_nodes                       nodes heard from within 3 s
//	streamer_broker_backlog_items               items on the shared stream, waiting or running
//	streamer_broker_max_backlog_items           its bound, past which front ends answer 429 (413 for a request larger than it)
//	streamer_broker_duplicate_answers_total     answers dropped: second ones (a claim, a write retried), or to requests no longer waiting
//	streamer_broker_withdrawn_items_total       items of requests given up, deleted before any node read them
//	streamer_broker_lost_items_total            items of requests failed as Redis lost them and kept its other data
//	streamer_broker_clock_offset_seconds        how far Redis's clock is ahead of this machine's
//	streamer_broker_model_versions              versions of the model the nodes heard from within 3 s run (see ModelID.Version)
//	streamer_broker_node_items_total{event}     read, claimed, answered, expired, released, quarantined, withdrawn
//	streamer_broker_node_write_failures_total   writes of answers Redis did not take (retried)
//	streamer_broker_node_held_items             items the node holds now
//	streamer_broker_node_refused                1 while the node takes no items, refused (see NodeStats.Refused)
func Collector(fe *FrontEnd, node *Node) prometheus.Collector {
	return &collector{fe: fe, node: node,
		up:         prometheus.NewDesc("streamer_broker_redis_up", "1 when Redis answered the front end's last check, else 0.", nil, nil),
		nodes:      prometheus.NewDesc("streamer_broker_nodes", "Nodes heard from within the last 3 seconds.", nil, nil),
		backlog:    prometheus.NewDesc("streamer_broker_backlog_items", "Items on the shared stream, waiting or running, from every front end.", nil, nil),
		maxBacklog: prometheus.NewDesc("streamer_broker_max_backlog_items", "The shared backlog's bound: past it front ends answer 429, and 413 to a request larger than it.", nil, nil),
		duplicates: prometheus.NewDesc("streamer_broker_duplicate_answers_total", "Answers dropped by this front end: second answers to one item (after a claim, or a node's write retried when its reply was lost), and answers to requests no longer waiting (canceled, past their deadline, or failed).", nil, nil),
		withdrawn:  prometheus.NewDesc("streamer_broker_withdrawn_items_total", "Items of requests given up (client gone, deadline passed) deleted from the stream before any node read them.", nil, nil),
		lost:       prometheus.NewDesc("streamer_broker_lost_items_total", "Items of requests failed with 503 as Redis lost them while it kept its other data (a failover to a replica that lacked them, a restart that lost its last writes).", nil, nil),
		versions:   prometheus.NewDesc("streamer_broker_model_versions", "Versions of the model (its file, plugin binary and arguments, or settings) that the nodes heard from within the last 3 seconds run: above 1, a request is answered by whichever version runs it (a rolling upgrade, until it is done).", nil, nil),
		offset:     prometheus.NewDesc("streamer_broker_clock_offset_seconds", "How far Redis's clock is ahead of this machine's (negative: behind), as last measured. Times shared through Redis go on its clock, so an offset does no harm to streamer; it says that this machine's clock is not in sync.", nil, nil),
		items:      prometheus.NewDesc("streamer_broker_node_items_total", "Items this node read from Redis (claimed: of them, taken over from a silent node), answered, found expired, released for another node, refused as quarantined, or withdrawn (their answers dropped as Redis, full, refused them, and their items gone from their streams).", []string{"event"}, nil),
		failures:   prometheus.NewDesc("streamer_broker_node_write_failures_total", "Writes of answers that Redis did not take; they are retried and their items kept.", nil, nil),
		held:       prometheus.NewDesc("streamer_broker_node_held_items", "Items this node holds now, running or queued on its workers.", nil, nil),
		refused:    prometheus.NewDesc("streamer_broker_node_refused", "1 while this node takes no items, refused: Redis refuses its answers or its reads for want of a permission (its user's ACL), the nodes under its prefix serve another model or version, or another live node has its name.", nil, nil),
	}
}

type collector struct {
	fe   *FrontEnd
	node *Node

	up, nodes, backlog, maxBacklog, duplicates, withdrawn, lost, offset *prometheus.Desc
	items, failures, held, refused                                      *prometheus.Desc
	versions                                                            *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.fe != nil {
		for _, d := range []*prometheus.Desc{c.up, c.nodes, c.backlog, c.maxBacklog, c.duplicates, c.withdrawn, c.lost, c.offset} {
			ch <- d
		}
	}
	if c.fe != nil || c.node != nil {
		ch <- c.versions
	}
	if c.node != nil {
		ch <- c.items
		ch <- c.failures
		ch <- c.held
		ch <- c.refused
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if c.fe != nil {
		fs := c.fe.FrontEndStats()
		if fs.Checked { // before, absent rather than say Redis is down
			up := 0.0
			if fs.RedisUp {
				up = 1
			}
			gauge(c.up, up)
			gauge(c.nodes, float64(fs.Nodes))
			gauge(c.versions, float64(fs.ModelVersions))
		}
		gauge(c.backlog, float64(fs.Backlog))
		gauge(c.maxBacklog, float64(fs.MaxBacklog))
		counter(c.duplicates, fs.Duplicates)
		counter(c.withdrawn, fs.Withdrawn)
		counter(c.lost, fs.Lost)
		gauge(c.offset, float64(fs.ClockOffsetMs)/1000)
	}
	if c.node == nil {
		return
	}
	ns := c.node.Stats()
	if c.fe == nil {
		// Beside a front end, the front end's count, read at its checks.
		gauge(c.versions, float64(ns.ModelVersions))
	}
	for _, e := range []struct {
		event string
		n     uint64
	}{
		{"read", ns.Read}, {"claimed", ns.Claimed}, {"answered", ns.Answered}, {"expired", ns.Expired},
		{"released", ns.Released}, {"quarantined", ns.Quarantined}, {"withdrawn", ns.Withdrawn},
	} {
		counter(c.items, e.n, e.event)
	}
	counter(c.failures, ns.WriteFailures)
	gauge(c.held, float64(ns.Held))
	refused := 0.0
	if ns.Refused != "" {
		refused = 1
	}
	gauge(c.refused, refused)
}
