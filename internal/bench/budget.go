package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/poll"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
)

// `tallyd bench budget` measures budget spends: at each level, that many
// clients each POST /v1/budgets/{key}/spend {"by":1} in a closed loop to
// one budget, granted afresh at the level's start. Besides spends/s and
// latency it checks the one thing a budget promises, that it is never
// overspent: after the level, once every region reads the same budget,
// the spends the clients were told succeeded must equal what the budget
// says was spent. scripts/bench-budget.sh runs it next to PostgreSQL's
// ways of spending a budget held in one row.

// budgetBenchConfig is what `tallyd bench budget` takes.
type budgetBenchConfig struct {
	// URLs are the replicas to load, e.g. one per region; client i sends
	// to URLs[i mod len]. The budget is granted at URLs[0]. Empty starts
	// Regions in process. Default empty.
	URLs []string
	// Regions is how many regions are started in process when URLs is
	// empty: 1 is a standalone replica; more is a local deployment as
	// `tallyd local` runs it (embedded NATS, one replica per region).
	// Default 1.
	Regions int
	// Clients lists the concurrency levels run one after another. Default
	// 1,16,64.
	Clients []int
	// Duration is how long each level starts new spends; spends in flight
	// at the end finish and count. With Exhaust it bounds the level, which
	// otherwise ends once every client was told budget_exhausted. Default
	// 10s (2m with Exhaust).
	Duration time.Duration
	// Budget is granted to each level's budget before it starts. Default
	// 1,000,000,000 (not used up in a run), 10,000 with Exhaust.
	Budget int64
	// Exhaust spends the budget to the end: each client stops at its
	// first budget_exhausted, and the level checks that exactly Budget
	// spends succeeded. Default false.
	Exhaust bool
	// Key prefixes the budget keys: <Key>.<run>.c<clients>. Default
	// "bench".
	Key string
	// Backoff is how long a client waits after rights_elsewhere before it
	// asks again. Default 2ms.
	Backoff time.Duration
	// Settle bounds the wait for every region to see the grant before a
	// level, and to read the same budget after it. Default 60s.
	Settle time.Duration
	// sharedConfig: Timeout (default 10s), Token, KeepAlive, and the
	// in-process replicas' Durability, LogLevel, TLS (one replica only)
	// and Limits.
	sharedConfig
	// CSV, if set, is a file that gets a header and then a row per level
	// (budgetCSVHeader), as each level ends. Default none.
	CSV string
	// System and Flavor fill the csv's first two columns. Default "tally"
	// and, from the deployment, "1-replica", "3-regions" or "2-urls".
	System, Flavor string
}

const (
	defaultBudget        = 1_000_000_000
	defaultExhaustBudget = 10_000
	// maxBudgetRegions bounds --regions: every region is a replica and a
	// NATS server in this process.
	maxBudgetRegions = 8
	// maxBudgetKey leaves room in a budget key for the run and level.
	maxBudgetKey = 96
)

func defaultBudgetBenchConfig() budgetBenchConfig {
	return budgetBenchConfig{
		Regions:      1,
		Clients:      []int{1, 16, 64},
		Duration:     10 * time.Second,
		Budget:       defaultBudget,
		Key:          "bench",
		Backoff:      2 * time.Millisecond,
		Settle:       60 * time.Second,
		sharedConfig: defaultSharedConfig(10 * time.Second),
		System:       "tally",
	}
}

