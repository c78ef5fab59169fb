package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
)

func budgetOp(id int64, kind OpKind, region, key string, by int64, out Outcome) Op {
	o := Op{ID: id, Kind: kind, Region: region, Key: key, By: by, Outcome: out, Attempts: 1}
	if out == OutcomeOK || out == OutcomeTimeout {
		o.Applications = 1
	}
	return o
}

func keyedOp(id int64, kind OpKind, region, key string, by int64, out Outcome) Op {
	o := budgetOp(id, kind, region, key, by, out)
	o.keyed, o.Idem = true, fmt.Sprintf("op-%d", id)
	return o
}

func cashbackOp(id int64, region, merchant, user string, by int64, out Outcome) Op {
	o := keyedOp(id, OpCashback, region, cashbackPool, by, out)
	o.Merchant, o.User = merchant, user
	return o
}

var (
	testBudgets   = []string{"bud:1", "m:1", "m:2", cashbackPool}
	testMerchants = []string{"m:1", "m:2"}
	testUsers     = []string{"cu:1", "cu:2"}
)

// budgetHistory is a history whose model is computed by hand below.
func budgetHistory() []Op {
	refused := budgetOp(5, OpSpend, "us", "bud:1", 3, OutcomeRefused)
	refused.Reason = "budget_exhausted"
	twice := keyedOp(4, OpSpend, "eu", "bud:1", 2, OutcomeOK)
	twice.Retry, twice.Applications = "ap", 2 // both regions applied it during a cut
	return []Op{
		budgetOp(1, OpGrant, "us", "bud:1", 6, OutcomeOK),
		budgetOp(2, OpGrant, "eu", "bud:1", 4, OutcomeTimeout), // maybe granted
		budgetOp(3, OpGrant, "ap", "bud:1", 5, OutcomeFailed),  // not granted
		twice,
		refused,
		budgetOp(6, OpSpend, "ap", "bud:1", 1, OutcomeTimeout), // maybe spent
		budgetOp(7, OpSpend, "us", "bud:1", 1, OutcomeOK),
		budgetOp(8, OpGrant, "us", cashbackPool, 6, OutcomeOK),
		budgetOp(12, OpGrant, "us", "m:1", 4, OutcomeOK),
		budgetOp(13, OpGrant, "eu", "m:2", 3, OutcomeOK),
		cashbackOp(9, "us", "m:1", "cu:1", 2, OutcomeOK),
		cashbackOp(10, "eu", "m:2", "cu:1", 3, OutcomeTimeout), // maybe
		cashbackOp(11, "ap", "m:1", "cu:2", 1, OutcomeRefused),
	}
}

func TestBudgetModelBounds(t *testing.T) {
	m, vs := buildBudgetModel(budgetHistory(), testBudgets, testMerchants, testUsers)
	if len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	b := *m.Budgets["bud:1"]
	if want := (budgetBounds{Granted: 6, MaybeGranted: 4, Spent: 3, MaybeSpent: 1, Refunds: 2}); b != want {
		t.Errorf("bud:1: %+v, want %+v", b, want)
	}
	if r := b.remaining(); r != (bounds{Lo: 2, Hi: 7}) {
		t.Errorf("bud:1 remaining %v, want 2 to 7", r)
	}
	p := *m.Budgets[cashbackPool]
	if want := (budgetBounds{Granted: 6, Spent: 2, MaybeSpent: 3}); p != want {
		t.Errorf("pool: %+v, want %+v", p, want)
	}
	// A cashback spends its merchant's balance as it spends the pool.
	if m1, m2 := *m.Budgets["m:1"], *m.Budgets["m:2"]; m1 != (budgetBounds{Granted: 4, Spent: 2}) || m2 != (budgetBounds{Granted: 3, MaybeSpent: 3}) {
		t.Errorf("merchants: %+v %+v", m1, m2)
	}
	for c, want := range map[string]bounds{"cu:1": {2, 5}, "cu:2": {0, 0}} {
		if got := m.Balances[c]; got != want {
			t.Errorf("%s: %v, want %v", c, got, want)
		}
	}
	if len(m.Balances) != 2 {
		t.Errorf("balances %v: the merchants' are budgets", m.Balances)
	}
	// A budget operation answered with another 4xx is a violation.
	bad := keyedOp(14, OpSpend, "us", "bud:1", 1, OutcomeFailed)
	bad.Reason = "http 409 idempotency_mismatch"
	if _, vs := buildBudgetModel(append(budgetHistory(), bad), testBudgets, testMerchants, testUsers); len(vs) != 1 || vs[0].Kind != KindBudgets || vs[0].Op != 14 {
		t.Errorf("violations: %v", vs)
	}
}

