package replication

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

func randRecord(rng *rand.Rand) *crdt.LikeRecord {
	r := &crdt.LikeRecord{Liked: rng.IntN(2) == 0, HLC: crdt.HLC(rng.Uint64N(1<<60) + 1), Origin: fmt.Sprintf("r%d", rng.IntN(4))}
	for i := range rng.IntN(4) {
		r.Contrib = r.Contrib.Set(fmt.Sprintf("r%d", i), crdt.PN{P: rng.Uint64N(5) + 1, N: rng.Uint64N(3)})
	}
	return r
}

func randDelta(rng *rand.Rand, maxRecs int) *Delta {
	d := &Delta{Replica: "us-1", Region: "us", Incarnation: rng.Uint64(), Seq: rng.Uint64(), SentAtMs: rng.Int64N(1 << 50), Root: rng.Uint64()}
	for i := range rng.IntN(5) {
		d.Vectors = append(d.Vectors, OwnEntry{Kind: storage.Likes, Item: fmt.Sprintf("item%d", i), PN: crdt.PN{P: rng.Uint64(), N: rng.Uint64()}})
	}
	for i := range rng.IntN(maxRecs) { // enough to need multi-byte record lengths
		d.Records = append(d.Records, Record{Item: "item", User: fmt.Sprintf("user%d", i), Rec: randRecord(rng)})
	}
	for i := range rng.IntN(4) {
		k, name := storage.Uniques, fmt.Sprintf("video%d", i)
		if i%2 == 1 {
			k, name = storage.UniquesWindows, crdt.Slot{Key: name, Width: 3600, Start: 7200, Keep: 86400}.Name()
		}
		d.Sketches = append(d.Sketches, OwnPage{Kind: k, Name: name, Page: rng.IntN(crdt.HLLPages), Regs: randRegs(rng)})
	}
	for i := range rng.IntN(3) {
		d.Vectors = append(d.Vectors, OwnEntry{Kind: storage.Budgets, Item: crdt.BudgetInboxName("gift", fmt.Sprint("eu-", i)), PN: crdt.PN{P: rng.Uint64()}})
		rec := randRecord(rng)
		spend := &crdt.Spend{HLC: rec.HLC, Origin: rec.Origin, Amount: -int64(1 + i), Contrib: rec.Contrib}
		d.Records = append(d.Records, Record{Item: "gift", User: fmt.Sprint("order-", i), Rec: spend})
		// A counter's keyed record of the same names is another record.
		keyed := &crdt.KeyedRecord{HLC: rec.HLC, Origin: rec.Origin, Amount: int64(1 + i), Contrib: rec.Contrib}
		d.Records = append(d.Records, Record{Item: "gift", User: fmt.Sprint("order-", i), Rec: keyed})
		d.Asks = append(d.Asks, Ask{Key: fmt.Sprint("gift", i), Want: 1 + rng.Int64N(1<<40)})
	}
	for i := range rng.IntN(3) {
		f := crdt.Flag{Value: crdt.Block{Blocked: rng.IntN(2) == 0}, HLC: crdt.HLC(rng.Uint64N(1<<60) + 1), Origin: "us-1"}
		d.Records = append(d.Records, Record{Item: region.BlockRecordItem, User: fmt.Sprint("user", i), Rec: crdt.FlagRecord(f)})
	}
	for i := range rng.IntN(3) {
		m := &crdt.TypeMeta{Value: crdt.TypeInfo{Owner: "team", Status: crdt.TypeActive, Description: fmt.Sprint("type ", i)}, HLC: crdt.HLC(rng.Uint64N(1<<60) + 1), Origin: "us-1"}
		d.Records = append(d.Records, Record{Item: region.TypeRecordItem, User: fmt.Sprint("video:", i), Rec: m})
	}
	return d
}