// Validate reports every problem with c at once.
func (c budgetBenchConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, s := range c.URLs {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--url %q: want http://host:port", s)
		}
	}
	if c.Regions < 1 || c.Regions > maxBudgetRegions {
		bad("--regions %d: want 1..%d", c.Regions, maxBudgetRegions)
	}
	if len(c.Clients) == 0 {
		bad("--clients: want at least one level, e.g. 1,16,64")
	}
	for _, n := range c.Clients {
		if n < 1 || n > maxBenchConcurrency {
			bad("--clients %d: want 1..%d", n, maxBenchConcurrency)
		}
	}
	if c.Duration <= 0 || c.Duration > 24*time.Hour {
		bad("--duration %s: want more than 0 and at most 24h", c.Duration)
	}
	if c.Budget < 1 || c.Budget > region.MaxBy {
		bad("--budget %d: want 1..%d", c.Budget, int64(region.MaxBy))
	}
	if !crdt.ValidID(c.Key) || len(c.Key) > maxBudgetKey {
		bad("--key %q: want 1..%d bytes of [A-Za-z0-9_.:@-]", c.Key, maxBudgetKey)
	}
	if c.Backoff < 0 || c.Backoff > time.Second {
		bad("--backoff %s: want 0..1s", c.Backoff)
	}
	if c.Settle <= 0 {
		bad("--settle %s: want more than 0", c.Settle)
	}
	c.sharedConfig.validate(bad)
	if c.TLS && c.Regions > 1 {
		bad("--tls serves one in-process replica: not with --regions %d", c.Regions)
	}
	for _, f := range []struct{ name, v string }{{"system", c.System}, {"flavor", c.Flavor}} {
		if f.v == "" && f.name == "flavor" {
			continue // derived
		}
		if f.v == "" || strings.ContainsAny(f.v, ",\"\r\n") {
			bad("--%s %q: want a label without commas, quotes or newlines", f.name, f.v)
		}
	}
	return errors.Join(errs...)
}

// flavor is the csv's flavor column: --flavor, or what was loaded.
func (c budgetBenchConfig) flavor() string {
	switch {
	case c.Flavor != "":
		return c.Flavor
	case len(c.URLs) > 0:
		return fmt.Sprintf("%d-urls", len(c.URLs))
	case c.Regions == 1:
		return "1-replica"
	}
	return fmt.Sprintf("%d-regions", c.Regions)
}

// budgetRegions names n in-process regions: `tallyd local`'s, then r4 ...
func budgetRegions(n int) []string {
	names := deploy.DefaultConfig().Regions
	for i := len(names); i < n; i++ {
		names = append(names, "r"+strconv.Itoa(i+1))
	}
	return names[:n]
}

func parseBudgetBench(args []string, getenv func(string) string, help io.Writer) (budgetBenchConfig, error) {
	cfg := defaultBudgetBenchConfig()
	cfg.Token = getenv(envWriteToken)
	clients, urls := "1,16,64", ""
	fs := newFlagSet("bench budget", func(fs *flag.FlagSet) {
		fs.StringVar(&urls, "url", urls, "comma-separated base `URLs` of running replicas, clients round-robin over them, the budget granted at the first (default: start --regions in process)")
		fs.IntVar(&cfg.Regions, "regions", cfg.Regions, "`number` of regions started in process: 1 is a standalone replica, more a local deployment as 'tallyd local' runs it")
		fs.StringVar(&clients, "clients", clients, "comma-separated `levels`: clients each spending in a loop, run one after another")
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each level spends; with --exhaust the most it may take, 2m unless given")
		fs.Int64Var(&cfg.Budget, "budget", cfg.Budget, "`amount` granted to each level's budget; with --exhaust 10000 unless given")
		fs.BoolVar(&cfg.Exhaust, "exhaust", cfg.Exhaust, "spend each level's budget to the end: a level ends once every client was told budget_exhausted")
		fs.StringVar(&cfg.Key, "key", cfg.Key, "`prefix` of the budget keys: <prefix>.<run>.c<clients>")
		fs.DurationVar(&cfg.Backoff, "backoff", cfg.Backoff, "wait after a rights_elsewhere refusal before asking again")
		fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "longest wait for every region to see the grant, and to read the same budget after a level")
		cfg.sharedConfig.bind(fs, "replicas")
		fs.StringVar(&cfg.CSV, "csv", cfg.CSV, "also write a row per level to `file`: system,flavor,clients,spends_per_s,p50_ms,p99_ms,overspend,refused")
		fs.StringVar(&cfg.System, "system", cfg.System, "the csv's system `label`")
		fs.StringVar(&cfg.Flavor, "flavor", cfg.Flavor, "the csv's flavor `label` (default 1-replica, <n>-regions or <n>-urls)")
	})
	if err := parseBenchFlags(fs, args, help); err != nil {
		return cfg, err
	}
	set := flagsSet(fs)
	if cfg.Exhaust && !set["budget"] {
		cfg.Budget = defaultExhaustBudget
	}
	if cfg.Exhaust && !set["duration"] {
		cfg.Duration = 2 * time.Minute
	}
	var errs []error
	var err error
	if cfg.Clients, err = parseInts(clients); err != nil {
		errs = append(errs, fmt.Errorf("--clients: %w", err))
	}
	for _, u := range strings.Split(urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			cfg.URLs = append(cfg.URLs, strings.TrimSuffix(u, "/"))
		}
	}
	if set["url"] && len(cfg.URLs) == 0 {
		errs = append(errs, errors.New("--url: want at least one URL"))
	}
	if len(cfg.URLs) > 0 {
		// The in-process settings would be silently ignored.
		errs = append(errs, urlOnly(set, append([]string{"regions"}, inProcessFlags...))...)
	}
	if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
		return cfg, usagef("bench budget: %s", oneLine(err))
	}
	return cfg, nil
}

