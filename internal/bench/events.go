package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// runEventsBench runs every mix against cfg.URL or an in-process replica,
// printing a row per mix (and memory samples, if asked) to out.
func runEventsBench(ctx context.Context, cfg eventsBenchConfig, out, logOut io.Writer) (_ []*eventsMixResult, err error) {
	base, target := strings.TrimSuffix(cfg.URL, "/"), cfg.URL
	var store func() (storage.MemoryUse, error)
	var measure func(keys []string) (benchCost, int64, error) // in-process only
	var tlsc *tls.Config
	if base == "" {
		log := cfg.logger(logOut)
		n, err := startBenchReplica(ctx, benchReplica{Durability: cfg.Durability, EventLog: cfg.EventLog, Windows: cfg.Windows,
			Approx: cfg.Approx, TLS: cfg.TLS, Limits: cfg.Limits}, log)
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := n.stop(ctx); err != nil {
				log.Warn("stopping the in-process replica", "error", err)
			}
		}()
		base, tlsc = n.base, n.tls
		target = fmt.Sprintf("in-process replica at %s (durability %s, windows %q%s, data %s)", base, cfg.Durability, windowsFlag(cfg.Windows),
			cfg.edge(), n.dir)
		if cfg.Approx > 0 {
			target += fmt.Sprintf(", counters under %q approximate at %v", approxPrefix, cfg.Approx)
		}
		store = n.MemoryUse
		measure = func(keys []string) (benchCost, int64, error) { return measureNode(ctx, n, keys) }
	}
	if err := checkReady(ctx, base, tlsc); err != nil {
		return nil, err
	}
	if cfg.CPUProfile != "" {
		stop, err := startCPUProfile(cfg.CPUProfile)
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if cfg.MemProfile != "" {
		defer func() { err = errors.Join(err, writeAllocProfile(cfg.MemProfile)) }()
	}
	route := "POST /v1/events"
	if cfg.Import > 0 {
		route = fmt.Sprintf("POST /v1/admin/import (times spread over %s)", cfg.Import)
	}
	fmt.Fprintf(out, "bench events: %s, %d events per request (%s) on %d key(s), %d workers, %s per mix\n  %s\n\n",
		route, cfg.Batch, cfg.Format, cfg.Keys, cfg.Concurrency, cfg.Duration, target)
	var sampler *memSampler
	if cfg.MemEvery > 0 {
		sampler = startMemSampler(ctx, cfg.MemEvery, store, out)
	}
	var results []*eventsMixResult
	run := newRunID()
	keys := make([]string, cfg.Keys)
	approxKeys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = benchKey(cfg.Item, i, cfg.Keys)
		approxKeys[i] = approxPrefix + keys[i]
	}
	if cfg.Start > 0 {
		all := keys
		if cfg.Approx > 0 {
			all = append(append([]string(nil), keys...), approxKeys...)
		}
		if err := startCounters(ctx, base, tlsc, cfg.Token, all, cfg.Start); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "every counter key starts at %d\n\n", cfg.Start)
	}
	runs := 0
	for _, mix := range cfg.Mixes {
		// With --approx, incr and idem run on the exact keys and on the
		// approximate ones in turn, half the duration at a time, in the
		// order exact, approx, approx, exact: whatever drifts over a run
		// (the store grows, compactions start) then weighs on both alike.
		order, seg := []bool{false}, cfg.Duration
		if cfg.Approx > 0 && (mix == "incr" || mix == "idem") { // only counters are approximate
			order, seg = []bool{false, true, true, false}, cfg.Duration/2
		}
		var exact, approx *eventsMixResult
		for _, isApprox := range order {
			k := keys
			if isApprox {
				k = approxKeys
			}
			var before benchCost
			var value int64
			if measure != nil {
				if before, value, err = measure(k); err != nil {
					return results, err
				}
			}
			c := cfg
			c.Duration = seg
			r := (&eventsRun{cfg: c, base: base, tls: tlsc, mix: mix, users: fmt.Sprintf("%s.%d", run, runs), keys: k}).run(ctx)
			runs++
			r.Approx = isApprox
			if measure != nil {
				after, v, err := measure(k)
				if err != nil {
					return results, err
				}
				r.Cost, r.Value, r.Total = after.sub(before), v-value, v
			}
			acc := &exact
			if isApprox {
				acc = &approx
			}
			if *acc == nil {
				*acc = r
			} else {
				(*acc).add(r)
			}
			if ctx.Err() != nil {
				break
			}
		}
		results = append(results, exact)
		if approx != nil {
			results = append(results, approx)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if sampler != nil {
		sampler.stop()
		sampler.summary(out)
		fmt.Fprintln(out)
	}
	const row = "%5v %9v %11v %7v %12v %12v %9v %9v %9v\n"
	fmt.Fprintf(out, row, "mix", "requests", "events", "errors", "events/s", "counted/s", "p50", "p99", "max")
	for _, r := range results {
		h := &r.Latency
		fmt.Fprintf(out, row, r.Label(), r.Requests, r.Events, r.Errors, fmt.Sprintf("%.0f", r.EventsPerSec()),
			fmt.Sprintf("%.0f", r.CountedPerSec()), ms(h.Quantile(0.5)), ms(h.Quantile(0.99)), ms(h.Max()))
	}
	if cfg.Approx > 0 {
		printApproxCosts(out, cfg, results)
	}
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(out, "mix %s: %d errors; first: %s\n", r.Mix, r.Errors, r.FirstError)
		}
	}
	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("bench events: interrupted: %w", err)
	}
	return results, nil
}

