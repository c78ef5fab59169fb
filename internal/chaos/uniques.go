package chaos

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/poll"
)

// Unique counts. Clients add ids to a few keys (uv:1, uv:2, ...) at random
// regions, drawn from one pool of ids, so the same id is added in several
// regions, to several keys and more than once; a third of the adds go to
// two regions at once with the same ids. An add whose answer is lost is
// sent again to the same region until acknowledged: adding is idempotent.
//
// The model knows every acknowledged id of every key and builds from them
// the sketch one node would build (crdt.HLL, as every replica builds its
// own). Every replica keeps its own sketch of a key and a read unions
// every replica's, so after the final heal every region must hold, for
// every key, exactly the union of the replicas' sketches: the model's
// sketch. The regions only answer an estimate, rounded, but the estimate
// of a sketch is a function of its registers: every region must answer
// the estimate of the model's sketch, the same in every region, within 5
// standard errors of the distinct count, from the sketches of exactly the
// replicas that acknowledged adds, and so must the union of every key and
// both over the last 24 h (every id of the run is in it).

// maxUniqueKeys is region.MaxUniqueKeys: the most keys of one union read.
const maxUniqueKeys = 100

// Sizes of one unique add: a list of up to maxUniqueBatch ids, or a batch
// of up to maxUniqueEvents unique events (one id each).
const (
	maxUniqueBatch  = 100
	maxUniqueEvents = 20
)

// uniqueWindow is the window of the windowed reads: it holds the run.
const uniqueWindow = "24h"

// uniqueCheckTimeout bounds how long the checker waits for every region's
// sketches to agree: they replicate with the counters, or moments after.
// Answers that have not moved for uniqueStableFor, though they differ
// between regions, are final too: anti-entropy repairs a lost page in a
// few hundred ms.
const (
	uniqueCheckTimeout = 10 * time.Second
	uniqueStableFor    = 3 * time.Second
)

// uniqueKeyID names the i-th unique-count key (from 0): uv:1, uv:2, ...
func uniqueKeyID(i int) string { return fmt.Sprintf("uv:%d", i+1) }

// uniqueID names the n-th id of the pool the adds draw from.
func uniqueID(n int) string { return fmt.Sprintf("viewer-%05d", n) }

// uniqueKeys are the unique-count keys the workload may add to: none if
// the mix has no unique adds.
func uniqueKeys(cfg Config) []string {
	if cfg.UniqueWeight == 0 {
		return nil
	}
	keys := make([]string, cfg.UniqueKeys)
	for i := range keys {
		keys[i] = uniqueKeyID(i)
	}
	return keys
}

// uniques draws a unique add: one id ({"id": ...}) a quarter of the time,
// a batch of unique events a quarter, a list of ids half of it, half of
// them stamped with the client's time. A third go as a pair: the same ids
// to two regions at once.
func (p *planner) uniques() []*Op {
	c := p.cfg
	o := &Op{Kind: OpUnique, Region: p.region(), Key: uniqueKeyID(p.rng.IntN(c.UniqueKeys))}
	n := 1
	switch p.rng.IntN(4) {
	case 0:
		o.single = true
	case 1:
		o.Events, n = true, 1+p.rng.IntN(maxUniqueEvents)
	default:
		n = 1 + p.rng.IntN(maxUniqueBatch)
	}
	o.IDs = make([]string, n)
	for i := range o.IDs {
		o.IDs[i] = uniqueID(p.rng.IntN(c.UniqueIDs))
	}
	p.stamp(o)
	if p.rng.IntN(3) > 0 {
		return []*Op{o}
	}
	twin := *o
	twin.IDs = slices.Clone(o.IDs)
	i := slices.Index(c.Regions, o.Region)
	twin.Region = c.Regions[(i+1+p.rng.IntN(len(c.Regions)-1))%len(c.Regions)]
	return []*Op{o, &twin}
}

// addUniques sends a unique add until it is acknowledged. Adding an id is
// idempotent, so an add whose answer was lost is sent again, to the same
// region, as often as it takes, and counts once however many attempts
// applied it. A failed first attempt was not applied: the add ends there,
// as a client reports the failure. An add whose event time a replica
// refused (bad_time) was not applied either: it is sent again without one.
func (w *workload) addUniques(retry context.Context, o *Op) {
	if o.stamped {
		o.At = eventTime(o.lag) // the same in every attempt
	}
	first := true
	for {
		o.Attempts++
		a, rejected := w.client(o.Region).addUniques(retry, o.Key, o.IDs, o.At, o.Events, o.single, w.cfg.ClientTimeout)
		if a.badTime && o.At != 0 {
			o.At = 0
			continue
		}
		if first {
			o.Outcome, o.Reason, first = a.outcome, a.reason, false
		}
		if a.outcome == OutcomeOK {
			o.Outcome = OutcomeOK
			if len(rejected) > 0 {
				o.IDs = dropIndexes(o.IDs, rejected)
				o.Reason = fmt.Sprintf("%d of %d events rejected", len(rejected), len(rejected)+len(o.IDs))
			}
			return
		}
		if o.Outcome == OutcomeFailed || !poll.Sleep(retry, 200*time.Millisecond) {
			return // failed: not applied; or unacknowledged when retry ends
		}
	}
}