// benchBudget runs `tallyd bench budget`.
func (c *cli) benchBudget(ctx context.Context, args []string) error {
	cfg, err := parseBudgetBench(args, c.getenv, c.stdout)
	if err != nil {
		return err
	}
	results, err := runBudgetBench(ctx, cfg, c.env, c.stdout, c.stderr)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range results {
		if over := r.Overspend(); over != 0 {
			errs = append(errs, fmt.Errorf("%d clients: overspent by %d", r.Clients, over))
		}
		if cfg.Exhaust && r.Unspent() != 0 {
			errs = append(errs, fmt.Errorf("%d clients: %d of the budget left unspent", r.Clients, r.Unspent()))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench budget: %s", oneLine(err))
	}
	return nil
}

// budgetTarget is what a run loads: the base URLs and how to describe
// and stop them.
type budgetTarget struct {
	urls  []string
	tls   *tls.Config // trusted for https; nil: the system's roots
	about string
	close func() error
}

// startBudgetTarget starts what cfg asks for, or takes cfg.URLs.
func startBudgetTarget(ctx context.Context, cfg budgetBenchConfig, env Env, logOut io.Writer) (*budgetTarget, error) {
	if len(cfg.URLs) > 0 {
		return &budgetTarget{urls: cfg.URLs, about: strings.Join(cfg.URLs, ", "), close: func() error { return nil }}, nil
	}
	log := cfg.logger(logOut)
	if cfg.Regions == 1 {
		n, err := startBenchReplica(ctx, benchReplica{Durability: cfg.Durability, EventLog: true, Windows: node.DefaultConfig().Windows,
			TLS: cfg.TLS, Limits: cfg.Limits}, log)
		if err != nil {
			return nil, err
		}
		return &budgetTarget{
			urls:  []string{n.base},
			tls:   n.tls,
			about: fmt.Sprintf("in-process replica at %s (durability %s%s, data %s)", n.base, cfg.Durability, cfg.edge(), n.dir),
			close: func() error { return n.stop(ctx) },
		}, nil
	}
	regions := budgetRegions(cfg.Regions)
	d, err := startBenchDeployment(ctx, benchDeploy{Regions: regions, Durability: cfg.Durability, LogLevel: cfg.LogLevel, Limits: cfg.Limits}, env, log)
	if err != nil {
		return nil, err
	}
	var where []string
	for i, r := range regions {
		where = append(where, r+" "+d.urls[i])
	}
	return &budgetTarget{
		urls: d.urls,
		about: fmt.Sprintf("in-process regions %s (embedded NATS, durability %s%s, data %s)",
			strings.Join(where, ", "), cfg.Durability, cfg.edge(), d.dir),
		close: func() error { return d.Close(ctx) },
	}, nil
}

// runBudgetBench runs every level, reporting each to out (and cfg.CSV)
// as it ends. logOut gets the in-process replicas' logs.
func runBudgetBench(ctx context.Context, cfg budgetBenchConfig, env Env, out, logOut io.Writer) (_ []*budgetLevelResult, err error) {
	t, err := startBudgetTarget(ctx, cfg, env, logOut)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := t.close(); cerr != nil {
			fmt.Fprintf(logOut, "bench budget: stopping what it started: %v\n", cerr)
		}
	}()
	for _, u := range t.urls {
		if err := waitReady(ctx, u, t.tls, cfg.Settle); err != nil {
			return nil, err
		}
	}
	rep, err := newBudgetReporter(cfg, t.about, out)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rep.close()) }()
	if err := rep.begin(); err != nil {
		return nil, err
	}
	client, closeIdle := newLoadClient(max(maxInts(cfg.Clients), 4), t.tls, cfg.KeepAlive)
	defer closeIdle()
	api := &budgetAPI{client: client, token: cfg.Token, timeout: cfg.Timeout}
	run := newRunID()
	var results []*budgetLevelResult
	for _, n := range cfg.Clients {
		lv := &budgetLevel{cfg: cfg, api: api, urls: t.urls, clients: n, key: fmt.Sprintf("%s.%s.c%d", cfg.Key, run, n)}
		r, err := lv.run(ctx)
		if r != nil {
			results = append(results, r)
			if rerr := rep.level(r); rerr != nil {
				return results, rerr
			}
		}
		if err != nil {
			return results, fmt.Errorf("bench budget: %d clients: %w", n, err)
		}
	}
	return results, rep.end(results)
}

