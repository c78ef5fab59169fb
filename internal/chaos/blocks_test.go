package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
)

func blockOp(id int64, region, user string, blocked bool, hlc, replica string, out Outcome) Op {
	k := OpUnblock
	if blocked {
		k = OpBlock
	}
	return Op{ID: id, Kind: k, Region: region, User: user, Outcome: out, Attempts: 1, FlagHLC: hlc, FlagReplica: replica}
}

// withFlags makes every region read the users' flags as given.
func withFlags(f finalState, flags map[string]api.Block) finalState {
	f.Flags = map[string]map[string]*api.Block{}
	for u, b := range flags {
		f.Flags[u] = map[string]*api.Block{}
		for _, r := range f.Regions {
			f.Flags[u][r] = &b
		}
	}
	return f
}

// The final flag is the acknowledged block or unblock with the largest
// stamp (ties by replica), however the operations were ordered by id; a
// blocked user's likes count nowhere, and the flag every region ends
// with must be that one.
func TestModelBlocks(t *testing.T) {
	ops := []Op{
		like(1, "us", "i", "a", OutcomeOK),
		like(2, "eu", "i", "b", OutcomeOK),
		// Two admins in cut-off regions: eu's unblock is stamped later
		// than us's block although it was sent first.
		blockOp(3, "eu", "a", false, "1700000000500.0", "eu-1", OutcomeOK),
		blockOp(4, "us", "a", true, "1700000000400.7", "us-1", OutcomeOK),
		// b: the same stamp; the larger replica id wins.
		blockOp(5, "ap", "b", false, "1700000000600.0", "ap-1", OutcomeOK),
		blockOp(6, "us", "b", true, "1700000000600.0", "us-1", OutcomeOK),
		blockOp(7, "ap", "b", false, "", "", OutcomeFailed), // not applied
	}
	flags, vs := buildFlags(ops)
	if len(vs) != 0 {
		t.Fatal(vs)
	}
	if flags.blocked("a") || flags.Final["a"].Replica != "eu-1" || !flags.blocked("b") || flags.Final["b"].Replica != "us-1" {
		t.Fatalf("final flags %+v", flags.Final)
	}
	keys := []key{{Likes: true, ID: "i"}}
	liked := map[userKey]bool{{"i", "a"}: true, {"i", "b"}: true}
	good := withFlags(everywhere(map[key]int64{keys[0]: 1}, liked), flags.Final)
	if _, vs := check(ops, keys, good); len(vs) != 0 {
		t.Fatalf("exact state flagged: %v", vs)
	}
	// b's like still counted somewhere: the block did not reach its winner.
	counted := withFlags(everywhere(map[key]int64{keys[0]: 2}, liked), flags.Final)
	if _, vs := check(ops, keys, counted); !slices.Equal(kinds(vs), []string{KindValueMismatch}) {
		t.Fatalf("a blocked user's like counted: %v", vs)
	}
	// A region that kept us's block of a (the earlier stamp).
	stale := withFlags(everywhere(map[key]int64{keys[0]: 1}, liked), flags.Final)
	wrong := api.Block{User: "a", Blocked: true, HLC: "1700000000400.7", Replica: "us-1"}
	stale.Flags["a"]["ap"] = &wrong
	if _, vs := check(ops, keys, stale); !slices.Equal(kinds(vs), []string{KindBlocks}) {
		t.Fatalf("a region with a losing flag: %v", vs)
	}
	// A block never acknowledged: a's flag, and so item i, are unknown.
	lost := append(slices.Clone(ops), blockOp(8, "us", "a", true, "", "", OutcomeTimeout))
	if _, vs := check(lost, keys, withFlags(everywhere(map[key]int64{keys[0]: 2}, liked), flags.Final)); !slices.Equal(kinds(vs), []string{KindUnresolved}) {
		t.Fatalf("an unacknowledged block: %v", vs)
	}
}