// dropIndexes returns l without the elements at the sorted indexes idx.
func dropIndexes(l []string, idx []int) []string {
	out := make([]string, 0, len(l))
	for i, s := range l {
		if !slices.Contains(idx, i) {
			out = append(out, s)
		}
	}
	return out
}

// addUniques sends one unique add: the ids as {"ids": [...]} (single: one
// id as {"id": ...}) to POST /v1/uniques/{key}, or, with events, as one
// unique event per id in a POST /v1/events batch, with the event time at
// (unix ms; 0: none). rejected are the indexes of the events a batch
// rejected (the others were applied); a batch all of whose events were
// rejected failed.
func (c *client) addUniques(ctx context.Context, key string, ids []string, at int64, events, single bool, timeout time.Duration) (a answer, rejected []int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if events {
		evs := make([]tallyclient.Event, len(ids))
		for i, id := range ids {
			evs[i] = tallyclient.Event{Type: tallyclient.EventUnique, Key: key, ID: id, At: atOf(at)}
		}
		res, err := c.api.Events(ctx, evs)
		if err != nil {
			return answerOf(err), nil
		}
		if len(res.Results) != len(ids) {
			return answer{outcome: OutcomeTimeout, reason: fmt.Sprintf("events: %d results for %d events", len(res.Results), len(ids))}, nil
		}
		code := ""
		for i, r := range res.Results {
			if !r.OK {
				rejected, code = append(rejected, i), r.Code
			}
		}
		if len(rejected) == len(ids) {
			return answer{outcome: OutcomeFailed, reason: "event rejected: " + code, badTime: code == "bad_time"}, nil
		}
		return answer{outcome: OutcomeOK}, rejected
	}
	body := tallyclient.UniqueIDs{IDs: ids, At: atOf(at)}
	if single {
		body.IDs, body.ID = nil, ids[0]
	}
	if _, err := c.api.AddUniques(ctx, key, body); err != nil {
		return answerOf(err), nil
	}
	return answer{outcome: OutcomeOK}, nil
}

// readUniques reads GET /v1/uniques/{key} or, for several keys, GET
// /v1/uniques?keys=, over all time or the last= window.
func (c *client) readUniques(ctx context.Context, keys []string, last string) (api.Uniques, error) {
	q := tallyclient.UniquesQuery{Range: tallyclient.Range{Last: last}}
	if len(keys) > 1 {
		return c.api.UniquesUnion(ctx, keys, q)
	}
	return c.api.Uniques(ctx, keys[0], q)
}

// uniqueTarget is one read of unique counts: of one key or of the union of
// several (Keys, comma-separated), over all time or the Last window.
type uniqueTarget struct {
	Keys string
	Last string
}

func (t uniqueTarget) keys() []string { return strings.Split(t.Keys, ",") }

func (t uniqueTarget) String() string {
	if t.Last == "" {
		return "uniques/" + t.Keys
	}
	return "uniques/" + t.Keys + "?last=" + t.Last
}

// uniqueTargets are the reads the checker compares: every key and, with
// more than one, their union, each over all time and over uniqueWindow.
func uniqueTargets(keys []string) []uniqueTarget {
	sets := slices.Clone(keys)
	if len(keys) > 1 {
		sets = append(sets, strings.Join(keys, ","))
	}
	var out []uniqueTarget
	for _, last := range []string{"", uniqueWindow} {
		for _, s := range sets {
			out = append(out, uniqueTarget{Keys: s, Last: last})
		}
	}
	return out
}

// uniqueModel is what the unique counts must be after the final heal.
type uniqueModel struct {
	// IDs are per key the distinct acknowledged ids.
	IDs map[string]map[string]bool
	// Replicas are per key the replicas that acknowledged an add: the
	// sketches a read must find, no more, no fewer.
	Replicas map[string]map[string]bool
	// Uncertain keys have an add that was never acknowledged, which may
	// or may not have been applied: they are only compared between
	// regions.
	Uncertain map[string]bool
}