func maxInts(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// waitReady polls base's /readyz until it answers 200, for up to d.
func waitReady(ctx context.Context, base string, tlsc *tls.Config, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return poll.Until(wctx, 50*time.Millisecond, func() error { return checkReady(ctx, base, tlsc) })
}

// budgetState is a budget as one region reads it.
type budgetState struct {
	Granted   int64 `json:"granted"`
	Spent     int64 `json:"spent"`
	Remaining int64 `json:"remaining"`
	// Rights is where the region believes the rights lie. Two regions
	// can read the same totals while each misses the other's latest
	// spends; they agree only once the rights agree too.
	Rights       map[string]int64 `json:"rights"`
	Unreconciled int64            `json:"unreconciled"`
}

// used is how much of the budget is gone as this region sees it.
func (s budgetState) used() int64 { return s.Granted - s.Remaining }

// budgetsAgree reports whether every region reads the same budget.
func budgetsAgree(states []budgetState) bool {
	if len(states) == 0 {
		return false
	}
	ref := states[0]
	for _, s := range states {
		if s.Granted != ref.Granted || s.Spent != ref.Spent || s.Remaining != ref.Remaining ||
			s.Unreconciled != 0 || !maps.Equal(s.Rights, ref.Rights) {
			return false
		}
	}
	return true
}

// overspend is how many more spends succeeded than the budget went down
// by from start to end: positive means spends were acknowledged that the
// budget does not account for (lost updates), negative that the budget
// went down for spends nobody was told of (requests that failed without
// an answer, or another client).
func overspend(succeeded int64, start, end budgetState) int64 {
	return succeeded - (end.used() - start.used())
}

// budgetAPI sends the budget routes.
type budgetAPI struct {
	client  *http.Client
	token   string
	timeout time.Duration
}

// do sends one request with body and returns the status and the answer.
func (a *budgetAPI) do(ctx context.Context, method, u string, body []byte, buf *bytes.Buffer) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, 1<<20)); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	return resp.StatusCode, nil
}

func budgetURL(base, key, op string) string {
	u := base + "/v1/budgets/" + key
	if op != "" {
		u += "/" + op
	}
	return u
}

// at is a client of the region at base.
func (a *budgetAPI) at(base string) (*client.Client, error) {
	return client.New(client.Config{BaseURL: base, Token: a.token, HTTP: a.client})
}

// grant grants by to key at base.
func (a *budgetAPI) grant(ctx context.Context, base, key string, by int64) error {
	c, err := a.at(base)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	_, err = c.Grant(ctx, key, by)
	return err
}

// errNoBudget is a GET of a budget the region does not know (yet).
var errNoBudget = errors.New("budget not found")

