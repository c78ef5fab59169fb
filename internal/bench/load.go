package bench

import (
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The load runner every HTTP mode shares (likes, events): Workers
// goroutines, each sending one request after another over its own
// keep-alive connection (a closed loop), until Duration has passed,
// MaxRequests were started, or ctx ends. Latency is recorded per
// successful request; failures are counted and the first is kept.

// loadConfig is one run of the load runner.
type loadConfig struct {
	// Workers is how many requests are in flight at once.
	Workers int
	// Duration ends the run.
	Duration time.Duration
	// MaxRequests, if positive, also ends it once this many were started.
	MaxRequests int64
}

// loadResult is what a run measured.
type loadResult struct {
	Requests int64 // finished, ok or not
	Errors   int64 // transport failures, non-2xx answers, bad bodies
	// Units counts what the successful requests carried (events of a
	// batch; 1 per single like), Counted how many of them changed a count.
	Units, Counted int64
	FirstError     string
	Elapsed        time.Duration // first request start to last request end
	Latency        histogram     // of successful requests only
}

// loadOp sends one request: the units it carried and counted, or an error.
type loadOp func(ctx context.Context) (units, counted int64, err error)

// newLoadClient returns an HTTP client that keeps one connection per
// worker alive (unless keepAlive is false: then every request opens its
// own, and with https does a full handshake), and the func that closes
// them. tlsc is what it trusts for https; nil is the system's roots.
// HTTP/2 stays off, over TLS too, so that TLS changes nothing but the
// encryption: one HTTP/1.1 connection per worker either way.
func newLoadClient(workers int, tlsc *tls.Config, keepAlive bool) (*http.Client, func()) {
	tr := &http.Transport{
		MaxIdleConns:        workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		DisableKeepAlives:   !keepAlive,
		TLSClientConfig:     tlsc.Clone(),
		// A non-nil empty map is what turns HTTP/2 off.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: tr}, tr.CloseIdleConnections
}

// newControlClient is a client for the few requests around a run
// (readiness, metrics, setup), trusting tlsc for https.
func newControlClient(tlsc *tls.Config) (*http.Client, func()) {
	return newLoadClient(1, tlsc, true)
}

// runLoad runs cfg.Workers workers, each sending with the loadOp newOp
// made for it, and merges what they measured.
func runLoad(ctx context.Context, cfg loadConfig, newOp func(worker int) loadOp) loadResult {
	start := time.Now()
	stopAt := start.Add(cfg.Duration)
	var issued atomic.Int64
	type worker struct {
		op       loadOp
		res      loadResult
		firstErr error
	}
	workers := runWorkers(ctx, cfg.Workers, func(i int) *worker { return &worker{op: newOp(i)} }, func(ctx context.Context, w *worker) {
		// Every worker sends at least one request, however late it was
		// scheduled: on a loaded machine a short run's workers could all
		// start past stopAt and measure nothing.
		for first := true; ctx.Err() == nil && (first || time.Now().Before(stopAt)); first = false {
			if cfg.MaxRequests > 0 && issued.Add(1) > cfg.MaxRequests {
				return
			}
			t0 := time.Now()
			units, counted, err := w.op(ctx)
			d := time.Since(t0)
			if err != nil && ctx.Err() != nil {
				return // interrupted, not a failure of the server
			}
			w.res.Requests++
			if err != nil {
				w.res.Errors++
				if w.firstErr == nil {
					w.firstErr = err
				}
				continue
			}
			w.res.Units += units
			w.res.Counted += counted
			w.res.Latency.Record(d)
		}
	})
	out := loadResult{Elapsed: time.Since(start)}
	for _, w := range workers {
		out.Requests += w.res.Requests
		out.Errors += w.res.Errors
		out.Units += w.res.Units
		out.Counted += w.res.Counted
		if w.firstErr != nil && out.FirstError == "" {
			out.FirstError = oneLine(w.firstErr)
		}
		out.Latency.Merge(&w.res.Latency)
	}
	return out
}

// runWorkers makes n workers with mk, runs work on each in its own
// goroutine, and returns them once all have returned.
func runWorkers[W any](ctx context.Context, n int, mk func(i int) W, work func(context.Context, W)) []W {
	workers := make([]W, n)
	var wg sync.WaitGroup
	for i := range workers {
		w := mk(i)
		workers[i] = w
		wg.Go(func() { work(ctx, w) })
	}
	wg.Wait()
	return workers
}
