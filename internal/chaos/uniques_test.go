package chaos

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
)

func uniqueAdd(id int64, region, key string, out Outcome, ids ...string) Op {
	return Op{ID: id, Kind: OpUnique, Region: region, Key: key, IDs: ids, Outcome: out, Attempts: 1}
}

// manyIDs are n ids of the pool from the n-th on.
func manyIDs(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = uniqueID(from + i)
	}
	return out
}

// estimateOf is what a region whose union of sketches holds exactly ids
// answers.
func estimateOf(ids ...[]string) int64 {
	h := new(crdt.HLL)
	for _, l := range ids {
		for _, id := range l {
			h.AddID(id)
		}
	}
	return int64(math.Round(h.Estimate()))
}

// uniquesEverywhere is a state where every region answers every target of
// keys as a union of exactly ids (per key), from the sketches of replicas.
func uniquesEverywhere(keys []string, ids map[string][]string, replicas []string) uniqueState {
	st := uniqueState{Regions: regions3, Reads: map[string]map[uniqueTarget]api.Uniques{}}
	for _, r := range regions3 {
		st.Reads[r] = map[uniqueTarget]api.Uniques{}
		for _, t := range uniqueTargets(keys) {
			var sets [][]string
			for _, k := range t.keys() {
				sets = append(sets, ids[k])
			}
			st.Reads[r][t] = api.Uniques{Keys: t.keys(), Estimate: estimateOf(sets...), Replicas: replicas}
		}
	}
	return st
}

func TestUniqueModelCountsAcknowledgedIDsOnce(t *testing.T) {
	keys := []string{"uv:1", "uv:2"}
	a, b := manyIDs(0, 3000), manyIDs(2000, 3000) // 1,000 in both
	ops := []Op{
		uniqueAdd(1, "us", "uv:1", OutcomeOK, a...),
		uniqueAdd(2, "eu", "uv:1", OutcomeOK, b...),                    // overlapping, in another region
		uniqueAdd(3, "ap", "uv:1", OutcomeOK, a[:10]...),               // again
		uniqueAdd(4, "ap", "uv:2", OutcomeFailed, manyIDs(9000, 5)...), // not applied
		uniqueAdd(5, "ap", "uv:2", OutcomeOK, b[:100]...),
	}
	m, vs := buildUniqueModel(ops, keys)
	if len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	sketch, n, replicas, certain := m.want([]string{"uv:1"})
	if n != 5000 || !certain || !slices.Equal(replicas, []string{"ap-1", "eu-1", "us-1"}) {
		t.Errorf("uv:1: %d distinct, certain %v, replicas %v", n, certain, replicas)
	}
	if got, want := int64(math.Round(sketch.Estimate())), estimateOf(a, b); got != want {
		t.Errorf("uv:1: the model's sketch estimates %d, one built from every id %d", got, want)
	}
	if _, n, replicas, _ := m.want([]string{"uv:2"}); n != 100 || !slices.Equal(replicas, []string{"ap-1"}) {
		t.Errorf("uv:2: %d distinct, replicas %v", n, replicas)
	}
	if _, n, _, _ := m.want(keys); n != 5000 {
		t.Errorf("the union: %d distinct, want 5000 (uv:2's ids are uv:1's too)", n)
	}

	st := uniquesEverywhere(keys, map[string][]string{"uv:1": append(slices.Clone(a), b...), "uv:2": b[:100]}, nil)
	for _, r := range regions3 {
		for tg, u := range st.Reads[r] {
			u.Replicas = []string{"ap-1", "eu-1", "us-1"}
			if tg.Keys == "uv:2" {
				u.Replicas = []string{"ap-1"}
			}
			st.Reads[r][tg] = u
		}
	}
	vs, n2 := checkUniques(m, st, keys, false)
	if len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	if n2.Reads != 3*6 || n2.Keys != 2 || n2.Distinct != 5000 {
		t.Errorf("checked %+v", n2)
	}
	if !st.settled(st, keys) {
		t.Error("identical answers did not settle")
	}
}

