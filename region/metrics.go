package region

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the replica's Prometheus instruments. With no Registerer they
// still count (tests read them) but are exported nowhere.
type metrics struct {
	ops             *prometheus.CounterVec
	opsByKind       [numOpKinds]prometheus.Counter // resolved once: the writer counts every op
	ownRecovered    prometheus.Counter
	reconciled      prometheus.Counter
	refused         *prometheus.CounterVec
	refusedOwn      prometheus.Counter
	refusedCap      prometheus.Counter
	refusedFuture   prometheus.Counter
	refusedExpiry   prometheus.Counter
	refusedNoReg    prometheus.Counter
	refusedSlot     prometheus.Counter
	clockSteps      prometheus.Counter
	batchWrites     prometheus.Histogram
	commitSeconds   prometheus.Histogram
	numbered        *prometheus.CounterVec
	unnumbered      *prometheus.GaugeVec
	idemExpired     prometheus.Counter
	slotsExpired    prometheus.Counter
	uniqueIDs       prometheus.Counter
	ownChanged      prometheus.Counter
	approxIncrs     *prometheus.CounterVec
	approxWritten   prometheus.Counter
	approxSkipped   prometheus.Counter
	budgetRefused   *prometheus.CounterVec
	budgetAsks      prometheus.Counter
	budgetGiven     prometheus.Counter
	budgetHandedOff prometheus.Counter
	budgetSpent     prometheus.Counter
	refusedWrites   *prometheus.CounterVec
	refusedBlocked  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	commit := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tally_commit_seconds",
		Help:    "Time to write and fsync one group commit.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_ops_total",
			Help: "Local operations applied, by kind.",
		}, []string{"kind"}),
		ownRecovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_own_entries_recovered_total",
			Help: "Own vector entries raised by a peer's higher value (state was lost or old).",
		}),
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_like_reconciliations_total",
			Help: "Like and keyed records this replica reconciled as the winner of a conflict.",
		}),
		clockSteps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_clock_steps_total",
			Help: "Steps of the wall clock (it moved more than 1 s apart from the monotonic clock), kept out of the stamps.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_merge_refused_total",
			Help: "Remote state refused by the merge, by reason: own_entry (a peer raised this replica's own entry or register " +
				"after recovery), entry_cap (an entry past 2^62), future_stamp (a record stamped more than a minute " +
				"ahead of the local clock; anti-entropy offers it again later), expired_key (a keyed record whose " +
				"register is older than the idempotency TTL), keyed_no_register (a contribution to an idempotency key " +
				"this replica has no register for yet; anti-entropy offers it again).",
		}, []string{"reason"}),
		batchWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tally_commit_batch_writes",
			Help:    "Storage writes per group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		commitSeconds: commit,
		numbered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_numbers_taken_total",
			Help: "Numbers of a sequence taken by counted events (a like takes one, an increment one per unit).",
		}, []string{"sequence"}),
		unnumbered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tally_unnumbered",
			Help: "Counted events of a sequence queued for numbers (no lease usable: the allocator's KV is out of reach).",
		}, []string{"sequence"}),
		idemExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_idempotency_keys_expired_total",
			Help: "Idempotency keys deleted for being older than the idempotency TTL.",
		}),
		slotsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_time_buckets_expired_total", // name kept for dashboards: slots
			Help: "Time-window slots deleted for being past their retention.",
		}),
		ownChanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_own_entries_changed_total",
			Help: "Own vector entries (counts and slots) changed by commits: what replication's fast path is handed (it coalesces them per flush).",
		}),
		approxIncrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_approx_increments_total",
			Help: "Increments of approximate counters applied, by outcome: written (the increment counted a step, " +
				"or carried an idempotency key, which is always stored) or skipped (it counted nothing and wrote nothing).",
		}, []string{"outcome"}),
	}
	m.uniqueIDs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_unique_ids_total",
		Help: "Ids added to unique-count sketches (each id of each add, repeated ids included).",
	})
	m.approxWritten = m.approxIncrs.WithLabelValues("written")
	m.approxSkipped = m.approxIncrs.WithLabelValues("skipped")
	m.refusedOwn = m.refused.WithLabelValues("own_entry")
	m.refusedCap = m.refused.WithLabelValues("entry_cap")
	m.refusedFuture = m.refused.WithLabelValues("future_stamp")
	m.refusedExpiry = m.refused.WithLabelValues("expired_key")
	m.refusedNoReg = m.refused.WithLabelValues("keyed_no_register")
	m.refusedSlot = m.refused.WithLabelValues("expired_bucket") // label kept for dashboards: a slot
	m.budgetRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tally_budget_refused_total",
		Help: "Budget spends refused, by reason: exhausted, or rights_elsewhere (other replicas hold the rights).",
	}, []string{"reason"})
	for _, reason := range []string{"exhausted", "rights_elsewhere"} {
		m.budgetRefused.WithLabelValues(reason) // exported from 0
	}
	m.budgetAsks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_budget_asks_total",
		Help: "Requests for budget rights this replica sent its peers.",
	})
	m.budgetGiven = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_budget_rights_given_total",
		Help: "Budget rights this replica gave to peers that asked.",
	})
	m.budgetHandedOff = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_budget_rights_handed_off_total",
		Help: "Budget rights this replica moved to its handoff target (before being retired).",
	})
	m.budgetSpent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tally_budget_spent_total",
		Help: "Budget units spent at this replica (spends and cashbacks, before refunds of duplicate keys).",
	})
	m.refusedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tally_writes_refused_total",
		Help: "Local writes refused for who asked, by reason: user_blocked (a like or unlike of a user blocked in this replica's view).",
	}, []string{"reason"})
	m.refusedBlocked = m.refusedWrites.WithLabelValues("user_blocked")
	for _, k := range []OpKind{OpLike, OpUnlike, OpIncr, OpUniques, OpGrant, OpSpend, OpCashback, OpBlock, OpUnblock, OpToggle, OpType, OpFence, OpCallOff, OpCallOffCredit} {
		m.opsByKind[k] = m.ops.WithLabelValues(k.String())
	}
	if reg != nil {
		reg.MustRegister(m.ops, m.ownRecovered, m.reconciled, m.refused, m.clockSteps, m.batchWrites, commit, m.numbered, m.unnumbered, m.idemExpired, m.slotsExpired, m.uniqueIDs, m.ownChanged, m.approxIncrs,
			m.budgetRefused, m.budgetAsks, m.budgetGiven, m.budgetHandedOff, m.budgetSpent, m.refusedWrites)
	}
	return m
}

// descStopped is 1 for the reason the replica stopped (Stop, or its store
// failed), 0 for the other: the code /healthz answers 503 with.
var descStopped = prometheus.NewDesc("tally_replica_stopped",
	"1 once the replica stopped and refuses every request until restarted, by reason: storage_failed "+
		"(a commit or the store failed) or replica_id_conflict (another process runs with this replica's id).",
	[]string{"reason"}, nil)

// stoppedCollector exports descStopped at scrape time, from Err.
type stoppedCollector struct{ r *Replica }

func (c stoppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descStopped }

func (c stoppedCollector) Collect(ch chan<- prometheus.Metric) {
	var failed, conflict float64
	if err := c.r.Err(); errors.Is(err, ErrIDConflict) {
		conflict = 1
	} else if err != nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(descStopped, prometheus.GaugeValue, failed, "storage_failed")
	ch <- prometheus.MustNewConstMetric(descStopped, prometheus.GaugeValue, conflict, "replica_id_conflict")
}