// A like whose first attempt timed out and whose retry was refused by a
// block that arrived meanwhile may or may not have applied: either
// record state is right, and the count follows the record.
func TestModelBlockedRetry(t *testing.T) {
	maybe := like(2, "us", "i", "a", OutcomeTimeout)
	maybe.BlockedRetry = true
	ops := []Op{
		unlike(1, "us", "i", "a", OutcomeOK),
		maybe,
		blockOp(3, "eu", "a", true, "1700000000100.0", "eu-1", OutcomeOK),
		blockOp(4, "eu", "a", false, "1700000000200.0", "eu-1", OutcomeOK),
	}
	keys := []key{{Likes: true, ID: "i"}}
	flags, _ := buildFlags(ops)
	for _, tc := range []struct {
		liked bool
		count int64
		ok    bool
	}{{true, 1, true}, {false, 0, true}, {true, 0, false}, {false, 1, false}} {
		f := withFlags(everywhere(map[key]int64{keys[0]: tc.count}, map[userKey]bool{{"i", "a"}: tc.liked}), flags.Final)
		if _, vs := check(ops, keys, f); (len(vs) == 0) != tc.ok {
			t.Errorf("record liked=%v count %d: %v, want ok=%v", tc.liked, tc.count, vs, tc.ok)
		}
	}
}

// The planner's blocks name the first BlockUsers users, both ways.
func TestPlannerBlockOps(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight, cfg.BlockWeight = 0, 0, 0, 0, 0, 1
	cfg.ToggleWeight, cfg.LateWeight = 0, 0
	p := newPlanner(cfg, 0)
	seen := map[OpKind]int{}
	users := map[string]bool{}
	for range 200 {
		ops := p.next().ops
		if len(ops) != 1 || !ops[0].Kind.blockOp() || !slices.Contains(cfg.Regions, ops[0].Region) {
			t.Fatalf("ops %+v", ops)
		}
		seen[ops[0].Kind]++
		users[ops[0].User] = true
	}
	if seen[OpBlock] == 0 || seen[OpUnblock] == 0 || len(users) != cfg.BlockUsers {
		t.Fatalf("kinds %v, users %v: want both kinds over the %d users", seen, users, cfg.BlockUsers)
	}
	for u := range users {
		if !slices.Contains([]string{userID(0), userID(1), userID(2), userID(3)}, u) {
			t.Fatalf("blocked %s, not one of the first %d users", u, cfg.BlockUsers)
		}
	}
}

// fakeBlockRegion answers block routes from a script ("ok", "hang") and
// like routes with 403 user_blocked after the first ("hang").
type fakeBlockRegion struct {
	mu      sync.Mutex // protects answers, calls
	answers []string
	calls   int
}

func (f *fakeBlockRegion) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	a := "ok"
	if f.calls < len(f.answers) {
		a = f.answers[f.calls]
	}
	f.calls++
	f.mu.Unlock()
	switch {
	case a == "hang":
		<-r.Context().Done()
	case strings.HasPrefix(r.URL.Path, "/v1/likes"):
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"blocked","code":"user_blocked"}`))
	default:
		_, _ = w.Write([]byte(`{"user":"u","blocked":true,"changed":true,"hlc":"1700000000000.3","replica":"us-1"}`))
	}
}

func TestExecBlockOutcomes(t *testing.T) {
	run := func(answers []string, o *Op) *fakeBlockRegion {
		f := &fakeBlockRegion{answers: answers}
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		cfg := DefaultConfig().withDefaults()
		cfg.Regions, cfg.ClientTimeout = []string{"us"}, 200*time.Millisecond
		w := &workload{cfg: cfg, hist: &history{}, clients: map[string][]*replicaClient{"us": {{replica: "us-1", client: newClient("us", strings.TrimPrefix(srv.URL, "http://"), 2)}}}}
		w.exec(context.Background(), o)
		return f
	}
	b := &Op{ID: 1, Kind: OpBlock, Region: "us", User: "u"}
	run([]string{"hang", "ok"}, b)
	if b.Outcome != OutcomeOK || b.Attempts != 2 || b.FlagHLC != "1700000000000.3" || b.FlagReplica != "us-1" {
		t.Fatalf("a block whose answer was lost once: %+v", b)
	}
	l := &Op{ID: 2, Kind: OpLike, Region: "us", Key: "i", User: "u"}
	run([]string{"refuse"}, l)
	if l.Outcome != OutcomeFailed || l.BlockedRetry {
		t.Fatalf("a like refused at once: %+v", l)
	}
	l = &Op{ID: 3, Kind: OpLike, Region: "us", Key: "i", User: "u"}
	run([]string{"hang", "refuse"}, l)
	if l.Outcome != OutcomeTimeout || !l.BlockedRetry || l.Attempts != 2 {
		t.Fatalf("a like whose retry was refused: %+v", l)
	}
}