// randRegs is a page with a random number of registers set, sparse or
// dense.
func randRegs(rng *rand.Rand) *crdt.HLLPage {
	p := new(crdt.HLLPage)
	for range rng.IntN(2 * crdt.HLLPageSize) {
		p[rng.IntN(crdt.HLLPageSize)] = uint8(1 + rng.IntN(crdt.HLLMaxRho))
	}
	return p
}

func TestDeltaRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		d := randDelta(rng, 300)
		got, err := DecodeDelta(AppendDelta(nil, d))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, d) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, d)
		}
	}
}

// A keyed like action's record (crdt.ToggleName) travels as a keyed
// record and comes back with its outcome; one that would count (a
// contribution) is refused, as a record of no valid name.
func TestToggleRecordRoundTrip(t *testing.T) {
	rec := &crdt.KeyedRecord{}
	rec.SetToggleOutcome("us-1", crdt.MakeHLC(1_700_000_000_000, 3), true)
	name := crdt.ToggleName("video|2", "alice")
	d := &Delta{Replica: "us-1", Region: "us", Records: []Record{{Item: name, User: "tkB", Rec: rec}}}
	got, err := DecodeDelta(AppendDelta(nil, d))
	if err != nil || len(got.Records) != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
	g := got.Records[0]
	kr, ok := g.Rec.(*crdt.KeyedRecord)
	if !ok || g.Item != name || g.User != "tkB" || !kr.Equal(rec) {
		t.Fatalf("got %+v (%T), want %+v", g, g.Rec, rec)
	}
	if liked, applied := kr.ToggleOutcome(); !liked || !applied {
		t.Fatalf("outcome liked %v applied %v", liked, applied)
	}
	if shard.Of(name) != shard.Of("video|2") {
		t.Error("a toggle record is not on its item's shard")
	}
	bad := rec.Clone()
	bad.Contrib = bad.Contrib.Set("us-1", crdt.PN{P: 1})
	d.Records[0].Rec = bad
	if _, err := DecodeDelta(AppendDelta(nil, d)); err == nil {
		t.Error("a toggle record with a contribution decoded")
	}
}

// A record body longer than 127 bytes needs a two-byte length: fixLen must
// shift the body without corrupting it.
func TestFixLenLongRecord(t *testing.T) {
	rec := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "r1"}
	for i := range 20 {
		rec.Contrib = rec.Contrib.Set(fmt.Sprintf("replica-%02d", i), crdt.PN{P: 1})
	}
	d := &Delta{Replica: "a", Region: "b", Records: []Record{{Item: "i", User: "u", Rec: rec}}}
	got, err := DecodeDelta(AppendDelta(nil, d))
	if err != nil || !got.Records[0].Rec.(*crdt.LikeRecord).Equal(rec) {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestPagesAndDigestsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pg := &Page{Next: []byte("b001/r/x/y")}
	for i := range 50 {
		pg.Entries = append(pg.Entries, Entry{Kind: storage.Counters, Item: fmt.Sprintf("k%d", i), Replica: "eu-1", PN: crdt.PN{P: uint64(i)}})
		pg.Records = append(pg.Records, Record{Item: "i", User: fmt.Sprintf("u%d", i), Rec: randRecord(rng)})
		pg.Sketches = append(pg.Sketches, SketchPage{Kind: storage.Uniques, Name: fmt.Sprintf("k%d", i), Replica: "eu-1", Page: i, Regs: randRegs(rng)})
	}
	got, err := DecodePage(AppendPage(nil, pg))
	if err != nil || !reflect.DeepEqual(got, pg) {
		t.Fatalf("page round trip: %v", err)
	}
	q := &PageRequest{Segment: 4095, After: []byte("b fff/r/a/b")}
	gq, err := DecodePageRequest(AppendPageRequest(nil, q))
	if err != nil || !reflect.DeepEqual(gq, q) {
		t.Fatalf("page request round trip: %+v %v", gq, err)
	}
	dig := make([]uint64, storage.Segments)
	for i := range dig {
		dig[i] = rng.Uint64()
	}
	from, gd, err := DecodeDigests(AppendDigests(nil, "ap-1", dig))
	if err != nil || from != "ap-1" || !reflect.DeepEqual(gd, dig) {
		t.Fatalf("digests round trip: %v", err)
	}
	if _, _, err := DecodeDigests(AppendDigests(nil, "ap-1", dig[:10])); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("short digest list accepted: %v", err)
	}
}

