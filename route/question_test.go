package route_test

import (
	"errors"
	"reflect"
	"testing"
	"testing/quick"

	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// someShards is a shard set of shards 0, 63, 64 and 1023: a bit at each
// end of a word and of the set.
func someShards() shard.Set {
	var s shard.Set
	for _, n := range []int{0, 63, 64, shard.Count - 1} {
		s.Add(n)
	}
	return s
}

var sampleQuestions = []route.Request{
	{Kind: route.KindQuestion, From: "us-1", Shard: -1, DeadlineMs: 1764380000000, Question: &route.Question{
		Asked: route.AskTrending, Shards: someShards(), Family: 1, Key: "vid", Zone: "eu", N: 10, SpanMs: 600000}},
	{Kind: route.KindQuestion, From: "us-2", Shard: -1, Question: &route.Question{Asked: route.AskTrending, Shards: shard.All()}},
	{Kind: route.KindQuestion, From: "us-3", Shard: -1, Question: &route.Question{Asked: route.AskUserLikes, Key: "ann", After: "video#p2", N: 100}},
	{Kind: route.KindQuestion, From: "us-3", Shard: -1, Question: &route.Question{Asked: route.AskFeed, Shards: someShards(), Key: "ann",
		Keys: []string{"video", "clip"}}},
	{Kind: route.KindQuestion, From: "us-1", Shard: -1, Question: &route.Question{Asked: route.AskTypeWindow, Family: 2, Key: "video:",
		FromMs: 1764380000000, ToMs: 1764380060000, Windowed: true}},
	{Kind: route.KindQuestion, From: "us-1", Shard: -1, Question: &route.Question{Asked: route.AskHolding}},
}

func yes() *bool { v := true; return &v }
func no() *bool  { v := false; return &v }

var sampleReplies = []route.Reply{
	{},
	{Code: "bad_request", Msg: "n 0"},
	{Approx: true, Candidates: 12, Items: []route.ReplyItem{{Key: "hot1#p2", Count: 3}, {Key: "c1", Count: -4, Approx: true}}},
	{More: true, Items: []route.ReplyItem{{Key: "video", HLC: 1 << 60}, {Key: "clip", Count: 7, Liked: true}}},
	{Items: []route.ReplyItem{{Key: "us-1"}, {Key: "us-2"}},
		Window: &route.ReplyWindow{FromMs: 1764380000000, ToMs: 1764380060000, SlotMs: 1000, Closed: true}},
	{Shards: []route.ReplyShard{{Shard: 1023, Keys: 3, Unreconciled: 2, Approx: true,
		Vector: []route.ReplyPN{{Replica: "us-1", P: 5, N: 1}, {Replica: "eu-1", P: 1 << 63}}}, {Shard: 0}}},
	{Holding: &route.ReplyHolding{URL: "http://10.0.0.2:8080", MapRevision: 7, Synced: yes(), Released: no()}},
	{Holding: &route.ReplyHolding{}},
}

// A question reads back whole, in its request.
func TestQuestionRoundTrip(t *testing.T) {
	for _, r := range sampleQuestions {
		got, err := route.UnmarshalRequest(r.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("read back %+v, want %+v", got, r)
		}
	}
}

// Any reply of arbitrary fields reads back field for field.
func TestReplyRoundTripProperty(t *testing.T) {
	f := func(code, msg string, approx, more bool, candidates int64, keys []string, counts []int64, hlcs []uint64) bool {
		r := route.Reply{Code: code, Msg: msg, Approx: approx, More: more, Candidates: candidates}
		for i, k := range keys {
			it := route.ReplyItem{Key: k, Approx: i%2 == 1, Liked: i%3 == 1}
			if i < len(counts) {
				it.Count = counts[i]
			}
			if i < len(hlcs) {
				it.HLC = hlcs[i]
			}
			r.Items = append(r.Items, it)
		}
		got, err := route.UnmarshalReply(route.MarshalReply(&r))
		return err == nil && reflect.DeepEqual(got, r)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range sampleReplies {
		got, err := route.UnmarshalReply(route.MarshalReply(&r))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("reply %+v read back %+v, %v", r, got, err)
		}
	}
}

// What the decoders refuse: an unknown or missing read, a cut shard set,
// unknown flags, more items than bytes, trailing bytes.
func TestQuestionRefused(t *testing.T) {
	good := sampleQuestions[0].Marshal()
	none := sampleQuestions[0]
	none.Question = nil // encoded as read 0, where good has its read
	missing := none.Marshal()
	asked := 0
	for good[asked] == missing[asked] {
		asked++
	}
	unknown := append([]byte{}, good...)
	unknown[asked] = 99
	for name, b := range map[string][]byte{
		"unknown read": unknown,
		"no question":  missing,
		"cut shards":   good[:asked+10],
		"cut":          good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
	} {
		if _, err := route.UnmarshalRequest(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("question %s: %v, want ErrMalformed", name, err)
		}
	}
	reply := route.MarshalReply(&sampleReplies[2])
	for name, b := range map[string][]byte{
		"empty":          nil,
		"version 2":      append([]byte{2}, reply[1:]...),
		"reply flags":    {route.Version, 0, 0, 4, 0, 0, 0},
		"item flags":     {route.Version, 0, 0, 0, 0, 1, 1, 'k', 0, 0, 2, 0},
		"items past end": {route.Version, 0, 0, 0, 0, 5, 1, 'k', 0, 0, 0},
		"items past max": {route.Version, 0, 0, 0, 0, 0x81, 0x80, 0x04},
		"cut":            reply[:len(reply)-1],
		"trailing":       append(append([]byte{}, reply...), 0),
		"code past":      {route.Version, 9, 'a'},
		"closed 2":       {route.Version, 0, 0, 8, 0, 0, 0, 0, 0, 2, 0},
		"shard 1024":     {route.Version, 0, 0, 0, 0, 0, 1, 0x80, 0x08, 0, 0, 0, 0},
		"shards past":    {route.Version, 0, 0, 0, 0, 0, 3, 0},
		"synced 3":       {route.Version, 0, 0, 16, 0, 0, 0, 0, 0, 3, 0},
	} {
		if _, err := route.UnmarshalReply(b); !errors.Is(err, route.ErrMalformed) {
			t.Errorf("reply %s: %v, want ErrMalformed", name, err)
		}
	}
}

// Any bytes: decoding never panics, and what decodes re-encodes to bytes
// that decode to the same request: the questions' decoder.
func FuzzQuestion(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleQuestions))
	for _, r := range sampleQuestions {
		seeds = append(seeds, r.Marshal())
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalRequest, func(r route.Request) []byte { return r.Marshal() })
}

// Any bytes: decoding never panics, and what decodes re-encodes to bytes
// that decode to the same reply.
func FuzzReply(f *testing.F) {
	seeds := make([][]byte, 0, len(sampleReplies))
	for _, r := range sampleReplies {
		seeds = append(seeds, route.MarshalReply(&r))
	}
	fuzzRoundTrip(f, seeds, route.UnmarshalReply, func(r route.Reply) []byte { return route.MarshalReply(&r) })
}
