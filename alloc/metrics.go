package alloc

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	acquired, released, reclaimed, lost, kvErrors prometheus.Counter
	held, blockSize                               prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, seq string) *metrics {
	labels := prometheus.Labels{"sequence": seq}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "tally", Subsystem: "alloc", Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tally", Subsystem: "alloc", Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{
		acquired:  counter("leases_acquired_total", "Leases this replica acquired."),
		released:  counter("leases_released_total", "Leases this replica gave back (idle, closing, restart)."),
		reclaimed: counter("leases_reclaimed_total", "Silent leaseholders' leases whose tails this replica freed."),
		lost:      counter("leases_lost_total", "This replica's leases reclaimed by others while it was silent."),
		kvErrors:  counter("kv_errors_total", "Lease rounds that failed to reach the KV."),
		held:      gauge("leases_held", "Leases this replica holds."),
		blockSize: gauge("block_size", "Size of the last lease acquired."),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.acquired, m.released, m.reclaimed, m.lost, m.kvErrors, m.held, m.blockSize} {
			_ = reg.Register(c) // tests run several leaseholders on one registry: the first one's metrics win
		}
	}
	return m
}