func TestDecodersRejectGarbage(t *testing.T) {
	good := AppendDelta(nil, &Delta{Replica: "a", Region: "b", Vectors: []OwnEntry{{Kind: storage.Likes, Item: "i", PN: crdt.PN{P: 1}}}})
	cases := map[string][]byte{
		"empty":         nil,
		"wrong type":    append([]byte{wireV1, typePage}, good[2:]...),
		"wrong version": append([]byte{9}, good[1:]...),
		"truncated":     good[:len(good)-1],
		"trailing":      append(append([]byte(nil), good...), 0),
		"bad kind":      bytes.Replace(good, []byte{'l', 1, 'i'}, []byte{'z', 1, 'i'}, 1),
		"bad id":        bytes.Replace(good, []byte{1, 'a'}, []byte{1, '/'}, 1),
		"huge count":    {wireV1, typeDelta, 1, 'a', 1, 'b', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	var regs crdt.HLLPage
	regs[5] = 3
	sk := AppendDelta(nil, &Delta{Replica: "a", Region: "b", Sketches: []OwnPage{{Kind: storage.Uniques, Name: "v", Page: 9, Regs: &regs}}})
	cases["sketch kind"] = bytes.Replace(sk, []byte{'u', 1, 'v'}, []byte{'l', 1, 'v'}, 1)
	cases["sketch name"] = bytes.Replace(sk, []byte{'u', 1, 'v'}, []byte{'u', 1, '/'}, 1)
	cases["sketch page"] = bytes.Replace(sk, []byte{'v', 9}, []byte{'v', 64}, 1)
	cases["sketch rho"] = bytes.Replace(sk, []byte{5, 3}, []byte{5, 52}, 1)
	cases["sketch truncated"] = sk[:len(sk)-1]
	ask := AppendDelta(nil, &Delta{Replica: "a", Region: "b", Asks: []Ask{{Key: "g", Want: 5}}})
	cases["empty asks"] = append(ask[:len(ask)-4], 0)                                  // sketches 0, asks 0
	cases["no asks after empty sketches"] = ask[:len(ask)-4]                           // sketches 0, nothing after
	cases["ask for nothing"] = append(ask[:len(ask)-1], 0)                             // want 0
	cases["ask bad key"] = bytes.Replace(ask, []byte{1, 'g', 5}, []byte{1, '~', 5}, 1) // not an id
	budgetRec := &crdt.LikeRecord{HLC: 5, Origin: "a", Contrib: crdt.Vector{{Replica: "a", PN: crdt.PN{N: 1}}}}
	cases["budget name on a like record"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: "~g", User: "u", Rec: budgetRec}}})
	flagWithContrib := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "a", Contrib: crdt.Vector{{Replica: "a", PN: crdt.PN{P: 1}}}}
	cases["block flag with a contribution"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: region.BlockRecordItem, User: "u", Rec: flagWithContrib}}})
	keyedFlag := &crdt.KeyedRecord{HLC: 5, Origin: "a", Amount: 1}
	cases["keyed block flag"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: region.BlockRecordItem, User: "u", Rec: keyedFlag}}})
	likeAsType := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "a"}
	cases["like record as a type"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: region.TypeRecordItem, User: "t", Rec: likeAsType}}})
	typeAsItem := &crdt.TypeMeta{Value: crdt.TypeInfo{Status: crdt.TypeActive}, HLC: 5, Origin: "a"}
	cases["type under an item's name"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: "post1", User: "t", Rec: typeAsItem}}})
	cases["type of an unknown status"] = AppendDelta(nil, &Delta{Replica: "a", Region: "b", Records: []Record{{Item: region.TypeRecordItem, User: "t",
		Rec: &crdt.TypeMeta{Value: crdt.TypeInfo{Status: "paused"}, HLC: 5, Origin: "a"}}}})
	for name, data := range cases {
		if _, err := DecodeDelta(data); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: err %v, want ErrBadMessage", name, err)
		}
	}
	if _, err := DecodePageRequest(AppendPageRequest(nil, &PageRequest{Segment: storage.Segments})); !errors.Is(err, ErrBadMessage) {
		t.Errorf("out-of-range segment accepted: %v", err)
	}
}