// get reads key at base.
func (a *budgetAPI) get(ctx context.Context, base, key string) (budgetState, error) {
	c, err := a.at(base)
	if err != nil {
		return budgetState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	b, err := c.Budget(ctx, key)
	switch {
	case client.StatusCode(err) == http.StatusNotFound:
		return budgetState{}, fmt.Errorf("%w: %w", errNoBudget, err)
	case err != nil:
		return budgetState{}, err
	}
	return budgetState{Granted: b.Granted, Spent: b.Spent, Remaining: b.Remaining, Rights: b.Rights, Unreconciled: int64(b.Unreconciled)}, nil
}

// spendOutcome is what one spend request came to.
type spendOutcome int

const (
	spendFailed    spendOutcome = iota // no answer, or one that is not the spec's
	spendOK                            // 200, spent
	spendDuplicate                     // 200 with "duplicate":true
	spendExhausted                     // 409 budget_exhausted
	spendElsewhere                     // 409 rights_elsewhere
	spendRefused                       // 409 with another code
)

// budgetRefusal is a 409's body.
type budgetRefusal struct {
	Code string `json:"code"`
}

// classifySpend maps a spend's answer to its outcome.
func classifySpend(code int, body []byte) (spendOutcome, error) {
	switch code {
	case http.StatusOK:
		// A substring test rather than a JSON decode, as for likes: the
		// generator shares the server's cores.
		if bytes.Contains(body, []byte(`"duplicate":true`)) {
			return spendDuplicate, nil
		}
		return spendOK, nil
	case http.StatusConflict:
		var r budgetRefusal
		if err := json.Unmarshal(body, &r); err != nil {
			return spendFailed, fmt.Errorf("409 with a body that is not JSON: %q", bytes.TrimSpace(body))
		}
		switch r.Code {
		case "budget_exhausted":
			return spendExhausted, nil
		case "rights_elsewhere":
			return spendElsewhere, nil
		}
		return spendRefused, fmt.Errorf("409 with code %q: %s", r.Code, bytes.TrimSpace(body))
	}
	return spendFailed, fmt.Errorf("%d %s: %s", code, http.StatusText(code), bytes.TrimSpace(body))
}

var spendBody = []byte(`{"by":1}`)

// spend spends 1 of key at base.
func (a *budgetAPI) spend(ctx context.Context, u string, buf *bytes.Buffer) (spendOutcome, error) {
	code, err := a.do(ctx, http.MethodPost, u, spendBody, buf)
	if err != nil {
		return spendFailed, err
	}
	o, err := classifySpend(code, buf.Bytes())
	if err != nil {
		err = fmt.Errorf("POST %s: %w", u, err)
	}
	return o, err
}

// budgetLevel is one level in progress.
type budgetLevel struct {
	cfg     budgetBenchConfig
	api     *budgetAPI
	urls    []string
	clients int
	key     string
}

// budgetCounts is what clients were told.
type budgetCounts struct {
	Spent, Duplicates    int64
	Exhausted, Elsewhere int64 // 409s by code
	OtherRefused, Errors int64 // 409s with another code; no or other answers
	Abandoned            int64 // spends given up at the end, after rights_elsewhere
	FirstError           string
	ClientsExhausted     int // clients that ended on budget_exhausted
	Latency              histogram
	firstErr             error
	pending              time.Time // first attempt of the spend being retried
}

func (c *budgetCounts) add(o *budgetCounts) {
	c.Spent += o.Spent
	c.Duplicates += o.Duplicates
	c.Exhausted += o.Exhausted
	c.Elsewhere += o.Elsewhere
	c.OtherRefused += o.OtherRefused
	c.Errors += o.Errors
	c.Abandoned += o.Abandoned
	c.ClientsExhausted += o.ClientsExhausted
	if c.FirstError == "" && o.firstErr != nil {
		c.FirstError = oneLine(o.firstErr)
	}
	c.Latency.Merge(&o.Latency)
}

// budgetLevelResult is one level's outcome.
type budgetLevelResult struct {
	Clients int
	Key     string
	budgetCounts
	// Elapsed is from the first spend's start to the last one's end.
	Elapsed time.Duration
	// Start and End are the budget as every region read it before the
	// first spend and once they agreed after the last; Settled is how long
	// that agreement took after the last spend.
	Start, End budgetState
	Settled    time.Duration
}

// Overspend is how far the spends acknowledged exceed what the budget
// went down by: it must be 0.
func (r *budgetLevelResult) Overspend() int64 { return overspend(r.Spent, r.Start, r.End) }

// Refused counts the 409 answers.
func (r *budgetLevelResult) Refused() int64 { return r.Exhausted + r.Elsewhere + r.OtherRefused }

// Unspent is what was left of the budget after the level.
func (r *budgetLevelResult) Unspent() int64 { return r.End.Remaining }

// SpendsPerSec is the rate of successful spends.
func (r *budgetLevelResult) SpendsPerSec() float64 { return perSec(r.Spent, r.Elapsed) }

// run grants the level's budget, waits for every region to see it, lets
// the clients spend, and waits for the regions to agree on the result.
func (lv *budgetLevel) run(ctx context.Context) (*budgetLevelResult, error) {
	if err := lv.api.grant(ctx, lv.urls[0], lv.key, lv.cfg.Budget); err != nil {
		return nil, err
	}
	start, _, err := lv.settle(ctx, func(s budgetState) bool { return s.Granted >= lv.cfg.Budget })
	if err != nil {
		return nil, fmt.Errorf("waiting for every region to see the grant: %w", err)
	}
	r := &budgetLevelResult{Clients: lv.clients, Key: lv.key, Start: start}
	t0 := time.Now()
	r.budgetCounts = lv.spendAll(ctx)
	r.Elapsed = time.Since(t0)
	if err := ctx.Err(); err != nil {
		return r, err
	}
	r.End, r.Settled, err = lv.settle(ctx, func(budgetState) bool { return true })
	if err != nil {
		return r, fmt.Errorf("waiting for the regions to agree: %w", err)
	}
	return r, nil
}

// settle polls key in every region until all read the same budget and
// it satisfies ok, for up to cfg.Settle. A region that does not know the
// budget yet is waited for.
func (lv *budgetLevel) settle(ctx context.Context, ok func(budgetState) bool) (budgetState, time.Duration, error) {
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, lv.cfg.Settle)
	defer cancel()
	states := make([]budgetState, len(lv.urls))
	err := poll.Until(wctx, healPollEvery, func() error {
		var lastErr error
		for i, u := range lv.urls {
			s, err := lv.api.get(ctx, u, lv.key)
			if err != nil && !errors.Is(err, errNoBudget) {
				return poll.Permanent(err)
			}
			lastErr = err
			states[i] = s
		}
		if lastErr == nil && budgetsAgree(states) && ok(states[0]) {
			return nil
		}
		return fmt.Errorf("the regions read %+v (%v)", states, lastErr)
	})
	if err != nil {
		return budgetState{}, 0, fmt.Errorf("settle within %s: %w", lv.cfg.Settle, err)
	}
	return states[0], time.Since(t0), nil
}