// buildUniqueModel collects the acknowledged ids of every key of keys. An
// add never acknowledged is reported (unresolved) and leaves its key
// uncertain; a failed one was not applied.
func buildUniqueModel(ops []Op, keys []string) (uniqueModel, []Violation) {
	m := uniqueModel{IDs: map[string]map[string]bool{}, Replicas: map[string]map[string]bool{}, Uncertain: map[string]bool{}}
	for _, k := range keys {
		m.IDs[k], m.Replicas[k] = map[string]bool{}, map[string]bool{}
	}
	var vs []Violation
	for i := range ops {
		o := &ops[i]
		if o.Kind != OpUnique {
			continue
		}
		switch o.Outcome {
		case OutcomeOK:
			if m.IDs[o.Key] == nil {
				m.IDs[o.Key], m.Replicas[o.Key] = map[string]bool{}, map[string]bool{}
			}
			for _, id := range o.IDs {
				m.IDs[o.Key][id] = true
			}
			if len(o.IDs) > 0 {
				m.Replicas[o.Key][replicaID(o.Region)] = true
			}
		case OutcomeTimeout:
			m.Uncertain[o.Key] = true
			vs = append(vs, Violation{Kind: KindUnresolved, Region: o.Region, Key: uniqueTarget{Keys: o.Key}.String(), Op: o.ID,
				Detail: fmt.Sprintf("an add of %d ids was never acknowledged after %d attempts", len(o.IDs), o.Attempts)})
		}
	}
	return m, vs
}

// want returns the model's sketch of the union of keys (built from every
// acknowledged id, as one node would), the number of distinct ids, the
// replicas whose sketches hold them, sorted, and whether every key is
// certain.
func (m uniqueModel) want(keys []string) (*crdt.HLL, int, []string, bool) {
	h := new(crdt.HLL)
	ids, replicas := map[string]bool{}, map[string]bool{}
	certain := true
	for _, k := range keys {
		certain = certain && !m.Uncertain[k]
		for id := range m.IDs[k] {
			if !ids[id] {
				ids[id] = true
				h.AddID(id)
			}
		}
		for r := range m.Replicas[k] {
			replicas[r] = true
		}
	}
	return h, len(ids), slices.Sorted(maps.Keys(replicas)), certain
}

// uniqueState is what the regions answer of unique counts.
type uniqueState struct {
	Regions []string
	// Reads are per region, per target, the answers; one missing could
	// not be read (Errs says why).
	Reads map[string]map[uniqueTarget]api.Uniques
	Errs  []Violation
}

// readUniqueState reads every target in every region.
func readUniqueState(ctx context.Context, procs []*proc, keys []string) uniqueState {
	st := uniqueState{Reads: map[string]map[uniqueTarget]api.Uniques{}}
	targets := uniqueTargets(keys)
	type regionReads struct {
		reads map[uniqueTarget]api.Uniques
		errs  []Violation
	}
	reads := perRegion(ctx, procs, 10*time.Second, func(ctx context.Context, p *proc) (regionReads, error) {
		rr := regionReads{reads: map[uniqueTarget]api.Uniques{}}
		for _, t := range targets {
			u, err := p.client.readUniques(ctx, t.keys(), t.Last)
			if err != nil {
				rr.errs = append(rr.errs, Violation{Kind: KindUniques, Region: p.view, Key: t.String(), Detail: "could not be read: " + err.Error()})
				continue
			}
			rr.reads[t] = u
		}
		return rr, nil
	})
	for _, p := range procs {
		st.Regions = append(st.Regions, p.view)
		rr, ok := reads[p.view]
		if !ok {
			st.Errs = append(st.Errs, Violation{Kind: KindUniques, Region: p.view, Detail: "the unique counts could not be read"})
			continue
		}
		st.Reads[p.view] = rr.reads
		st.Errs = append(st.Errs, rr.errs...)
	}
	return st
}

// unchanged reports whether every region answered every target, none
// stale, and the same as in prev.
func (st uniqueState) unchanged(prev uniqueState, keys []string) bool {
	return st.match(prev, keys, false)
}

// settled reports whether the answers are unchanged and also alike in
// every region: the sketches have converged, be they right or wrong, and
// reading again would not change a thing.
func (st uniqueState) settled(prev uniqueState, keys []string) bool {
	return st.match(prev, keys, true)
}

func (st uniqueState) match(prev uniqueState, keys []string, alike bool) bool {
	if len(st.Errs) > 0 || len(st.Regions) == 0 {
		return false
	}
	same := func(a, b api.Uniques) bool {
		return a.Estimate == b.Estimate && slices.Equal(a.Replicas, b.Replicas) && !a.Stale && !b.Stale
	}
	for _, t := range uniqueTargets(keys) {
		first, ok := st.Reads[st.Regions[0]][t]
		if !ok {
			return false
		}
		for _, r := range st.Regions {
			u, ok := st.Reads[r][t]
			p, okp := prev.Reads[r][t]
			if !ok || !okp || !same(u, p) || alike && !same(u, first) {
				return false
			}
		}
	}
	return true
}