// budgetsEverywhere is a state where every region reads the budgets and
// balances alike: bud:1 with granted g and spent s (rights all at us-1),
// the pool with 6 granted and spent 2 + cu:1's extra credit, the merchants
// m:1 (4 granted, 2 spent) and m:2 (3 granted, extra spent), cu:1 2 +
// extra.
func budgetsEverywhere(g, s, extra int64) budgetState {
	st := budgetState{Regions: regions3, Budgets: map[string]map[string]api.Budget{}, Balances: map[string]map[string]reading{}}
	for _, r := range regions3 {
		st.Budgets[r] = map[string]api.Budget{
			"bud:1":      {Key: "bud:1", Remaining: g - s, Granted: g, Spent: s, Rights: map[string]int64{"us-1": g - s, "eu-1": 0}},
			cashbackPool: {Key: cashbackPool, Remaining: 4 - extra, Granted: 6, Spent: 2 + extra, Rights: map[string]int64{"us-1": 4 - extra}},
			"m:1":        {Key: "m:1", Remaining: 2, Granted: 4, Spent: 2, Rights: map[string]int64{"us-1": 2}},
			"m:2":        {Key: "m:2", Remaining: 3 - extra, Granted: 3, Spent: extra, Rights: map[string]int64{"eu-1": 3 - extra}},
		}
		st.Balances[r] = map[string]reading{"cu:1": {Value: 2 + extra}, "cu:2": {}}
	}
	return st
}

func TestCheckBudgets(t *testing.T) {
	m, _ := buildBudgetModel(budgetHistory(), testBudgets, testMerchants, testUsers)
	// Passing states: the maybes either way, and the refund of op 4's
	// second application raising granted and spent alike.
	for _, st := range []budgetState{
		budgetsEverywhere(6, 3, 0),      // no maybe applied
		budgetsEverywhere(6+2, 3+2, 0),  // op 4 refunded
		budgetsEverywhere(10+2, 4+2, 3), // every maybe applied
	} {
		if vs, n := checkBudgets(m, st, testBudgets); len(vs) != 0 || n.Keys != 4 || n.Reads != 12+6 {
			t.Fatalf("%+v: %v (%+v)", st.Budgets["us"], vs, n)
		}
	}
	cases := []struct {
		name   string
		mutate func(*budgetState)
		key    string // of the expected violation
		detail string
	}{
		{"overspent", func(st *budgetState) {
			for _, r := range regions3 {
				st.Budgets[r]["bud:1"] = api.Budget{Remaining: -1, Granted: 6, Spent: 7, Rights: map[string]int64{"us-1": 1, "eu-1": -2}}
			}
		}, "budget/bud:1", "below the bound 0"},
		{"disagree", func(st *budgetState) {
			b := st.Budgets["ap"]["bud:1"]
			b.Rights = map[string]int64{"us-1": 1, "eu-1": 2}
			st.Budgets["ap"]["bud:1"] = b
		}, "budget/bud:1", "the regions disagree"},
		{"unreconciled", func(st *budgetState) {
			b := st.Budgets["eu"]["bud:1"]
			b.Unreconciled = 1
			st.Budgets["eu"]["bud:1"] = b
		}, "budget/bud:1", "unreconciled 1"},
		{"rights", func(st *budgetState) {
			for _, r := range regions3 {
				st.Budgets[r]["bud:1"].Rights["eu-1"] = 1
			}
		}, "budget/bud:1", "add up to 4"},
		{"lost spend", func(st *budgetState) {
			*st = budgetsEverywhere(10, 1, 0) // remaining 9 > 7
		}, "budget/bud:1", "an acknowledged spend is missing"},
		{"double spend", func(st *budgetState) {
			*st = budgetsEverywhere(6, 5, 0) // op 4 twice, not refunded: remaining 1 < 2
		}, "budget/bud:1", "counted twice"},
		{"lost grant", func(st *budgetState) {
			*st = budgetsEverywhere(5, 3, 0)
		}, "budget/bud:1", "granted 5"},
		{"not conserved", func(st *budgetState) {
			b := st.Budgets["eu"]["m:1"]
			b.Remaining, b.Rights = 3, map[string]int64{"us-1": 3}
			st.Budgets["eu"]["m:1"] = b
		}, "cashback/cb:pool", "did not move its amount whole"},
		{"merchant overdrawn", func(st *budgetState) {
			for _, r := range regions3 {
				st.Budgets[r]["m:1"] = api.Budget{Key: "m:1", Remaining: -1, Granted: 4, Spent: 5, Rights: map[string]int64{"us-1": -1}}
			}
		}, "budget/m:1", "below the bound 0"},
		{"credited twice", func(st *budgetState) {
			for _, r := range regions3 {
				st.Balances[r]["cu:1"] = reading{Value: 6}
			}
		}, "counter/cu:1", "each purchase once"},
		{"credits not the pool's", func(st *budgetState) {
			for _, r := range regions3 {
				b := st.Budgets[r][cashbackPool]
				b.Remaining, b.Spent, b.Rights = 3, 3, map[string]int64{"us-1": 3}
				st.Budgets[r][cashbackPool] = b
			}
		}, "cashback/cb:pool", "credits and the pool's spending differ"},
		{"approx balance", func(st *budgetState) {
			st.Balances["us"]["cu:2"] = reading{Approx: true}
		}, "counter/cu:2", "approx:true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := budgetsEverywhere(6, 3, 0)
			tc.mutate(&st)
			vs, _ := checkBudgets(m, st, testBudgets)
			found := slices.ContainsFunc(vs, func(v Violation) bool {
				return v.Kind == KindBudgets && (tc.key == "" || v.Key == tc.key) && strings.Contains(v.Detail, tc.detail)
			})
			if !found {
				t.Fatalf("no %q violation on %q: %v", tc.detail, tc.key, vs)
			}
		})
	}
}