// spendAll runs the clients until cfg.Duration has passed or each was
// told budget_exhausted.
func (lv *budgetLevel) spendAll(ctx context.Context) budgetCounts {
	stopAt := time.Now().Add(lv.cfg.Duration)
	workers := make([]*budgetCounts, lv.clients)
	var wg sync.WaitGroup
	for i := range workers {
		w := &budgetCounts{}
		workers[i] = w
		u := budgetURL(lv.urls[i%len(lv.urls)], lv.key, "spend")
		wg.Go(func() { lv.client(ctx, u, stopAt, w) })
	}
	wg.Wait()
	var out budgetCounts
	for _, w := range workers {
		out.add(w)
	}
	return out
}

// client spends 1 at a time at u until stopAt, retrying a spend after
// rights_elsewhere. A spend's latency runs from its first attempt to the
// answer that spent it.
func (lv *budgetLevel) client(ctx context.Context, u string, stopAt time.Time, w *budgetCounts) {
	var buf bytes.Buffer
	for ctx.Err() == nil && time.Now().Before(stopAt) {
		if w.pending.IsZero() {
			w.pending = time.Now()
		}
		o, err := lv.api.spend(ctx, u, &buf)
		if err != nil && ctx.Err() != nil {
			break // interrupted, not a failure of the server
		}
		if !w.record(o, err) {
			return
		}
		if o == spendElsewhere && lv.cfg.Backoff > 0 {
			if sleepCtx(ctx, lv.cfg.Backoff) != nil {
				break
			}
		}
	}
	if !w.pending.IsZero() {
		w.Abandoned++ // a spend still being retried when the level ended
	}
}

// record counts one answer and reports whether the client goes on.
func (w *budgetCounts) record(o spendOutcome, err error) bool {
	switch o {
	case spendOK, spendDuplicate:
		if o == spendOK {
			w.Spent++
		} else {
			w.Duplicates++
		}
		w.Latency.Record(time.Since(w.pending))
		w.pending = time.Time{}
	case spendElsewhere:
		w.Elsewhere++ // retried: pending stays
	case spendExhausted:
		w.Exhausted++
		w.ClientsExhausted++
		w.pending = time.Time{}
		return false
	default:
		if o == spendRefused {
			w.OtherRefused++
		} else {
			w.Errors++
		}
		if w.firstErr == nil {
			w.firstErr = err
		}
		w.pending = time.Time{}
	}
	return true
}
