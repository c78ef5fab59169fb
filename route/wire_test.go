package route_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/quick"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
)

var sampleRequests = []route.Request{
	{Kind: route.KindOps, From: "us-1", Shard: 12, DeadlineMs: 1764380000000, Ops: []route.Op{
		{Kind: route.OpSpend, Key: "pool", By: 5, Idem: "buy-1"},
		{Kind: route.OpFence, Key: "shop", By: 5, Idem: "buy-1", AtMs: 1764380000001},
		{Kind: route.OpCashback, Key: "pool", Merchant: "shop", User: "ann", By: 5, Idem: "buy-2", AtMs: -1},
		{Kind: route.OpCallOff, Key: "pool", By: 5, Idem: "buy-1", AtMs: 1764380000001},
		{Kind: route.OpCallOffCredit, Key: "ann", By: 5, Idem: "buy-1"},
	}},
	{Kind: route.KindOps, From: "us-2", Shard: 40, Ops: []route.Op{
		{Kind: route.OpToggle, Key: "video", User: "ann", Idem: "t-1"},
		{Kind: route.OpUniques, Key: "visitors", List: []string{"a", "b", ""}},
	}},
	{Kind: route.KindOps, From: "us-3", Shard: 41, Ops: []route.Op{
		{Kind: route.OpGet, Key: "views"},
		{Kind: route.OpUniqueCount, List: []string{"visitors", "visitors:eu"}},
		{Kind: route.OpLiked, Key: "video", User: "ann"},
		{Kind: route.OpLikeCount, Key: "video"},
		{Kind: route.OpLikers, Key: "video", User: "ann", By: 10},
		{Kind: route.OpAllLikers, Key: "video", By: 10000},
	}},
	{Kind: route.KindOps, From: "us-2", Shard: 44, Ops: []route.Op{
		{Kind: route.OpWindow, Key: "video", Span: route.Span{Family: 'l', FromMs: 1767225540000, ToMs: 1767225600000}},
	}},
	{Kind: route.KindOps, From: "us-2", Shard: 44, Ops: []route.Op{
		{Kind: route.OpWindow, Key: "", Span: route.Span{Family: 'c', LastMs: 60000}},
	}},
	{Kind: route.KindOps, From: "us-2", Shard: 44, Ops: []route.Op{
		{Kind: route.OpSeries, List: []string{"views", ""}, Span: route.Span{Family: 'c', FromMs: 1, ToMs: 120001, Step: 60, ByRegion: true}},
	}},
	{Kind: route.KindOps, From: "us-3", Shard: 42, Ops: []route.Op{
		{Kind: route.OpCounterView, Key: "views"},
		{Kind: route.OpLikesView, Key: "video#p3"},
		{Kind: route.OpLikedView, Key: "video", User: "ann"},
		{Kind: route.OpLikersView, Key: "video", User: "ann", By: 100},
		{Kind: route.OpBudgetView, Key: "pool"},
	}},
	{Kind: route.KindOps, From: "us-1", Shard: 43, Ops: []route.Op{
		{Kind: route.OpImportLike, Key: "video", User: "ann", AtMs: 1577836800000},
		{Kind: route.OpImportUnlike, Key: "video", User: "bob", AtMs: 1577836800001, Idem: "u-1"},
		{Kind: route.OpImportIncr, Key: "views", By: 3, Idem: "imp:00.0", AtMs: 1577836800002},
		{Kind: route.OpImportUniques, Key: "visitors", List: []string{"ann"}, AtMs: 1577836800003},
	}},
	{Kind: route.KindOps, From: "us-1", Shard: 44, Ops: []route.Op{route.HistoryOp("video|2", "ann", 100)}},
}