func TestBudgetViolationOfAView(t *testing.T) {
	for _, tc := range []struct {
		b    api.Budget
		want string
	}{
		{api.Budget{Remaining: 0, Granted: 3, Spent: 3}, ""},
		{api.Budget{Remaining: 2, Granted: 5, Spent: 3, LocalRights: 2}, ""},
		{api.Budget{Remaining: -3, Granted: 0, Spent: 3}, "below the bound 0"},
		{api.Budget{Remaining: 4, Granted: 4, LocalRights: -1}, "did not hold"},
	} {
		if got := budgetViolation(tc.b); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.b, got, tc.want)
		}
	}
}

// The planner's budget operations name the workload's budgets and
// balances, with valid ids and amounts; only keyed ones fail over.
func TestPlannerBudgetOps(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight = 0, 0, 0, 0, 1
	cfg.BlockWeight, cfg.ToggleWeight, cfg.LateWeight = 0, 0, 0
	p := newPlanner(cfg, 0)
	merchants, users := cashbackCounters(cfg)
	kinds := map[string]int{}
	for range 600 {
		ops := p.next().ops
		if len(ops) != 1 {
			t.Fatalf("%d ops", len(ops))
		}
		o := ops[0]
		if o.Kind == OpHandoff {
			kinds["handoff"]++
			if !slices.Contains(cfg.Regions, o.Region) || o.User == replicaID(o.Region) ||
				!slices.ContainsFunc(cfg.Regions, func(r string) bool { return replicaID(r) == o.User }) ||
				o.RetryAfter < 200*time.Millisecond || o.RetryAfter >= time.Second {
				t.Fatalf("handoff %+v", o)
			}
			continue
		}
		if !slices.Contains(budgetIDs(cfg), o.Key) || !crdt.ValidID(o.Key) || !slices.Contains(cfg.Regions, o.Region) {
			t.Fatalf("op %+v", o)
		}
		switch o.Kind {
		case OpGrant:
			kinds["grant"]++
			if slices.Contains(merchants, o.Key) {
				kinds["merchant grant"]++
			}
			if o.By < minGrant || o.By > maxGrant || o.keyed {
				t.Fatalf("grant %+v", o)
			}
		case OpSpend, OpCashback:
			if o.By < 1 || o.By > maxBudgetSpend {
				t.Fatalf("%s %+v", o.Kind, o)
			}
			if o.Kind == OpCashback {
				kinds["cashback"]++
				if !o.keyed || o.Key != cashbackPool || !slices.Contains(merchants, o.Merchant) || !slices.Contains(users, o.User) {
					t.Fatalf("cashback %+v", o)
				}
			} else if o.keyed {
				kinds["keyed spend"]++
			} else {
				kinds["spend"]++
			}
		default:
			t.Fatalf("op %+v", o)
		}
		switch {
		case o.Retry != "" && (!o.keyed || o.Retry == o.Region):
			t.Fatalf("retry of %+v", o)
		case o.Retry != "":
			kinds["retry"]++
		}
	}
	for _, k := range []string{"grant", "cashback", "keyed spend", "spend", "retry"} {
		if kinds[k] < 50 {
			t.Errorf("%d of %s in 600: %v", kinds[k], k, kinds)
		}
	}
	if kinds["merchant grant"] < 10 {
		t.Errorf("%d grants to the merchants' balances in 600: %v", kinds["merchant grant"], kinds)
	}
	if kinds["handoff"] < 5 {
		t.Errorf("%d handoffs in 600: %v", kinds["handoff"], kinds)
	}
}

