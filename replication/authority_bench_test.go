package replication

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// benchRecords are like records as a peer "eu" sends them: its own
// contribution and register, and relayed parts of "us" and "ap".
func benchRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Item: fmt.Sprintf("item-%d", i%100), User: fmt.Sprintf("user-%d", i), Rec: &crdt.LikeRecord{
			Liked: true, HLC: crdt.MakeHLC(1_700_000_000_000+int64(i), 0), Origin: "eu",
			Contrib: crdt.Vector{}.Set("ap", crdt.PN{P: 1}).Set("eu", crdt.PN{P: 1, N: 1}).Set("us", crdt.PN{N: 1}),
		}}
	}
	return recs
}

func benchReplicator(b *testing.B, store bool) *Replicator {
	b.Helper()
	r := &Replicator{self: "us", peers: map[string]*peer{"eu": {id: "eu"}, "ap": {id: "ap"}}, retired: map[string]bool{},
		m: newMetrics(nil)}
	r.storePeerSet()
	if !store {
		return r
	}
	st, err := storage.Open(storage.Config{Dir: b.TempDir(), Durability: storage.DurabilityNone})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	rep, err := region.New(region.Config{Region: "us", Replica: "us", Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rep.Close() })
	r.cfg.Replica = rep
	return r
}

// BenchmarkVetRecord is the cost of cutting one received record to its
// sender's portion (authority.go), the check every merge now pays.
func BenchmarkVetRecord(b *testing.B) {
	r := benchReplicator(b, false)
	recs := benchRecords(1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := r.vetRecord("eu", recs[i%len(recs)].Rec, fastPath); !ok {
			b.Fatal("nothing left")
		}
	}
}

// BenchmarkMergeDelta merges fast-path deltas of 256 records each into a
// real replica (Pebble, no fsync): the whole receive path the check is
// part of. Per record.
func BenchmarkMergeDelta(b *testing.B) {
	r := benchReplicator(b, true)
	const per = 256
	recs := benchRecords(b.N + per)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += per {
		n := min(per, b.N-i)
		r.merge(ctx, []*Delta{{Replica: "eu", Region: "eu", Records: recs[i : i+n]}})
	}
}
