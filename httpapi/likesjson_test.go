package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// A read's hand-encoded answer is byte for byte what encoding/json makes
// of the api.Likes it stands for.
func TestAppendLikesMatchesMarshal(t *testing.T) {
	vec := crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 7, N: 2}}, {Replica: "us-1", PN: crdt.PN{P: 1 << 63, N: 0}}, {Replica: "us-2", PN: crdt.PN{P: 3}}}
	for _, c := range []struct {
		name      string
		item      string
		rd        region.Read
		approx    bool
		staleness map[string]int64
	}{
		{"empty", "post1", region.Read{}, false, nil},
		{"vector", "post:1@a_b.c-d", region.Read{Value: 5, Vector: vec}, false, nil},
		{"negative", "p", region.Read{Value: -3, Vector: vec[:1], Unreconciled: 2}, true, nil},
		{"staleness", "p", region.Read{Value: 1, Vector: vec}, true, map[string]int64{"us-2": 12, "eu-1": -1, "ap-9": 1 << 40}},
		{"no peers", "p", region.Read{Value: 1, Vector: vec}, false, map[string]int64{}},
		{"escaped", "a<b>&\"c\\\u00e9\u2028\x01", region.Read{Value: 1, Vector: crdt.Vector{{Replica: "r<1>", PN: crdt.PN{P: 1}}}}, false,
			map[string]int64{"é": 3, "&": 4}},
		{"unsorted vector", "p", region.Read{Value: 1, Vector: crdt.Vector{vec[2], vec[0], vec[2]}}, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := json.Marshal(api.Likes{Item: c.item, Count: c.rd.Value, Approx: c.approx, StalenessMs: c.staleness,
				Replicas: replicasJSON(c.rd.Vector), Unreconciled: c.rd.Unreconciled})
			if err != nil {
				t.Fatal(err)
			}
			if got := appendLikes(nil, c.item, c.rd, c.approx, c.staleness); string(got) != string(want) {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}