// fakeBudgetRegion answers budget writes with the answers queued for it,
// one per request ("ok", "dup", "rights_elsewhere", "budget_exhausted",
// "hang" or "400"), "ok" once the queue is empty.
type fakeBudgetRegion struct {
	mu      sync.Mutex
	answers []string
	bodies  []map[string]any
}

func (f *fakeBudgetRegion) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	a := "ok"
	if len(f.answers) > 0 {
		a, f.answers = f.answers[0], f.answers[1:]
	}
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch a {
	case "hang":
		<-r.Context().Done()
	case "rights_elsewhere", "budget_exhausted":
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(api.BudgetRefused{Error: "no", Code: a, Remaining: 3})
	case "400":
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(api.Error{Error: "bad", Code: "bad_request"})
	default:
		_ = json.NewEncoder(w).Encode(api.BudgetSpend{Remaining: 7, Duplicate: a == "dup"})
	}
}

func TestExecBudgetOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		keyed        bool
		retry        bool
		us, eu       []string
		out          Outcome
		reason       string
		attempts     int
		applications int
	}{
		{name: "ok", us: []string{"ok"}, out: OutcomeOK, attempts: 1, applications: 1},
		{name: "rights retried", us: []string{"rights_elsewhere", "rights_elsewhere", "ok"}, out: OutcomeOK, attempts: 3, applications: 1},
		{name: "rights gone", us: []string{"rights_elsewhere", "rights_elsewhere", "rights_elsewhere"}, out: OutcomeRefused, reason: "rights_elsewhere", attempts: 3},
		{name: "exhausted", us: []string{"budget_exhausted"}, out: OutcomeRefused, reason: "budget_exhausted", attempts: 1},
		{name: "unkeyed lost", us: []string{"hang"}, out: OutcomeTimeout, attempts: 1, applications: 1},
		{name: "keyed lost, ok elsewhere", keyed: true, us: []string{"hang"}, eu: []string{"ok"}, out: OutcomeOK, attempts: 2, applications: 2},
		{name: "keyed lost, dup elsewhere", keyed: true, us: []string{"hang"}, eu: []string{"dup"}, out: OutcomeOK, attempts: 2, applications: 1},
		{name: "keyed lost, refused elsewhere", keyed: true, us: []string{"hang"}, eu: []string{"budget_exhausted"}, out: OutcomeTimeout, attempts: 2, applications: 1},
		{name: "failover of an ok", keyed: true, retry: true, us: []string{"ok"}, eu: []string{"budget_exhausted"}, out: OutcomeOK, attempts: 2, applications: 1},
		{name: "failover of a refusal", keyed: true, retry: true, us: []string{"budget_exhausted"}, eu: []string{"ok"}, out: OutcomeOK, attempts: 2, applications: 1},
		{name: "bad request", us: []string{"400"}, out: OutcomeFailed, reason: "http 400 bad_request", attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakes := map[string]*fakeBudgetRegion{"us": {answers: tc.us}, "eu": {answers: tc.eu}}
			cfg := DefaultConfig().withDefaults()
			cfg.Regions, cfg.ClientTimeout = []string{"us", "eu"}, 200*time.Millisecond
			w := &workload{cfg: cfg, clients: map[string][]*replicaClient{}}
			for r, f := range fakes {
				srv := httptest.NewServer(f)
				t.Cleanup(srv.Close)
				w.clients[r] = []*replicaClient{{replica: replicaID(r), client: newClient(r, strings.TrimPrefix(srv.URL, "http://"), 2)}}
			}
			o := &Op{ID: 1, Kind: OpSpend, Region: "us", Key: "bud:1", By: 2, keyed: tc.keyed}
			if tc.keyed {
				o.Idem = "op-1"
			}
			if tc.retry {
				o.Retry = "eu"
			}
			w.execBudget(context.Background(), o)
			if o.Outcome != tc.out || o.Reason != tc.reason && tc.reason != "" || o.Attempts != tc.attempts || o.Applications != tc.applications {
				t.Fatalf("outcome %s (%s), %d attempts, %d applications; want %s (%s), %d, %d",
					o.Outcome, o.Reason, o.Attempts, o.Applications, tc.out, tc.reason, tc.attempts, tc.applications)
			}
			for _, f := range fakes {
				f.mu.Lock() // a timed-out request's handler may still be running
				bodies := slices.Clone(f.bodies)
				f.mu.Unlock()
				for _, b := range bodies {
					if b["by"] != float64(2) || tc.keyed != (b["idempotency_key"] == "op-1") {
						t.Fatalf("sent %v", b)
					}
				}
			}
		})
	}
}

