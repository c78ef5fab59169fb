package httpapi

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	tallyroute "github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// GET /v1/trending?window=10m&n=10[&region=eu][&kind=likes|counters][&prefix=p]
// window=all ranks all-time counts; window=day is 24h.
func (s *Server) getTrending(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	get := func(name string) string { v, _ := one(q, name); return v }
	for _, name := range []string{"window", "n", "region", "kind", "prefix"} {
		if _, err := one(q, name); err != nil {
			return err
		}
	}
	meta, err := withMeta(q)
	if err != nil {
		return err
	}
	kind, err := parseKind(get("kind"))
	if err != nil {
		return err
	}
	window := get("window")
	if window == "" {
		window = "10m"
	}
	var last time.Duration
	switch window {
	case "all":
	case "day":
		last = 24 * time.Hour
	default:
		if last, err = parseSpan("window", window); err != nil {
			return err
		}
	}
	n := 10
	if v := get("n"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > region.MaxTrendingN {
			return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "n %s is not in 1..%d", quoteShort(v), region.MaxTrendingN)
		}
	}
	prefix := get("prefix")
	if prefix != "" && !crdt.ValidID(prefix) {
		return newError(http.StatusBadRequest, frontdoor.CodeBadID, "prefix must be %s", frontdoor.IDRule)
	}
	zone := get("region")
	tr, items, anyApprox, err := s.trending(kind, prefix, last, n, zone, meta)
	if err != nil {
		return err
	}
	out := api.Trending{Kind: kind.String(), Window: window, Region: zone, Prefix: prefix, Items: items,
		Candidates: tr.Candidates, Capacity: tr.Capacity}
	if !tr.AllTime {
		from, to := tr.From.UTC(), tr.To.UTC()
		out.From, out.To = &from, &to
	}
	if s.sharded() {
		// Each replica ranks the whole keys of its shards exactly, so a
		// key in the region's top n is in the top n of every replica
		// holding it. A split item's parts rank apart: each replica
		// sends those of its n split items of the largest sums, so the
		// sums here are exact unless a replica had more (then approx).
		replies, covered := s.ask(r.Context(), tallyroute.Question{Asked: tallyroute.AskTrending, Family: byte(kind),
			Key: prefix, Zone: zone, N: int64(n), SpanMs: last.Milliseconds()})
		var candidates int
		var approx bool
		out.Items, candidates, approx = s.trendingItems(replies, out.Items, meta)
		out.Candidates += candidates
		anyApprox = anyApprox || approx
		missing := shard.Count - covered.Len()
		out.Items = topItems(out.Items, n)
		out.Partial, out.MissingShards = missing > 0, missing
	} else {
		out.Items = topItems(out.Items, n) // the parts of a split item as the item
	}
	moving := s.cfg.Replication != nil && s.cfg.Replication.Stale()
	out.Approx, out.Final = moving || anyApprox || out.Partial, !tr.AllTime && tr.Closed && !moving && !out.Partial
	writeJSON(w, http.StatusOK, out)
	return nil
}

// trending ranks this replica's keys of family kind starting with
// prefix over the last `last` (0: all time), counting only the replicas
// of region zone ("": all; an unknown one is refused), and returns its
// top n keys unmerged, each approx if it is an approximate counter
// (with meta: its type's metadata), and whether any is, or its list of
// split items was cut.
func (s *Server) trending(kind region.Kind, prefix string, last time.Duration, n int, zone string,
	meta bool) (region.Trending, []api.TrendingItem, bool, error) {
	var only func(string) bool
	if zone != "" {
		regions := s.regionOf()
		known := false
		for _, g := range regions {
			known = known || g == zone
		}
		if !known {
			return region.Trending{}, nil, false, newError(http.StatusBadRequest, frontdoor.CodeUnknownZone,
				"no replica of region %s is known here", quoteShort(zone))
		}
		only = func(replica string) bool { return regions[replica] == zone }
	}
	tr, err := s.rep.Windows().Trending(kind, prefix, last, n, only)
	if err != nil {
		return region.Trending{}, nil, false, windowErr(err)
	}
	items := []api.TrendingItem{}
	anyApprox := tr.PartsCut
	for _, it := range tr.Items {
		approx := s.approxError(kind, it.Key) > 0
		anyApprox = anyApprox || approx
		ti := api.TrendingItem{Item: it.Key, Count: it.Count, Approx: approx}
		if meta {
			ti.Meta = s.typeMeta(it.Key)
		}
		items = append(items, ti)
	}
	return tr, items, anyApprox, nil
}

// topItems is the n items of the largest counts, each once (two holders
// of a key answer it alike; the larger is the later view), by count
// then item. The parts of a split item (crdt.PartName) are summed into
// the item: trending names items, never parts.
func topItems(items []api.TrendingItem, n int) []api.TrendingItem {
	best := map[string]api.TrendingItem{}
	for _, it := range items {
		if b, ok := best[it.Item]; !ok || it.Count > b.Count {
			best[it.Item] = it
		}
	}
	for name, it := range best {
		if item := crdt.ItemOf(name); item != name {
			delete(best, name)
			sum := best[item] // a split item's own vector holds nothing
			sum.Item, sum.Count, sum.Approx = item, sum.Count+it.Count, sum.Approx || it.Approx
			best[item] = sum
		}
	}
	out := make([]api.TrendingItem, 0, len(best))
	for _, it := range best {
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b api.TrendingItem) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Item, b.Item)
	})
	return out[:min(n, len(out))]
}