// startCPUProfile starts profiling this process into path; the returned
// function stops it and closes the file.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		return nil
	}, nil
}

// writeAllocProfile writes the allocation profile (every allocation since
// the process started, sampled) to path.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: alloc profile: %w", err)
	}
	err = pprof.Lookup("allocs").WriteTo(f, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: alloc profile: %w", err)
	}
	return nil
}

// eventsRun is one mix in progress.
type eventsRun struct {
	cfg    eventsBenchConfig
	base   string
	tls    *tls.Config // trusted for https; nil: the system's roots
	mix    string
	users  string   // prefix of this mix's user ids
	keys   []string // the counters or items, round-robin
	client *http.Client
}

// eventsWorker is one worker's tally, merged when the mix ends.
type eventsWorker struct {
	id   int
	body []byte
	resp bytes.Buffer
	seq  int64
	rnd  uint64 // xorshift state for --users
	trnd uint64 // xorshift state for --import's times
	key  int    // next of eventsRun.keys
}

func (er *eventsRun) run(ctx context.Context) *eventsMixResult {
	conc := er.cfg.Concurrency
	client, closeIdle := newLoadClient(conc, er.tls, er.cfg.KeepAlive)
	defer closeIdle()
	er.client = client
	if er.mix == "spend" {
		if err := er.grantAll(ctx); err != nil {
			return &eventsMixResult{Mix: er.mix, loadResult: loadResult{Errors: 1, FirstError: oneLine(err)}}
		}
	}
	lr := runLoad(ctx, loadConfig{Workers: conc, Duration: er.cfg.Duration}, func(worker int) loadOp {
		w := &eventsWorker{id: worker, rnd: uint64(worker)*0x9e3779b97f4a7c15 + 1, trnd: uint64(worker)*0xbf58476d1ce4e5b9 + 7,
			key: worker * len(er.keys) / conc}
		return func(ctx context.Context) (int64, int64, error) {
			er.fill(w)
			return er.post(ctx, w)
		}
	})
	return &eventsMixResult{Mix: er.mix, Events: lr.Units, loadResult: lr}
}

// work sends batches until the mix's time runs out or ctx ends.

