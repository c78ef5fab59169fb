package node

import (
	"encoding/json"
	"testing"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/replication"
)

// The shapes /v1/status and /v1/sequences/{name} encoded when they were
// node's own structs over alloc's types (api had them as any): the api
// types must encode the same bytes for the same state.
type (
	oldSequenceStatus struct {
		Name          string       `json:"name"`
		Counts        string       `json:"counts"`
		Match         string       `json:"match"`
		Milestones    string       `json:"milestones"`
		Numbered      uint64       `json:"numbered"`
		Unnumbered    int          `json:"unnumbered"`
		Lease         alloc.Status `json:"lease"`
		ClaimsPending int          `json:"claims_pending"`
	}
	oldSequenceView struct {
		*alloc.State
		Numbered   uint64       `json:"numbered"`
		Holes      uint64       `json:"holes"`
		OldestOpen *alloc.Lease `json:"oldest_open,omitempty"`
	}
)

func sameJSON(t *testing.T, what string, old, now any) {
	t.Helper()
	a, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(now)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("%s encodes\n%s\nwas\n%s", what, b, a)
	}
}

func TestNumberingJSONUnchanged(t *testing.T) {
	for _, st := range []alloc.Status{
		{Sequence: "likes", BlockSize: 64, Taken: 12, Leases: []alloc.LeaseStatus{
			{Epoch: 3, Start: 65, End: 129, Next: 70, Committed: 69, ExpiresMs: -5},
			{Epoch: 4, Start: 129, End: 193, Next: 129, Committed: 129, ExpiresMs: 900},
		}},
		{Sequence: "search", Leases: []alloc.LeaseStatus{}, Waiting: true, KVError: "timeout"},
	} {
		old := oldSequenceStatus{Name: st.Sequence, Counts: "likes", Match: "*", Milestones: "every:10",
			Numbered: 12, Unnumbered: 1, Lease: st, ClaimsPending: -1}
		now := leaseholderJSON(st)
		sameJSON(t, "numbering", old, struct {
			Name          string `json:"name"`
			Counts        string `json:"counts"`
			Match         string `json:"match"`
			Milestones    string `json:"milestones"`
			Numbered      uint64 `json:"numbered"`
			Unnumbered    int    `json:"unnumbered"`
			Lease         any    `json:"lease"`
			ClaimsPending int    `json:"claims_pending"`
		}{st.Sequence, "likes", "*", "every:10", 12, 1, now, -1})
	}

	for _, st := range []*alloc.State{
		{Version: 2, HWM: 1, NextEpoch: 1, Dense: alloc.Dense{Pos: 1}},
		{Version: 2, HWM: 400, NextEpoch: 9,
			Free: []alloc.Span{{Start: 5, End: 9}},
			Leases: []alloc.Lease{
				{Epoch: 7, Leaseholder: "eu-1", Span: alloc.Span{Start: 200, End: 264}, Used: 210, Beat: 3},
				{Epoch: 8, Leaseholder: "us-1", Span: alloc.Span{Start: 136, End: 200}, Used: 136, Beat: 1},
			},
			Closed: []alloc.Closed{
				{Epoch: 5, Leaseholder: "us-1", Span: alloc.Span{Start: 1, End: 65}, Used: 60, Folded: true, Base: 0},
				{Epoch: 6, Leaseholder: "eu-1", Span: alloc.Span{Start: 65, End: 136}, Used: 100},
			},
			Dense:   alloc.Dense{Pos: 65, Rank: 59},
			Applied: map[string]string{"us-1": "n1", "eu-1": "n2"},
		},
	} {
		old := oldSequenceView{State: st, Numbered: st.Dense.Rank, Holes: st.Holes()}
		for i := range st.Leases {
			if l := &st.Leases[i]; old.OldestOpen == nil || l.Start < old.OldestOpen.Start {
				old.OldestOpen = l
			}
		}
		sameJSON(t, "sequence", old, sequenceJSON(st))
	}
}

func TestEventLogJSONUnchanged(t *testing.T) {
	st := replication.PublisherStatus{Stream: "events-us", Published: 7, Logged: 9, Error: "no responders"}
	sameJSON(t, "events", st, eventLogJSON(st))
	st.Error = ""
	sameJSON(t, "events", st, eventLogJSON(st))
}
