package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the Server's Prometheus instruments. Labels are bounded:
// route is a template (or "unmatched"), method one of a fixed set.
type httpMetrics struct {
	labels
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
	// authFailed counts wrong bearer tokens, authRefused requests
	// refused unchecked because their address failed too often.
	authFailed, authRefused prometheus.Counter
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_http_requests_total",
			Help: "HTTP requests answered, by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tally_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route template and method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. ~13s
		}, []string{"route", "method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tally_http_requests_in_flight",
			Help: "HTTP requests being served.",
		}),
		authFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_http_auth_failures_total",
			Help: "HTTP requests with a wrong bearer token.",
		}),
		authRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_http_auth_refused_total",
			Help: "HTTP requests with a bearer token refused unchecked: their address failed too often.",
		}),
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.inFlight, m.authFailed, m.authRefused} {
		if err := reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("httpapi: register metrics (one registry per Server): %w", err)
	}
	return m, nil
}

func (m *httpMetrics) observe(route, method string, status int, d time.Duration) {
	method = methodLabel(method)
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// methodLabel maps arbitrary client methods onto a fixed set.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
		http.MethodHead, http.MethodPatch, http.MethodOptions:
		return m
	}
	return "other"
}