// A handoff is turned on, held, and turned off; one the region refuses is
// never turned off (it was never on); a lost cancel is sent again.
func TestExecHandoff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		put     int
		deletes []int // statuses of the DELETEs, in order
		out     Outcome
		moved   int64
	}{
		{name: "on and off", put: 200, deletes: []int{200}, out: OutcomeOK, moved: 7},
		{name: "cancel retried", put: 200, deletes: []int{503, 200}, out: OutcomeOK, moved: 7},
		{name: "refused", put: 409, out: OutcomeFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var calls []string
			dels := tc.deletes
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(body)))
				st := tc.put
				if r.Method == http.MethodDelete {
					st, dels = dels[0], dels[1:]
				}
				w.WriteHeader(st)
				if st != 200 {
					_, _ = io.WriteString(w, `{"error":"no","code":"unknown_replica"}`)
					return
				}
				_, _ = io.WriteString(w, `{"to":"eu-1","budgets":1,"held":0,"moved":7}`)
			}))
			t.Cleanup(srv.Close)
			cfg := DefaultConfig().withDefaults()
			cfg.Regions, cfg.ClientTimeout = []string{"us", "eu"}, 200*time.Millisecond
			w := &workload{cfg: cfg, clients: map[string][]*replicaClient{"us": {{replica: "us-1", client: newClient("us", strings.TrimPrefix(srv.URL, "http://"), 2)}}}}
			o := &Op{ID: 1, Kind: OpHandoff, Region: "us", User: "eu-1", RetryAfter: 10 * time.Millisecond}
			w.execHandoff(context.Background(), o)
			mu.Lock()
			defer mu.Unlock()
			want := []string{`PUT /v1/admin/budgets/handoff {"to":"eu-1"}`}
			for range tc.deletes {
				want = append(want, "DELETE /v1/admin/budgets/handoff ")
			}
			if o.Outcome != tc.out || o.Value != tc.moved || !slices.Equal(calls, want) {
				t.Fatalf("outcome %s, moved %d, calls %q; want %s, %d, %q", o.Outcome, o.Value, calls, tc.out, tc.moved, want)
			}
		})
	}
}

// A grant or spend sent as a one-event batch: the event's result decides
// the outcome as the route's answer would, a budget refusal included.
func TestBudgetEvent(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		out          Outcome
		reason       string
		dup          bool
	}{
		{"spent", `{"applied":1,"rejected":0,"results":[{"ok":true,"value":7}]}`, OutcomeOK, "", false},
		{"duplicate", `{"applied":1,"rejected":0,"results":[{"ok":true,"value":7,"duplicate":true}]}`, OutcomeOK, "", true},
		{"exhausted", `{"applied":0,"rejected":1,"results":[{"ok":false,"value":0,"error":"x","code":"budget_exhausted"}]}`, OutcomeRefused, "budget_exhausted", false},
		{"elsewhere", `{"applied":0,"rejected":1,"results":[{"ok":false,"value":0,"error":"x","code":"rights_elsewhere"}]}`, OutcomeRefused, "rights_elsewhere", false},
		{"bad", `{"applied":0,"rejected":1,"results":[{"ok":false,"value":0,"error":"x","code":"bad_by"}]}`, OutcomeFailed, "event rejected: bad_by", false},
		{"no result", `{"applied":0,"rejected":0,"results":[]}`, OutcomeTimeout, "events: 0 results for 1 event", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got = r.Method + " " + r.URL.Path + " " + strings.TrimSpace(string(body))
				_, _ = io.WriteString(w, tc.answer)
			}))
			t.Cleanup(srv.Close)
			c := newClient("us", strings.TrimPrefix(srv.URL, "http://"), 1)
			o := &Op{Kind: OpSpend, Key: "bud:1", By: 2, Idem: "op-9", Events: true}
			a := c.budgetWrite(context.Background(), o, time.Second)
			if a.outcome != tc.out || a.reason != tc.reason || a.duplicate != tc.dup || tc.out == OutcomeOK && a.value != 7 {
				t.Fatalf("answer %+v, want %s %q duplicate=%v", a, tc.out, tc.reason, tc.dup)
			}
			if want := `POST /v1/events [{"type":"spend","key":"bud:1","by":2,"idempotency_key":"op-9"}]`; got != want {
				t.Fatalf("sent %s, want %s", got, want)
			}
		})
	}
}