// Decoders face whatever anyone on the NATS account publishes: they must
// never panic, and what they accept must survive a re-encode.
func FuzzDecodeDelta(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	for range 5 {
		f.Add(AppendDelta(nil, randDelta(rng, 3)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := DecodeDelta(data)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error not ErrBadMessage: %v", err)
			}
			return
		}
		again, err := DecodeDelta(AppendDelta(nil, d))
		if err != nil || !reflect.DeepEqual(again, d) {
			t.Fatalf("re-encode changed the delta: %v", err)
		}
	})
}

func FuzzDecodePage(f *testing.F) {
	rng := rand.New(rand.NewPCG(2, 2))
	f.Add(AppendPage(nil, &Page{Entries: []Entry{{Kind: storage.Likes, Item: "i", Replica: "r", PN: crdt.PN{P: 1}}}, Records: []Record{{Item: "i", User: "u", Rec: randRecord(rng)}}, Next: []byte("k")}))
	f.Add(AppendPageRequest(nil, &PageRequest{Segment: 7, After: []byte("x")}))
	f.Add(AppendPage(nil, &Page{Records: []Record{{Item: region.BlockRecordItem, User: "u",
		Rec: crdt.FlagRecord(crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: 9, Origin: "eu-1"})}}}))
	f.Add(AppendPage(nil, &Page{Records: []Record{{Item: region.TypeRecordItem, User: "video",
		Rec: &crdt.TypeMeta{Value: crdt.TypeInfo{Owner: "o", Status: crdt.TypeInactive, Description: "d"}, HLC: 9, Origin: "eu-1"}}}}))
	f.Add(AppendPage(nil, &Page{Next: []byte("k"), Sketches: []SketchPage{{Kind: storage.Uniques, Name: "v", Replica: "r", Page: 3, Regs: randRegs(rng)},
		{Kind: storage.UniquesWindows, Name: crdt.Slot{Key: "v", Width: 3600, Start: 0, Keep: 0}.Name(), Replica: "r", Page: 63, Regs: randRegs(rng)}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if pg, err := DecodePage(data); err == nil {
			again, err := DecodePage(AppendPage(nil, pg))
			if err != nil || !reflect.DeepEqual(again, pg) {
				t.Fatalf("re-encode changed the page: %v", err)
			}
		}
		if q, err := DecodePageRequest(data); err == nil {
			again, err := DecodePageRequest(AppendPageRequest(nil, q))
			if err != nil || !reflect.DeepEqual(again, q) {
				t.Fatalf("re-encode changed the request: %v", err)
			}
		}
		_, _, _ = DecodeDigests(data)
	})
}

func FuzzDecodeDigests(f *testing.F) {
	digests := make([]uint64, storage.Segments)
	for i := range digests {
		digests[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	f.Add(AppendDigests(nil, "us-1", digests))
	f.Add(AppendDigests(nil, "eu-1", digests[:3]))
	f.Fuzz(func(t *testing.T, data []byte) {
		replica, ds, err := DecodeDigests(data)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error not ErrBadMessage: %v", err)
			}
			return
		}
		r2, ds2, err := DecodeDigests(AppendDigests(nil, replica, ds))
		if err != nil || r2 != replica || !reflect.DeepEqual(ds2, ds) {
			t.Fatalf("re-encode changed the digests: %v", err)
		}
	})
}

// The anti-entropy requests' bytes are fixed: peers of other versions
// send and read them.
func TestAntiEntropyRequestBytesAreFixed(t *testing.T) {
	q := AppendPageRequest(nil, &PageRequest{Segment: 4095, After: []byte("bfff/r/a/b")})
	d := AppendDigests(nil, "us-1", []uint64{1, 2})
	if got, want := hex.EncodeToString(q), "0103ff1f0a626666662f722f612f62"; got != want {
		t.Errorf("page request %s, want %s", got, want)
	}
	if got, want := hex.EncodeToString(d), "01020475732d310201000000000000000200000000000000"; got != want {
		t.Errorf("digests %s, want %s", got, want)
	}
	// Shards 3, 4, 5 and 1023, summary 9: two runs, (3, 2) and (1017, 0).
	var ss shard.Set
	for _, s := range []int{3, 4, 5, 1023} {
		ss.Add(s)
	}
	dq := AppendDigestsRequest(nil, &DigestsRequest{Shards: ss, Summary: 9})
	if got, want := hex.EncodeToString(dq), "0105020302f907000900000000000000"; got != want {
		t.Errorf("digests request %s, want %s", got, want)
	}
	eq := AppendShardDigests(nil, &ShardDigests{Replica: "us-1", Equal: true})
	if got, want := hex.EncodeToString(eq), "01060475732d3101"; got != want {
		t.Errorf("equal shard digests %s, want %s", got, want)
	}
	sd := AppendShardDigests(nil, &ShardDigests{Replica: "us-1", Digests: []uint64{1, 2, 3, 4}})
	if got, want := hex.EncodeToString(sd), "01060475732d3100040100000000000000020000000000000003000000000000000400000000000000"; got != want {
		t.Errorf("shard digests %s, want %s", got, want)
	}
}

// A digests request carries any set of shards and its summary, and its
// answer either equal or the digests of whole shards.
func TestShardDigestsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	sets := []shard.Set{{}, shard.All()}
	var alt, one shard.Set
	for s := 0; s < shard.Count; s += 2 {
		alt.Add(s) // the most runs a set has
	}
	one.Add(shard.Count - 1)
	sets = append(sets, alt, one)
	for range 50 {
		var ss shard.Set
		for range rng.IntN(300) {
			ss.Add(rng.IntN(shard.Count))
		}
		sets = append(sets, ss)
	}
	for _, ss := range sets {
		q := &DigestsRequest{Shards: ss, Summary: rng.Uint64()}
		got, err := DecodeDigestsRequest(AppendDigestsRequest(nil, q))
		if err != nil || *got != *q {
			t.Fatalf("request of %d shards came back as %d shards (%v)", ss.Len(), got.Shards.Len(), err)
		}
		if ss.Len() == 0 {
			continue
		}
		a := &ShardDigests{Replica: "eu-1", Digests: make([]uint64, ss.Len()*storage.SegmentsPerShard)}
		for i := range a.Digests {
			a.Digests[i] = rng.Uint64()
		}
		back, err := DecodeShardDigests(AppendShardDigests(nil, a))
		if err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("answer of %d digests came back changed (%v)", len(a.Digests), err)
		}
	}
	bad := map[string][]byte{
		"runs that touch":        {wireV1, typeDigestsReq, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"run past the last":      {wireV1, typeDigestsReq, 1, 0x80, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"run long past the last": {wireV1, typeDigestsReq, 1, 1, 0xff, 0x07, 0, 0, 0, 0, 0, 0, 0, 0},
		"too many runs":          {wireV1, typeDigestsReq, 0x81, 0x04},
		"no summary":             {wireV1, typeDigestsReq, 0},
		"summary and more":       {wireV1, typeDigestsReq, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
	}
	for name, data := range bad {
		if _, err := DecodeDigestsRequest(data); !errors.Is(err, ErrBadMessage) {
			t.Errorf("request with %s: err %v, want ErrBadMessage", name, err)
		}
	}
	id := []byte{wireV1, typeShardDigests, 4, 'u', 's', '-', '1'}
	badAnswers := map[string][]byte{
		"flag 2":                append(slices.Clone(id), 2),
		"equal and digests":     append(slices.Clone(id), 1, 4, 0, 0, 0, 0, 0, 0, 0, 0),
		"no digests, not equal": append(slices.Clone(id), 0, 0),
		"part of a shard":       append(slices.Clone(id), 0, 1, 1, 0, 0, 0, 0, 0, 0, 0),
		"fewer than counted":    append(slices.Clone(id), 0, 4, 1, 0, 0, 0, 0, 0, 0, 0),
		"more than every shard": append(slices.Clone(id), 0, 0x84, 0x20),
		"no flag":               slices.Clone(id),
	}
	for name, data := range badAnswers {
		if _, err := DecodeShardDigests(data); !errors.Is(err, ErrBadMessage) {
			t.Errorf("answer with %s: err %v, want ErrBadMessage", name, err)
		}
	}
}

func FuzzDecodeDigestsRequest(f *testing.F) {
	var ss shard.Set
	for _, s := range []int{0, 1, 2, 9, 700, 1023} {
		ss.Add(s)
	}
	f.Add(AppendDigestsRequest(nil, &DigestsRequest{Shards: ss, Summary: 42}))
	f.Add(AppendDigestsRequest(nil, &DigestsRequest{Shards: shard.All()}))
	f.Add(AppendShardDigests(nil, &ShardDigests{Replica: "us-1", Equal: true}))
	f.Add(AppendShardDigests(nil, &ShardDigests{Replica: "us-1", Digests: make([]uint64, 2*storage.SegmentsPerShard)}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if q, err := DecodeDigestsRequest(data); err == nil {
			again, err := DecodeDigestsRequest(AppendDigestsRequest(nil, q))
			if err != nil || *again != *q {
				t.Fatalf("re-encode changed the request: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
		if a, err := DecodeShardDigests(data); err == nil {
			again, err := DecodeShardDigests(AppendShardDigests(nil, a))
			if err != nil || !reflect.DeepEqual(again, a) {
				t.Fatalf("re-encode changed the answer: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
	})
}

// deltaSender reads the sender and incarnation of any delta encoding, and
// refuses what is not one.
func TestDeltaSender(t *testing.T) {
	d := &Delta{Replica: "us-1", Region: "us", Incarnation: 0xfeed, Seq: 3, Vectors: []OwnEntry{{Kind: storage.Likes, Item: "post", PN: crdt.PN{P: 1}}}}
	b := AppendDelta(nil, d)
	if rep, inc, ok := deltaSender(b); !ok || string(rep) != "us-1" || inc != 0xfeed {
		t.Fatalf("deltaSender: %q %x %v", rep, inc, ok)
	}
	for _, bad := range [][]byte{nil, b[:5], AppendDigests(nil, "us-1", []uint64{1})} {
		if _, _, ok := deltaSender(bad); ok {
			t.Fatalf("deltaSender(%x) took it", bad)
		}
	}
}

func FuzzDecodeParts(f *testing.F) {
	ps := &Parts{Segment: 4095}
	for i := range ps.Sums {
		ps.Sums[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	f.Add(AppendParts(nil, ps))
	ps.Sums[5], ps.Sums[63] = 0, 0
	f.Add(AppendParts(nil, ps))
	f.Add(AppendPartsRequest(nil, &PartsRequest{Segment: 12}))
	f.Add(AppendPartsRequest(nil, &PartsRequest{Segment: 4096}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if q, err := DecodePartsRequest(data); err == nil {
			again, err := DecodePartsRequest(AppendPartsRequest(nil, q))
			if err != nil || *again != *q {
				t.Fatalf("re-encode changed the request: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
		if a, err := DecodeParts(data); err == nil {
			again, err := DecodeParts(AppendParts(nil, a))
			if err != nil || *again != *a {
				t.Fatalf("re-encode changed the parts: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
	})
}

func FuzzDecodeDiff(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 3))
	f.Add(AppendDiffRequest(nil, &DiffRequest{Segment: 7, Parts: 1<<63 | 5, Have: []uint64{1, 2, 3}, After: []byte("b007/r/a/b")}))
	f.Add(AppendDiffRequest(nil, &DiffRequest{Segment: 0, Parts: 1}))
	f.Add(AppendDiffRequest(nil, &DiffRequest{Segment: 9, For: "eu-2", Parts: 3, Have: []uint64{4}, After: []byte("b009/v/l/x/us-1")}))
	big := &Page{Next: []byte("k")}
	for i := range 50 {
		big.Entries = append(big.Entries, Entry{Kind: storage.Likes, Item: fmt.Sprintf("item%d", i), Replica: "us-1", PN: crdt.PN{P: uint64(i)}})
	}
	f.Add(AppendDiffPage(nil, big)) // compressed
	f.Add(AppendDiffPage(nil, &Page{Records: []Record{{Item: "i", User: "u", Rec: randRecord(rng)}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if q, err := DecodeDiffRequest(data); err == nil {
			again, err := DecodeDiffRequest(AppendDiffRequest(nil, q))
			if err != nil || !reflect.DeepEqual(again, q) {
				t.Fatalf("re-encode changed the request: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
		if pg, err := DecodeDiffPage(data); err == nil {
			again, err := DecodeDiffPage(AppendDiffPage(nil, pg))
			if err != nil || !reflect.DeepEqual(again, pg) {
				t.Fatalf("re-encode changed the page: %v", err)
			}
		} else if !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error not ErrBadMessage: %v", err)
		}
	})
}

// A diff page of many like entries is sent compressed, and smaller than
// the plain page; a tiny one is sent as is. Both decode to the page.
func TestDiffPageCompresses(t *testing.T) {
	big := &Page{Next: []byte("b001/v/l/item99/us-1")}
	for i := range 100 {
		big.Entries = append(big.Entries, Entry{Kind: storage.Likes, Item: fmt.Sprintf("item%d", i), Replica: "us-1", PN: crdt.PN{P: uint64(i)}})
	}
	small := &Page{Entries: big.Entries[:1]}
	for _, c := range []struct {
		pg    *Page
		codec byte
	}{{big, 1}, {small, 0}} {
		b := AppendDiffPage(nil, c.pg)
		if b[2] != c.codec {
			t.Errorf("%d entries: codec %d, want %d", len(c.pg.Entries), b[2], c.codec)
		}
		if plain := len(AppendPage(nil, c.pg)); c.codec == 1 && len(b) >= plain {
			t.Errorf("compressed page %d bytes, plain %d", len(b), plain)
		}
		got, err := DecodeDiffPage(b)
		if err != nil || !reflect.DeepEqual(got, c.pg) {
			t.Errorf("%d entries: decode %v, %+v", len(c.pg.Entries), err, got)
		}
	}
	// An unknown codec is refused.
	b := AppendDiffPage(nil, small)
	b[2] = 7
	if _, err := DecodeDiffPage(b); !errors.Is(err, ErrBadMessage) {
		t.Errorf("codec 7: err %v, want ErrBadMessage", err)
	}
}

// Parts with few nonzero digests are sent sparsely: 8 bytes of mask and
// 8 per nonzero part.
func TestPartsAreSparse(t *testing.T) {
	ps := &Parts{Segment: 3}
	ps.Sums[0], ps.Sums[9], ps.Sums[63] = 1, 2, 3
	b := AppendParts(nil, ps)
	if want := 2 + 1 + 8 + 3*8; len(b) != want {
		t.Fatalf("%d bytes, want %d", len(b), want)
	}
	got, err := DecodeParts(b)
	if err != nil || *got != *ps {
		t.Fatalf("decode: %v, %+v", err, got)
	}
}