// A region that misses one replica's sketch answers another estimate than
// the others and the model, and says whose sketches it holds.
func TestCheckUniquesRegionMissingASketch(t *testing.T) {
	keys := []string{"uv:1", "uv:2", "uv:3"}
	a, b := manyIDs(0, 400), manyIDs(300, 400)
	ops := []Op{uniqueAdd(1, "us", "uv:1", OutcomeOK, a...), uniqueAdd(2, "eu", "uv:1", OutcomeOK, b...)}
	m, _ := buildUniqueModel(ops, keys)
	st := uniquesEverywhere(keys, map[string][]string{"uv:1": append(slices.Clone(a), b...)}, []string{"eu-1", "us-1"})
	for _, tg := range uniqueTargets(keys) {
		if strings.Contains(tg.Keys, "uv:1") {
			continue
		}
		for _, r := range regions3 {
			u := st.Reads[r][tg]
			u.Replicas = nil // keys nobody added to
			st.Reads[r][tg] = u
		}
	}
	if vs, _ := checkUniques(m, st, keys, false); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	// ap never merged us's sketch: it holds eu's only.
	for _, tg := range uniqueTargets(keys) {
		if strings.Contains(tg.Keys, "uv:1") {
			st.Reads["ap"][tg] = api.Uniques{Estimate: estimateOf(b), Replicas: []string{"eu-1"}}
		}
	}
	vs, _ := checkUniques(m, st, keys, false)
	if !slices.Equal(kinds(vs), []string{KindUniques}) {
		t.Fatalf("kinds %v: %v", kinds(vs), vs)
	}
	var details []string
	for _, v := range vs {
		if v.Region != "ap" || !strings.HasPrefix(v.Key, "uniques/uv:1") {
			t.Errorf("violation elsewhere: %v", v)
		}
		details = append(details, v.Key+": "+v.Detail)
	}
	all := strings.Join(details, "\n")
	eb, eab := estimateOf(b), estimateOf(a, b) // 700 ids estimate 706
	for _, want := range []string{
		fmt.Sprintf("uniques/uv:1: estimate %d, us's %d", eb, eab),
		fmt.Sprintf("uniques/uv:1,uv:2,uv:3?last=24h: estimate %d", eb),
		fmt.Sprintf("the model's sketch of the 700 distinct acknowledged ids estimates %d (%+d)", eab, eb-eab),
		"more than 5 standard errors",
		"holds the sketches of [eu-1], but adds were acknowledged by [eu-1 us-1]",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no violation says %q:\n%s", want, all)
		}
	}
	if st.settled(st, keys) || !st.unchanged(st, keys) {
		t.Error("regions that differ settled, or the same answers changed")
	}
}

// An add never acknowledged is reported, and its key is only compared
// between regions; stale answers and failed reads are violations.
func TestCheckUniquesUncertainStaleAndUnreadable(t *testing.T) {
	keys := []string{"uv:1"}
	a := manyIDs(0, 50)
	ops := []Op{uniqueAdd(1, "us", "uv:1", OutcomeOK, a...), uniqueAdd(2, "eu", "uv:1", OutcomeTimeout, manyIDs(50, 5)...)}
	m, mvs := buildUniqueModel(ops, keys)
	if len(mvs) != 1 || mvs[0].Kind != KindUnresolved || mvs[0].Op != 2 || mvs[0].Key != "uniques/uv:1" {
		t.Fatalf("model violations: %v", mvs)
	}
	// The maybe-applied ids are there: regions agree, nothing else checked.
	st := uniquesEverywhere(keys, map[string][]string{"uv:1": manyIDs(0, 55)}, []string{"eu-1", "us-1"})
	if vs, _ := checkUniques(m, st, keys, false); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	u := st.Reads["eu"][uniqueTarget{Keys: "uv:1"}]
	u.Stale = true
	st.Reads["eu"][uniqueTarget{Keys: "uv:1"}] = u
	delete(st.Reads["ap"], uniqueTarget{Keys: "uv:1", Last: uniqueWindow})
	st.Errs = []Violation{{Kind: KindUniques, Region: "ap", Key: "uniques/uv:1?last=24h", Detail: "could not be read: boom"}}
	vs, _ := checkUniques(m, st, keys, false)
	if len(vs) != 2 || !strings.Contains(vs[0].Detail, "boom") || vs[1].Region != "eu" || !strings.Contains(vs[1].Detail, "stale:true") {
		t.Fatalf("violations: %v", vs)
	}
	if st.settled(st, keys) {
		t.Error("settled with a failed read")
	}
}

// The planner's unique adds name the configured keys, draw ids from the
// pool, and send a pair's ids to two regions.
func TestPlannerUniqueAdds(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight = 0, 0, 0, 1, 0
	cfg.BlockWeight, cfg.ToggleWeight, cfg.LateWeight = 0, 0, 0
	p := newPlanner(cfg, 0)
	forms := map[string]int{}
	for range 300 {
		ops := p.next().ops
		o := ops[0]
		if o.Kind != OpUnique || !slices.Contains(uniqueKeys(cfg), o.Key) || len(o.IDs) == 0 || len(o.IDs) > maxUniqueBatch {
			t.Fatalf("op %+v", o)
		}
		for _, id := range o.IDs {
			if !crdt.ValidID(id) || id > uniqueID(cfg.UniqueIDs-1) {
				t.Fatalf("id %q", id)
			}
		}
		switch {
		case o.single:
			forms["single"]++
			if len(o.IDs) != 1 {
				t.Fatalf("single add of %d ids", len(o.IDs))
			}
		case o.Events:
			forms["events"]++
		default:
			forms["ids"]++
		}
		if len(ops) == 2 {
			forms["pair"]++
			if ops[1].Region == o.Region || ops[1].Key != o.Key || !slices.Equal(ops[1].IDs, o.IDs) {
				t.Fatalf("pair %+v %+v", o, ops[1])
			}
		}
	}
	for _, f := range []string{"single", "events", "ids", "pair"} {
		if forms[f] < 30 {
			t.Errorf("%d %s adds in 300: %v", forms[f], f, forms)
		}
	}
	if got := fmt.Sprint(uniqueTargets([]string{"uv:1", "uv:2"})); got != "[uniques/uv:1 uniques/uv:2 uniques/uv:1,uv:2 uniques/uv:1?last=24h uniques/uv:2?last=24h uniques/uv:1,uv:2?last=24h]" {
		t.Errorf("targets %s", got)
	}
	if got := dropIndexes([]string{"a", "b", "c", "d"}, []int{0, 2}); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("dropIndexes: %v", got)
	}
}
