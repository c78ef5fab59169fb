package replication

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published, publishErrors, received, badMessages, inboxDropped prometheus.Counter
	publishedBytes, lostMessages                                  prometheus.Counter
	aeRounds, aeErrors, aeSegments, aeRootMatches                 prometheus.Counter
	ownIDConflicts                                                prometheus.Counter
	aeParts, aeEntries                                            prometheus.Counter
	refused                                                       *prometheus.CounterVec
	lag                                                           prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_replication_" + name, Help: help})
	}
	m := &metrics{
		published:      c("published_total", "Fast-path messages published."),
		publishErrors:  c("publish_errors_total", "Fast-path publishes that failed (repaired by anti-entropy)."),
		publishedBytes: c("published_bytes_total", "Fast-path bytes published."),
		received:       c("received_total", "Fast-path messages received from peers."),
		badMessages:    c("bad_messages_total", "Messages dropped: undecodable, on another replica's subject, or a liveness summary the shard maps contradict."),
		ownIDConflicts: c("own_id_conflicts_total", "Deltas from another process using this replica's id (two processes share an id)."),
		aeRootMatches:  c("antientropy_root_matches_total", "Peer syncs skipped because the peer's last root digest equalled ours."),
		inboxDropped:   c("inbox_dropped_total", "Received deltas dropped because the merger was behind."),
		lostMessages:   c("lost_messages_total", "Gaps in peers' message sequence numbers."),
		aeRounds:       c("antientropy_rounds_total", "Anti-entropy rounds."),
		aeErrors:       c("antientropy_errors_total", "Anti-entropy syncs with a peer that failed."),
		aeSegments:     c("antientropy_buckets_pulled_total", "Differing anti-entropy segments pulled from peers."), // name kept for dashboards
		aeParts:        c("antientropy_parts_pulled_total", "Differing parts of segments compared by part digests and pulled from peers (each segment has 64)."),
		aeEntries:      c("antientropy_entries_pulled_total", "Entries, records and sketch pages received in anti-entropy pages."),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_replication_refused_total",
			Help: "Messages or entries refused, by reason: unknown_sender (a delta from a replica that is not a " +
				"configured peer), unknown_replica (state of a replica that is not a configured peer).",
		}, []string{"reason"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_replication_lag_seconds",
			Help:    "Time from a peer's flush to receipt here (sender and receiver clocks).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	for _, reason := range []string{refusedUnknownSender, refusedUnknownReplica} {
		m.refused.WithLabelValues(reason) // exported from 0
	}
	if reg != nil {
		reg.MustRegister(m.published, m.publishErrors, m.publishedBytes, m.received, m.badMessages,
			m.inboxDropped, m.lostMessages, m.aeRounds, m.aeErrors, m.aeSegments, m.lag,
			m.ownIDConflicts, m.aeRootMatches, m.refused, m.aeParts, m.aeEntries)
	}
	return m
}

// peerCollector exports each peer's state at scrape time, from Peers().
type peerCollector struct{ r *Replicator }

var (
	descHeardAge = prometheus.NewDesc("tally_replication_peer_last_heard_age_seconds",
		"Seconds since the peer was last heard from (-1: never).", []string{"peer"}, nil)
	descInSync = prometheus.NewDesc("tally_replication_peer_in_sync",
		"1 if the last digest comparison with the peer found no differing segment.", []string{"peer"}, nil)
	// The name keeps "buckets" for dashboards: anti-entropy segments.
	descDiffering = prometheus.NewDesc("tally_replication_peer_differing_buckets",
		"Anti-entropy segments that differed at the last digest comparison with the peer.", []string{"peer"}, nil)
	descRecovered = prometheus.NewDesc("tally_replication_recovered",
		"1 once start-up recovery from peers finished and writes are accepted.", nil, nil)
	descStale = prometheus.NewDesc("tally_replication_peer_stale",
		"1 while the peer is unheard-from for longer than peer_timeout (or never heard): reads say approx.", []string{"peer"}, nil)
	descConverged = prometheus.NewDesc("tally_replication_converged",
		"1 when recovery is done and every peer is in sync and not stale, as GET /v1/convergence says.", nil, nil)
)

func (c peerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHeardAge
	ch <- descInSync
	ch <- descDiffering
	ch <- descRecovered
	ch <- descStale
	ch <- descConverged
}

func (c peerCollector) Collect(ch chan<- prometheus.Metric) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	recovered := c.r.Recovered()
	converged := recovered // as Convergence, from one read of Peers
	for _, p := range c.r.Peers() {
		age := -1.0
		if p.LastHeardAgoMs >= 0 {
			age = float64(p.LastHeardAgoMs) / 1000
		}
		ch <- prometheus.MustNewConstMetric(descHeardAge, prometheus.GaugeValue, age, p.Replica)
		ch <- prometheus.MustNewConstMetric(descInSync, prometheus.GaugeValue, b2f(p.InSync), p.Replica)
		ch <- prometheus.MustNewConstMetric(descDiffering, prometheus.GaugeValue, float64(p.DifferingSegments), p.Replica)
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, b2f(p.Stale), p.Replica)
		converged = converged && p.InSync && !p.Stale
	}
	ch <- prometheus.MustNewConstMetric(descRecovered, prometheus.GaugeValue, b2f(recovered))
	ch <- prometheus.MustNewConstMetric(descConverged, prometheus.GaugeValue, b2f(converged))
}
