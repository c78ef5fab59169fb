package replication

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// A delta and an anti-entropy page carrying a like record, a counter's
// keyed record, a budget spend and a block flag, as earlier versions sent
// them, captured byte for byte: peers of a mixed-version cluster send
// exactly these, so they must decode to the same records and encode back
// unchanged.
const (
	goldenDelta = "\x01\x01\x04eu-1\x02eu\a\x00\x00\x00\x00\x00\x00\x00\t\x81\xd0\x95\xff\xbc1\x05\x00\x00\x00\x00\x00\x00\x00\x00\x04" +
		goldenRecordsWire
	goldenPage = "\x01\x04\x00\x04" + goldenRecordsWire + "\x12bbb1/k/~bud/idem-2"

	goldenRecordsWire = "\x06post:1\x05alice%\x01\x05\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04eu-1\x98\xc8\x95\xff\xbc1\x02\x04eu-1\x01\x00\x04us-1\x01\x01" +
		"\x03cnt\x06idem-1(\x01\x0f\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04us-1\x80\x01\x98\xc8\x95\xff\xbc1\x02\x02\x04eu-1@@\x04us-1@\x00" +
		"\x04~bud\x06idem-2 \x01\x03\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04eu-1\t\x02\x04eu-1\x00\x05\x04us-1\x05\x05" +
		"\x01!\amallory\x11\x01\x01\x83\x80\x80\xc0\xd6\xfc\xf3\xc5\x01\x04eu-1\x00"
)

func goldenWireRecords() []Record {
	h := crdt.MakeHLC(1700000000000, 3)
	return []Record{
		{Item: "post:1", User: "alice", Rec: &crdt.LikeRecord{Liked: true, HLC: h, Origin: "eu-1", At: 1699999999000,
			Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 1}}, {Replica: "us-1", PN: crdt.PN{P: 1, N: 1}}}}},
		{Item: "cnt", User: "idem-1", Rec: &crdt.KeyedRecord{HLC: h, Origin: "us-1", Amount: 64, Asked: 1,
			At: 1699999999000, Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{P: 64, N: 64}}, {Replica: "us-1", PN: crdt.PN{P: 64}}}}},
		{Item: "bud", User: "idem-2", Rec: &crdt.Spend{HLC: h, Origin: "eu-1", Amount: -5,
			Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{N: 5}}, {Replica: "us-1", PN: crdt.PN{P: 5, N: 5}}}}},
		{Item: region.BlockRecordItem, User: "mallory", Rec: crdt.FlagRecord(crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: h, Origin: "eu-1"})},
	}
}

func sameRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].Item != want[i].Item || got[i].User != want[i].User || !reflect.DeepEqual(got[i].Rec, want[i].Rec) {
			t.Errorf("%s: record %d is %s/%s %+v, want %s/%s %+v", what, i, got[i].Item, got[i].User, got[i].Rec,
				want[i].Item, want[i].User, want[i].Rec)
		}
	}
}

func TestGoldenWire(t *testing.T) {
	d, err := DecodeDelta([]byte(goldenDelta))
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "delta", d.Records, goldenWireRecords())
	if re := AppendDelta(nil, d); !bytes.Equal(re, []byte(goldenDelta)) {
		t.Errorf("delta re-encoded as %q, want %q", re, goldenDelta)
	}
	if re := AppendDelta(nil, &Delta{Replica: "eu-1", Region: "eu", Incarnation: 7, Seq: 9, SentAtMs: 1700000000001, Root: 5,
		Records: goldenWireRecords()}); !bytes.Equal(re, []byte(goldenDelta)) {
		t.Errorf("delta encoded as %q, want %q", re, goldenDelta)
	}
	pg, err := DecodePage([]byte(goldenPage))
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "page", pg.Records, goldenWireRecords())
	if re := AppendPage(nil, pg); !bytes.Equal(re, []byte(goldenPage)) {
		t.Errorf("page re-encoded as %q, want %q", re, goldenPage)
	}
}
