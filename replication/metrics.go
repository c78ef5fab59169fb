package replication

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	published, publishErrors, received, badMessages, inboxDropped prometheus.Counter
	publishedBytes, lostMessages                                  prometheus.Counter
	aeRounds, aeErrors, aeBuckets                                 prometheus.Counter
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
		badMessages:    c("bad_messages_total", "Messages that failed to decode."),
		inboxDropped:   c("inbox_dropped_total", "Received deltas dropped because the merger was behind."),
		lostMessages:   c("lost_messages_total", "Gaps in peers' message sequence numbers."),
		aeRounds:       c("antientropy_rounds_total", "Anti-entropy rounds."),
		aeErrors:       c("antientropy_errors_total", "Anti-entropy syncs with a peer that failed."),
		aeBuckets:      c("antientropy_buckets_pulled_total", "Differing buckets pulled from peers."),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_replication_lag_seconds",
			Help:    "Time from a peer's flush to receipt here (sender and receiver clocks).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.publishErrors, m.publishedBytes, m.received, m.badMessages,
			m.inboxDropped, m.lostMessages, m.aeRounds, m.aeErrors, m.aeBuckets, m.lag)
	}
	return m
}