// uniqueChecked counts what checkUniques compared.
type uniqueChecked struct {
	Keys     int // unique-count keys
	Reads    int // answers compared, every target and region
	Distinct int // distinct acknowledged ids of every key together
}

// checkUniques compares every region's unique counts with the model and
// with each other.
// byRegion compares the writers of the sketches by region (a sharded
// run).
func checkUniques(m uniqueModel, st uniqueState, keys []string, byRegion bool) ([]Violation, uniqueChecked) {
	vs := slices.Clone(st.Errs)
	n := uniqueChecked{Keys: len(keys)}
	_, n.Distinct, _, _ = m.want(keys)
	for _, t := range uniqueTargets(keys) {
		sketch, distinct, replicas, certain := m.want(t.keys())
		ref := int64(math.Round(sketch.Estimate())) // as the API rounds
		tol := max(5*crdt.HLLStdError*float64(distinct), 2)
		first := ""
		for _, r := range st.Regions {
			u, ok := st.Reads[r][t]
			if !ok {
				continue // Errs says why
			}
			n.Reads++
			bad := func(format string, args ...any) {
				vs = append(vs, Violation{Kind: KindUniques, Region: r, Key: t.String(), Detail: fmt.Sprintf(format, args...)})
			}
			if first == "" {
				first = r
			} else if f := st.Reads[first][t]; u.Estimate != f.Estimate {
				bad("estimate %d, %s's %d: the regions' unions of sketches differ (%s holds the sketches of %v, %s of %v)",
					u.Estimate, first, f.Estimate, r, u.Replicas, first, f.Replicas)
			}
			if u.Stale {
				bad("stale:true after the final heal: a peer is unheard-from")
			}
			if !certain {
				continue
			}
			if u.Estimate != ref {
				bad("estimate %d, but the model's sketch of the %d distinct acknowledged ids estimates %d (%+d): the union of the replicas' sketches is not the sketch of the acknowledged ids",
					u.Estimate, distinct, ref, u.Estimate-ref)
			}
			if d := float64(u.Estimate) - float64(distinct); math.Abs(d) > tol {
				bad("estimate %d is %+.0f from the %d distinct acknowledged ids: more than 5 standard errors (%.0f)", u.Estimate, d, distinct, tol)
			}
			got := slices.Sorted(slices.Values(u.Replicas))
			if byRegion {
				// In a sharded run the holders of a key's shard write its
				// sketches, whichever replica of the region took the add.
				if got, want := regionsOf(got), regionsOf(replicas); !slices.Equal(got, want) {
					bad("holds the sketches of %v (regions %v), but adds were acknowledged in %v", u.Replicas, got, want)
				}
			} else if !slices.Equal(got, replicas) {
				bad("holds the sketches of %v, but adds were acknowledged by %v", got, replicas)
			}
		}
	}
	return vs, n
}

// checkUniquesUntil reads and checks the unique counts until they pass,
// or the regions have settled on them, or they have not moved for
// uniqueStableFor, or uniqueCheckTimeout has gone by, and returns the last
// check's result with the model's violations.
func checkUniquesUntil(ctx context.Context, procs []*proc, ops []Op, keys []string, byRegion bool) ([]Violation, uniqueChecked) {
	if len(keys) == 0 {
		return nil, uniqueChecked{}
	}
	m, mvs := buildUniqueModel(ops, keys)
	start := time.Now()
	moved := start // when the answers last changed
	var prev uniqueState
	for {
		st := readUniqueState(ctx, procs, keys)
		vs, n := checkUniques(m, st, keys, byRegion)
		if !st.unchanged(prev, keys) {
			moved = time.Now()
		}
		if len(vs) == 0 || st.settled(prev, keys) || time.Since(moved) >= uniqueStableFor ||
			time.Since(start) >= uniqueCheckTimeout || !poll.Sleep(ctx, 500*time.Millisecond) {
			return append(mvs, vs...), n
		}
		prev = st
	}
}

// regionsOf are the regions of replica ids (<region>-<n>, or a region's
// name alone), sorted, each once.
func regionsOf(ids []string) []string {
	var out []string
	for _, id := range ids {
		if i := strings.LastIndexByte(id, '-'); i > 0 {
			if _, err := strconv.Atoi(id[i+1:]); err == nil {
				id = id[:i]
			}
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