// grantAll grants every key's budget region.MaxBy, in batches of grant
// events, before a spend mix.
func (er *eventsRun) grantAll(ctx context.Context) error {
	w := &eventsWorker{}
	for keys := er.keys; len(keys) > 0; {
		batch := keys[:min(len(keys), maxBenchEventsBatch)]
		keys = keys[len(batch):]
		b := w.body[:0]
		for _, k := range batch {
			b = append(b, `{"type":"grant","key":"`...)
			b = append(b, k...)
			b = append(b, `","by":`...)
			b = strconv.AppendInt(b, region.MaxBy, 10)
			b = append(b, "}\n"...)
		}
		w.body = b
		if _, _, err := er.postBody(ctx, w, "ndjson", len(batch)); err != nil {
			return fmt.Errorf("granting the budgets: %w", err)
		}
	}
	return nil
}

// appendFreshID appends an id no event of this run used before: the run's
// prefix, the worker and the worker's next sequence number.
func (er *eventsRun) appendFreshID(b []byte, w *eventsWorker) []byte {
	b = append(b, er.users...)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(w.id), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, w.seq, 10)
	w.seq++
	return b
}

// fill writes the worker's next request body.
func (er *eventsRun) fill(w *eventsWorker) {
	b := w.body[:0]
	array := er.cfg.Format == "array"
	nowMs := time.Now().UnixMilli()
	if array {
		b = append(b, '[')
	}
	for i := range er.cfg.Batch {
		if array && i > 0 {
			b = append(b, ',')
		}
		key := er.keys[w.key]
		if w.key++; w.key == len(er.keys) {
			w.key = 0
		}
		switch er.mix {
		case "spend":
			b = append(b, `{"type":"spend","key":"`...)
			b = append(b, key...)
			b = append(b, '"')
		case "incr":
			b = append(b, `{"type":"incr","key":"`...)
			b = append(b, key...)
			b = append(b, '"')
		case "idem":
			b = append(b, `{"type":"incr","key":"`...)
			b = append(b, key...)
			b = append(b, `","idempotency_key":"`...)
			b = er.appendFreshID(b, w)
			b = append(b, '"')
		case "like", "unique":
			if er.mix == "like" {
				b = append(b, `{"type":"like","item":"`...)
			} else {
				b = append(b, `{"type":"unique","key":"`...)
			}
			b = append(b, key...)
			b = append(b, `","user":"`...)
			if er.cfg.Users > 0 {
				w.rnd ^= w.rnd << 13
				w.rnd ^= w.rnd >> 7
				w.rnd ^= w.rnd << 17
				b = append(b, er.users...)
				b = append(b, ".u"...)
				b = strconv.AppendUint(b, w.rnd%uint64(er.cfg.Users), 10)
			} else {
				b = er.appendFreshID(b, w)
			}
			b = append(b, '"')
		}
		if span := er.cfg.Import.Milliseconds(); span > 0 {
			w.trnd ^= w.trnd << 13
			w.trnd ^= w.trnd >> 7
			w.trnd ^= w.trnd << 17
			b = append(b, `,"at":`...)
			b = strconv.AppendInt(b, nowMs-int64(w.trnd%uint64(span)), 10)
		}
		b = append(b, '}')
		if !array {
			b = append(b, '\n')
		}
	}
	if array {
		b = append(b, ']')
	}
	w.body = b
}

// post sends the worker's body and returns how many events the replica
// applied and how many of those were counted.
func (er *eventsRun) post(ctx context.Context, w *eventsWorker) (applied, counted int64, err error) {
	return er.postBody(ctx, w, er.cfg.Format, er.cfg.Batch)
}