var sampleResults = []route.Result{
	{Value: 95, Rights: 40},
	{Code: "budget_exhausted", Msg: "budget exhausted", Refused: "shop", Value: 3, Merchant: -2, User: 1 << 40, Duplicate: true},
	{Value: 7, Liked: true, Changed: true},
	{Value: 1200, Approx: true, Counted: 100},
	{Value: 3, Found: true},
	{Users: []string{"ann", "bob", ""}, More: true},
	{Users: []string{"cy"}},
	{Value: 12, Found: true, Detail: &route.Detail{Vector: crdt.Vector{{Replica: "us-1", PN: crdt.PN{P: 14, N: 2}}, {Replica: "us-2", PN: crdt.PN{N: 1}}},
		Unreconciled: 2, ApproxError: 0.01, Stale: true, Staleness: map[string]int64{"us-2": 40, "us-3": -1}}},
	{Liked: true, Detail: &route.Detail{Origin: "us-2", HLCs: []uint64{1 << 60}}},
	{Users: []string{"ann", "bob"}, More: true, Detail: &route.Detail{HLCs: []uint64{7, 8}}},
	{Detail: &route.Detail{}},
	{Value: 7, Rights: 4, Detail: &route.Detail{Granted: 10, Spent: 3, Rights: map[string]int64{"eu-1": 3, "us-1": 4}, Unreconciled: 1, Origin: "us-1"}},
}

var sampleAnswers = []route.Answer{
	{Kind: route.NotServed, Reason: "shard 353 is not held here"},
	{Kind: route.Served, Body: route.MarshalResults(sampleResults)},
}

// Every request and answer reads back as it was written.
func TestRoundTrip(t *testing.T) {
	for _, r := range sampleRequests {
		got, err := route.UnmarshalRequest(r.Marshal())
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !bytes.Equal(got.Marshal(), r.Marshal()) || got.Kind != r.Kind || len(got.Ops) != len(r.Ops) {
			t.Fatalf("read back %+v, wrote %+v", got, r)
		}
	}
	for _, a := range sampleAnswers {
		got, err := route.UnmarshalAnswer(a.Marshal())
		if err != nil {
			t.Fatalf("%+v: %v", a, err)
		}
		if !bytes.Equal(got.Marshal(), a.Marshal()) || got.Kind != a.Kind || got.Reason != a.Reason || !bytes.Equal(got.Body, a.Body) {
			t.Fatalf("read back %+v, wrote %+v", got, a)
		}
	}
}

// Typed operations' results read back field for field.
func TestResultsRoundTrip(t *testing.T) {
	got, err := route.UnmarshalResults(route.MarshalResults(sampleResults))
	if err != nil || len(got) != len(sampleResults) {
		t.Fatalf("%v %v", got, err)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], sampleResults[i]) {
			t.Fatalf("read back %+v, wrote %+v", got[i], sampleResults[i])
		}
	}
	if got, err := route.UnmarshalResults(route.MarshalResults(nil)); err != nil || len(got) != 0 {
		t.Fatalf("no results: %v %v", got, err)
	}
}

