package resp

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Server's Prometheus instruments, on Config.Registerer
// (the node's registry, which the HTTP API serves at /metrics). Labels
// are bounded: a command is one of the table's names or "unknown", a
// code one of tally's error codes, a reason one of a fixed few.
type metrics struct {
	commands    *prometheus.CounterVec
	errors      *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	refused     *prometheus.CounterVec
	authFailed  prometheus.Counter
	authRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, open func() float64) (*metrics, error) {
	m := &metrics{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_resp_commands_total",
			Help: "RESP commands answered, by command name (unknown: not a command tally takes).",
		}, []string{"command"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_resp_errors_total",
			Help: "RESP commands answered with an error, by tally's error code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_resp_command_duration_seconds",
			Help:    "Time to answer a RESP command, by command name; pipelined writes committed together each take the run's time.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. ~13s, as the HTTP histogram
		}, []string{"command"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_resp_connections_refused_total",
			Help: "RESP connections refused on accept: reason max (resp_max_connections) or per_address (resp_max_connections_per_address).",
		}, []string{"reason"}),
		authFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_resp_auth_failures_total",
			Help: "RESP AUTH (or HELLO AUTH) attempts with a wrong token.",
		}),
		authRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_resp_auth_refused_total",
			Help: "RESP AUTH attempts refused unchecked: their address failed too often.",
		}),
	}
	for _, reason := range []string{"max", "per_address"} {
		m.refused.WithLabelValues(reason) // both reasons exported from the start, at 0
	}
	conns := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tally_resp_connections",
		Help: "RESP connections open.",
	}, open)
	var errs []error
	for _, c := range []prometheus.Collector{m.commands, m.errors, m.duration, m.refused, m.authFailed, m.authRefused, conns} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("resp: register metrics (one registry per Server): %w", err)
	}
	return m, nil
}

// observe counts a command answered in d.
func (s *Server) observe(name string, d time.Duration) {
	if _, ok := s.commands[name]; !ok {
		name = "unknown"
	}
	s.metrics.commands.WithLabelValues(name).Inc()
	s.metrics.duration.WithLabelValues(name).Observe(d.Seconds())
}