// postBody is post of a body of n events in format (ndjson or array).
func (er *eventsRun) postBody(ctx context.Context, w *eventsWorker, format string, n int) (applied, counted int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, er.cfg.Timeout)
	defer cancel()
	path := "/v1/events"
	if er.cfg.Import > 0 && er.mix != "spend" { // the grants before a spend mix are live
		path = "/v1/admin/import"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, er.base+path, bytes.NewReader(w.body))
	if err != nil {
		return 0, 0, err
	}
	if format == "ndjson" {
		req.Header.Set("Content-Type", "application/x-ndjson")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	if er.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+er.cfg.Token)
	}
	resp, err := er.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	w.resp.Reset()
	if _, err := w.resp.ReadFrom(resp.Body); err != nil {
		return 0, 0, fmt.Errorf("POST /v1/events: reading the answer: %w", err)
	}
	body := w.resp.Bytes()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(body[:min(len(body), 512)]))
	}
	applied, err = jsonIntField(body, "applied")
	if err != nil {
		return 0, 0, err
	}
	rejected, err := jsonIntField(body, "rejected")
	if err != nil {
		return 0, 0, err
	}
	if rejected > 0 {
		return 0, 0, fmt.Errorf("POST /v1/events: %d of %d events rejected: %s", rejected, n,
			bytes.TrimSpace(body[:min(len(body), 512)]))
	}
	switch er.mix {
	case "incr", "spend":
		return applied, applied, nil
	case "idem": // a duplicate key would not count; every key here is new
		return applied, applied - int64(bytes.Count(body, []byte(`"duplicate":true`))), nil
	case "unique": // every id is added; "changed" counts the ones that raised a register
		return applied, applied, nil
	}
	return applied, int64(bytes.Count(body, []byte(`"changed":true`))), nil
}

// jsonIntField finds "name":<integer> at the top of a response body (the
// events answer puts its counts before the results) without decoding the
// whole answer.
func jsonIntField(body []byte, name string) (int64, error) {
	key := `"` + name + `":`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("POST /v1/events: no %q in the answer", name)
	}
	rest := body[i+len(key):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("POST /v1/events: bad %q in the answer: %w", name, err)
	}
	return n, nil
}

// measureNode reads what the in-process replica has written so far (its
// store's commits and WAL bytes, and from its /metrics the own entries
// handed to replication and the approximate increments written and
// skipped) and the sum of the counters keys.
func measureNode(ctx context.Context, n *benchServer, keys []string) (benchCost, int64, error) {
	ws, err := n.Store().WriteStats()
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	c := benchCost{Commits: ws.Commits, WALBytes: ws.WALBytes}
	hc, closeIdle := newControlClient(n.tls)
	defer closeIdle()
	cl, err := client.New(client.Config{BaseURL: n.base, HTTP: hc})
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	metrics, err := cl.Metrics(ctx)
	if err != nil {
		return benchCost{}, 0, fmt.Errorf("bench: %w", err)
	}
	c.Entries = metricValue(metrics, "tally_own_entries_changed_total", "")
	c.Written = metricValue(metrics, "tally_approx_increments_total", `outcome="written"`)
	c.Skipped = metricValue(metrics, "tally_approx_increments_total", `outcome="skipped"`)
	var sum int64
	for _, k := range keys {
		rd, err := n.Replica().Counters().Get(k)
		if err != nil {
			return benchCost{}, 0, fmt.Errorf("bench: read counter %s: %w", k, err)
		}
		sum += rd.Value
	}
	return c, sum, nil
}

// metricValue sums the samples of metric name (as client.Metrics names
// them) whose labels contain labels ("": any).
func metricValue(metrics map[string]float64, name, labels string) float64 {
	sum := 0.0
	for series, v := range metrics {
		rest, ok := strings.CutPrefix(series, name)
		if ok && (rest == "" || rest[0] == '{') && strings.Contains(rest, labels) {
			sum += v
		}
	}
	return sum
}

// startCounters adds n to every key, in batches of POST /v1/events.
func startCounters(ctx context.Context, base string, tlsc *tls.Config, token string, keys []string, n int64) error {
	hc, closeIdle := newControlClient(tlsc)
	defer closeIdle()
	c, err := client.New(client.Config{BaseURL: base, Token: token, HTTP: hc})
	if err != nil {
		return fmt.Errorf("bench: --start: %w", err)
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), maxBenchEventsBatch)]
		keys = keys[len(batch):]
		events := make([]client.Event, len(batch))
		for i, k := range batch {
			events[i] = client.Event{Type: client.EventIncr, Key: k, By: n}
		}
		res, err := c.Events(ctx, events)
		if err != nil {
			return fmt.Errorf("bench: --start: %w", err)
		}
		if res.Rejected > 0 {
			return fmt.Errorf("bench: --start: POST /v1/events: %d of %d events rejected", res.Rejected, len(batch))
		}
	}
	return nil
}