// Any operations of arbitrary fields read back field for field.
func TestOpsRoundTripProperty(t *testing.T) {
	f := func(kinds []uint8, key, user, merchant, idem string, by, at int64, list []string) bool {
		r := route.Request{Kind: route.KindOps, Shard: 3}
		for _, k := range kinds {
			o := route.Op{Kind: route.OpKind(k%numOpKinds + 1), Key: key, User: user, Merchant: merchant, Idem: idem, By: by, AtMs: at}
			if (o.Kind == route.OpUniques || o.Kind == route.OpUniqueCount || o.Kind == route.OpImportUniques) && len(list) > 0 {
				o.List = list
			}
			r.Ops = append(r.Ops, o)
		}
		got, err := route.UnmarshalRequest(r.Marshal())
		if err != nil || len(got.Ops) != len(r.Ops) {
			return false
		}
		return reflect.DeepEqual(got.Ops, r.Ops)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

// numOpKinds is how many operation kinds there are (route.OpHistory is
// the last).
const numOpKinds = uint8(route.OpHistory)

// The reads are OpGet through OpBudgetView, and OpHistory: the backfills,
// numbered between them, are writes (a holder answers a request of reads
// from its view and never by its writer).
func TestReadKinds(t *testing.T) {
	for k := route.OpKind(1); k <= route.OpKind(numOpKinds); k++ {
		if want := k >= route.OpGet && k <= route.OpBudgetView || k == route.OpHistory; k.Read() != want {
			t.Errorf("kind %d: Read() = %v, want %v", k, k.Read(), want)
		}
	}
}

// Any results of arbitrary fields read back field for field.
func TestResultsRoundTripProperty(t *testing.T) {
	f := func(code, msg string, value int64, flags uint8, users []string, origin string, hlcs []uint64, p, n uint64, unrec int64) bool {
		r := route.Result{Code: code, Msg: msg, Value: value, Duplicate: flags&1 != 0, Liked: flags&2 != 0, Changed: flags&4 != 0,
			Approx: flags&8 != 0, Found: flags&16 != 0, More: flags&32 != 0}
		if len(users) > 0 {
			r.Users = users
		}
		if flags&64 != 0 {
			r.Detail = &route.Detail{Origin: origin, Unreconciled: unrec, Stale: flags&128 != 0, ApproxError: float64(flags) / 256}
			if len(hlcs) > 0 {
				r.Detail.HLCs = hlcs
			}
			if p|n != 0 {
				r.Detail.Vector = crdt.Vector{{Replica: origin, PN: crdt.PN{P: p, N: n}}}
				r.Detail.Staleness = map[string]int64{origin: unrec}
				r.Detail.Rights, r.Detail.Granted, r.Detail.Spent = map[string]int64{origin: value, "": unrec}, value, -unrec
			}
		}
		got, err := route.UnmarshalResults(route.MarshalResults([]route.Result{r, {}, r}))
		return err == nil && reflect.DeepEqual(got, []route.Result{r, {}, r})
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

// Operations of kinds that carry no list encode as before the list was
// added (a replica of the previous build reads them), and a list on them
// is not sent.
func TestOpsWithoutListEncodeAsBefore(t *testing.T) {
	r := route.Request{Kind: route.KindOps, Shard: 1, Ops: []route.Op{{Kind: route.OpIncr, Key: "k", By: 2, List: []string{"dropped"}}}}
	want := []byte{route.Version, byte(route.KindOps), 0, 2, 0, 0, 1, byte(route.OpIncr), 1, 'k', 0, 0, 0, 4, 0}
	if got := r.Marshal(); !bytes.Equal(got, want) {
		t.Fatalf("encoded %v, want %v", got, want)
	}
}

// Any request's header fields, and any answer, read back field for
// field.
func TestRoundTripProperty(t *testing.T) {
	f := func(from string, shard uint16, deadline int64, served bool, reason string, body []byte) bool {
		r := route.Request{Kind: route.KindOps, From: from, Shard: int(shard % 1024), DeadlineMs: deadline}
		got, err := route.UnmarshalRequest(r.Marshal())
		if err != nil || got.Kind != r.Kind || got.From != from || got.Shard != r.Shard || got.DeadlineMs != deadline {
			return false
		}
		a := route.Answer{Kind: route.NotServed, Reason: reason, Body: body}
		if served {
			a.Kind = route.Served
		}
		ga, err := route.UnmarshalAnswer(a.Marshal())
		return err == nil && ga.Kind == a.Kind && ga.Reason == reason && bytes.Equal(ga.Body, body)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

// What a decoder refuses: another version, an unknown kind, a length past
// the end, trailing bytes, a count past its bound.
func TestRefused(t *testing.T) {
	good := sampleRequests[0].Marshal()
	bad := map[string][]byte{
		"empty":             nil,
		"version 2":         append([]byte{2}, good[1:]...),
		"kind 0":            append([]byte{route.Version, 0}, good[2:]...),
		"kind 9":            append([]byte{route.Version, 9}, good[2:]...),
		"cut":               good[:len(good)-1],
		"trailing":          append(append([]byte{}, good...), 0),
		"length past end":   {route.Version, byte(route.KindOps), 0xff, 0xff, 0x03},
		"client address":    {route.Version, byte(route.KindOps), 0, 0, 0, 1, 'x', 0},
		"op kind 0":         {route.Version, byte(route.KindOps), 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
		"op kind past last": {route.Version, byte(route.KindOps), 0, 0, 0, 0, 1, numOpKinds + 1, 0, 0, 0, 0, 0, 0},
		"list past end":     {route.Version, byte(route.KindOps), 0, 0, 0, 0, 1, byte(route.OpUniques), 0, 0, 0, 0, 0, 0, 2, 1, 'a'},
		"list past max":     {route.Version, byte(route.KindOps), 0, 0, 0, 0, 1, byte(route.OpUniques), 0, 0, 0, 0, 0, 0, 0x81, 0x80, 0x04},
		"ops past max":      {route.Version, byte(route.KindOps), 0, 0, 0, 0, 0xff, 0xff, 0x7f},
	}
	// Kinds 1, 2 and 3 were a whole HTTP request, a gathered HTTP read and
	// a RESP command's bytes: their numbers are never taken again,
	// whatever follows them.
	for k := byte(1); k <= 3; k++ {
		for _, b := range [][]byte{append([]byte{route.Version, k}, good[2:]...), {route.Version, k, 0, 0, 0, 0}} {
			if _, err := route.UnmarshalRequest(b); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown request kind %d", k)) {
				t.Errorf("kind %d (once whole HTTP or RESP): %v, want it refused as unknown", k, err)
			}
		}
	}
	for name, b := range bad {
		if _, err := route.UnmarshalRequest(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":          nil,
		"flags 128":      {route.Version, 1, 0, 0, 0, 0, 0, 0, 0, 0, 128},
		"empty users":    {route.Version, 1, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0},
		"users past end": {route.Version, 1, 0, 0, 0, 0, 0, 0, 0, 0, 64, 3, 1, 'a'},
		"count past end": {route.Version, 0xff, 0x01},
		"trailing":       append(route.MarshalResults(sampleResults), 0),
		// A view read's detail: its vector must be a valid one, its flag a
		// flag, its error a fraction, each peer once.
		"detail cut":          {route.Version, 1, 0, 0, 0, 0, 0, 0, 0, 0, 128, 0, 0},
		"vector out of order": withDetail(2, 1, 'b', 1, 0, 1, 'a', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		"vector zero entry":   withDetail(1, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		"stale flag 2":        withDetail(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0),
		"approx error NaN":    withDetail(0, 0, 1, 0, 0, 0, 0, 0, 0xf8, 0x7f, 0, 0, 0, 0),
		"approx error past 1": withDetail(0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0),
		"peer twice":          withDetail(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 'a', 2, 1, 'a', 4, 0, 0),
		"stamps past end":     withDetail(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1),
		"rights twice":        withDetail(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 'a', 2, 1, 'a', 4),
	} {
		if _, err := route.UnmarshalResults(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("results %s: %v, want ErrMalformed", name, err)
		}
	}
	for k := byte(route.Answers); k <= byte(route.Answers)+1; k++ {
		if _, err := route.UnmarshalAnswer(append([]byte{route.Version, k}, sampleAnswers[0].Marshal()[2:]...)); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("answer kind %d with a reason and no answers: %v", k, err)
		}
	}
	// An HTTP status or header, which whole HTTP requests were answered
	// with: none is taken now.
	for name, b := range map[string][]byte{
		"status 200": {route.Version, byte(route.Served), 0, 0xc8, 0x01, 0, 0},
		"a header":   {route.Version, byte(route.Served), 0, 0, 1, 1, 'a', 1, 'b', 0},
	} {
		if _, err := route.UnmarshalAnswer(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("answer with %s: %v, want ErrMalformed", name, err)
		}
	}
}

// withDetail is the encoding of one result flagged with a detail, the
// detail's bytes d.
func withDetail(d ...byte) []byte {
	return append([]byte{route.Version, 1, 0, 0, 0, 0, 0, 0, 0, 0, 128}, d...)
}

// Any bytes: decoding never panics, and what decodes re-encodes to bytes
// that decode to the same message.
func FuzzRequest(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleRequests))
	for _, r := range sampleRequests {
		seeds = append(seeds, r.Marshal())
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalRequest, func(r route.Request) []byte { return r.Marshal() })
}

func FuzzResults(f *testing.F) {
	fuzzRoundTrip(f, [][]byte{route.MarshalResults(sampleResults)}, route.UnmarshalResults, route.MarshalResults)
}

// fuzzRoundTrip fuzzes one of the wire's decoders from seeds: any bytes
// decode without a panic, and what decodes re-encodes to bytes that
// decode and re-encode to the same bytes again.
func fuzzRoundTrip[T any](f *testing.F, seeds [][]byte, decode func([]byte) (T, error), encode func(T) []byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			return
		}
		again, err := decode(encode(v))
		if err != nil || !bytes.Equal(encode(again), encode(v)) {
			t.Fatalf("%q decodes, re-encodes and then %v", b, err)
		}
	})
}

var sampleHistories = []route.History{
	{},
	{Code: "no_log", Msg: "the event log is off"},
	{PairHistory: region.PairHistory{
		Actions: []region.PairAction{
			{Replica: "us-1", Region: "us", Liked: true, HLC: crdt.HLC(1767225602000 << 16), Seq: 7},
			{Replica: "eu-1", Region: "eu", HLC: crdt.HLC(1767225603000<<16 | 2), Seq: 1 << 40},
		},
		Missing: []string{"ap-1"}, Partial: []string{"eu-1", "us-1"},
	}},
}

// Every history reads back as it was written.
func TestHistoryRoundTrip(t *testing.T) {
	for _, h := range sampleHistories {
		got, err := route.UnmarshalHistory(route.MarshalHistory(&h))
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("%+v read back as %+v, %v", h, got, err)
		}
	}
}

// Any history of arbitrary fields reads back field for field.
func TestHistoryRoundTripProperty(t *testing.T) {
	f := func(code, msg string, replicas []string, liked []bool, hlc, seq uint64, missing, partial []string) bool {
		h := route.History{Code: code, Msg: msg}
		for i, r := range replicas {
			h.Actions = append(h.Actions, region.PairAction{Replica: r, Region: msg, Liked: i < len(liked) && liked[i], HLC: crdt.HLC(hlc + uint64(i)), Seq: seq})
		}
		if len(missing) > 0 {
			h.Missing = missing
		}
		if len(partial) > 0 {
			h.Partial = partial
		}
		got, err := route.UnmarshalHistory(route.MarshalHistory(&h))
		return err == nil && reflect.DeepEqual(got, h)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

// What a history's decoder refuses: another version, a cut or long
// message, a liked flag not 0 or 1, more actions than bytes.
func TestHistoryRefused(t *testing.T) {
	good := route.MarshalHistory(&sampleHistories[2])
	for name, b := range map[string][]byte{
		"empty":             nil,
		"version 2":         append([]byte{2}, good[1:]...),
		"cut":               good[:len(good)-1],
		"trailing":          append(append([]byte{}, good...), 0),
		"liked 2":           {route.Version, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0},
		"actions past end":  {route.Version, 0, 0, 5, 0, 0, 1, 0, 0},
		"actions past max":  {route.Version, 0, 0, 0x81, 0x80, 0x04},
		"missing past end":  {route.Version, 0, 0, 0, 3, 1, 'a'},
		"partial past end":  {route.Version, 0, 0, 0, 0, 2, 1, 'a'},
		"code past the end": {route.Version, 9, 'a'},
	} {
		if _, err := route.UnmarshalHistory(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("history %s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzHistory(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleHistories))
	for _, h := range sampleHistories {
		seeds = append(seeds, route.MarshalHistory(&h))
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalHistory, func(h route.History) []byte { return route.MarshalHistory(&h) })
}

func FuzzAnswer(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleAnswers))
	for _, a := range sampleAnswers {
		seeds = append(seeds, a.Marshal())
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalAnswer, func(a route.Answer) []byte { return a.Marshal() })
}

// sampleBatch is a batch of sampleRequests' writes and reads.
func sampleBatch() route.Request {
	b := route.Request{Kind: route.KindBatch, From: "us-1", Shard: -1, DeadlineMs: 1764380000000}
	b.Batch = append(b.Batch, sampleRequests[:3]...)
	return b
}

var sampleBatchAnswers = []route.Answer{
	{Kind: route.Served, Body: route.MarshalResults(sampleResults[:2])},
	{Kind: route.NotServed, Reason: "shard 40 is not held here"},
	{}, // unanswered
	{Kind: route.Served},
}

// A batch reads back request for request, the same bytes whether
// encoded from requests or from their encodings (as the sender does),
// and its answers read back answer for answer, unanswered ones too.
func TestBatchRoundTrip(t *testing.T) {
	b := sampleBatch()
	items := make([][]byte, len(b.Batch))
	for i := range b.Batch {
		items[i] = b.Batch[i].Marshal()
	}
	if !bytes.Equal(route.MarshalBatch(b.From, b.DeadlineMs, items), b.Marshal()) {
		t.Fatal("MarshalBatch and Request.Marshal disagree")
	}
	got, err := route.UnmarshalRequest(b.Marshal())
	if err != nil || got.Kind != route.KindBatch || got.From != "us-1" || got.Shard != -1 || len(got.Batch) != len(items) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	for i := range got.Batch {
		if !bytes.Equal(got.Batch[i].Marshal(), items[i]) {
			t.Errorf("request %d read back as %+v", i, got.Batch[i])
		}
	}
	a := route.Answer{Kind: route.Answers, Body: route.MarshalAnswers(sampleBatchAnswers)}
	ga, err := route.UnmarshalAnswer(a.Marshal())
	if err != nil || ga.Kind != route.Answers {
		t.Fatalf("answer read back %+v, %v", ga, err)
	}
	as, err := route.UnmarshalAnswers(ga.Body)
	if err != nil || len(as) != len(sampleBatchAnswers) {
		t.Fatalf("answers read back %+v, %v", as, err)
	}
	for i := range as {
		w := sampleBatchAnswers[i]
		if as[i].Kind != w.Kind || as[i].Reason != w.Reason || !bytes.Equal(as[i].Body, w.Body) {
			t.Errorf("answer %d read back %+v, wrote %+v", i, as[i], w)
		}
	}
}

// A malformed batch, or malformed answers to one, is refused.
func TestBatchRefused(t *testing.T) {
	good := sampleBatch()
	question := good
	question.Batch = []route.Request{{Kind: route.KindQuestion, Shard: -1, Question: &route.Question{}}}
	nested := good
	nested.Batch = []route.Request{sampleBatch()}
	items := [][]byte{sampleRequests[0].Marshal()}
	forShard := route.MarshalBatch("us-1", 0, items)
	forShard[3+len("us-1")] = 2 // the shard's varint: 1, not -1
	cut := good.Marshal()
	for name, b := range map[string][]byte{
		"empty batch":       route.MarshalBatch("us-1", 0, nil),
		"a question within": question.Marshal(),
		"a batch within":    nested.Marshal(),
		"malformed within":  route.MarshalBatch("us-1", 0, [][]byte{{route.Version, byte(route.KindOps), 0}}),
		"for a shard":       forShard,
		"cut":               cut[:len(cut)-1],
		"past max":          append(route.MarshalBatch("us-1", 0, nil)[:len(route.MarshalBatch("us-1", 0, nil))-1], 0x81, 0x08),
	} {
		if _, err := route.UnmarshalRequest(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	within := route.Answer{Kind: route.Answers, Body: route.MarshalAnswers(sampleBatchAnswers)}
	goodAnswers := route.MarshalAnswers(sampleBatchAnswers)
	for name, b := range map[string][]byte{
		"empty":               nil,
		"version 2":           append([]byte{2}, goodAnswers[1:]...),
		"answers within":      route.MarshalAnswers([]route.Answer{within}),
		"malformed within":    {route.Version, 1, 2, route.Version, 9},
		"count past end":      {route.Version, 5, 0},
		"trailing":            append(append([]byte{}, goodAnswers...), 0),
		"an unknown kind of1": {route.Version, 1, 5, route.Version, 0, 0, 0, 0},
	} {
		if _, err := route.UnmarshalAnswers(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("answers %s: %v, want ErrMalformed", name, err)
		}
	}
	// A batch's answer with malformed answers in its body is refused whole.
	if _, err := route.UnmarshalAnswer((&route.Answer{Kind: route.Answers, Body: []byte{route.Version, 5}}).Marshal()); !errors.Is(err, route.ErrMalformed) {
		t.Errorf("a batch's answer with a cut body: %v", err)
	}
}

func FuzzBatch(f *testing.F) {
	b := sampleBatch()
	fuzzRoundTrip(f, [][]byte{b.Marshal()}, route.UnmarshalRequest, func(r route.Request) []byte { return r.Marshal() })
}

func FuzzAnswers(f *testing.F) {
	fuzzRoundTrip(f, [][]byte{route.MarshalAnswers(sampleBatchAnswers), route.MarshalAnswers(nil)}, route.UnmarshalAnswers, route.MarshalAnswers)
}
