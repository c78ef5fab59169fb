package crdt

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// randFlag draws flags from a small space, so that ties in HLC and origin
// happen often.
func randFlag(rng *rand.Rand) Flag {
	if rng.IntN(5) == 0 {
		return Flag{}
	}
	return Flag{Value: Block{Blocked: rng.IntN(2) == 0}, HLC: MakeHLC(1_700_000_000_000+rng.Int64N(3), uint16(rng.IntN(2))), Origin: []string{"a", "b", "c"}[rng.IntN(3)]}
}

func mergedFlag(a, b Flag) Flag {
	a.Merge(b)
	return a
}

// TestFlagRecordForm: a flag's record form merges as the flag does, and
// reads back to the same flag, so carrying flags as register-only records
// (replication) changes nothing. Its portions are the flag's.
func TestFlagRecordForm(t *testing.T) {
	rng := newRand(71)
	for range 5000 {
		a, b := randFlag(rng), randFlag(rng)
		if got, ok := FlagOfRecord(FlagRecord(a)); !ok || got != a {
			t.Fatalf("FlagOfRecord(FlagRecord(%+v)) = %+v, %v", a, got, ok)
		}
		ra := FlagRecord(a)
		ra.Merge(FlagRecord(b))
		if got, _ := FlagOfRecord(ra); got != mergedFlag(a, b) {
			t.Fatalf("record merge of %+v and %+v = %+v, flag merge %+v", a, b, got, mergedFlag(a, b))
		}
		for _, id := range []string{"a", "b", "c"} {
			if got, ok := FlagOfRecord(FlagRecord(a).Portion(id)); !ok || got != a.Portion(id) {
				t.Fatalf("record portion %s of %+v = %+v, flag portion %+v", id, a, got, a.Portion(id))
			}
		}
	}
	for _, r := range []*LikeRecord{
		{Contrib: Vector{{"a", PN{P: 1}}}}, {Liked: true, HLC: 1, Origin: "a", At: 5},
	} {
		if _, ok := FlagOfRecord(r); ok {
			t.Fatalf("FlagOfRecord accepted %+v, which is not a pure register", r)
		}
	}
}

func TestFlagSet(t *testing.T) {
	var f Flag
	if !f.Set("a", Block{true}, MakeHLC(10, 0)) || f != (Flag{Block{true}, MakeHLC(10, 0), "a"}) {
		t.Fatalf("first block: %+v", f)
	}
	if f.Set("b", Block{true}, MakeHLC(11, 0)) || f.Origin != "b" {
		t.Fatalf("blocking again must keep the state and take the new stamp: %+v", f)
	}
	if !f.Set("a", Block{false}, MakeHLC(12, 0)) || f.Value.Blocked {
		t.Fatalf("unblock: %+v", f)
	}
}

func TestExcessBlocked(t *testing.T) {
	r := &LikeRecord{Liked: true, HLC: 5, Origin: "a", Contrib: Vector{{"a", PN{P: 1}}}}
	if d := r.ExcessBlocked(false); d != 0 {
		t.Fatalf("unblocked liked record with one addition: excess %d", d)
	}
	if d := r.ExcessBlocked(true); d != 1 {
		t.Fatalf("blocked liked record with one addition: excess %d, want 1", d)
	}
	if d := r.ReconcileBlocked("b", true); d != 0 {
		t.Fatalf("a replica that is not the origin reconciled %d", d)
	}
	if d := r.ReconcileBlocked("a", true); d != -1 || r.ExcessBlocked(true) != 0 {
		t.Fatalf("origin's reconciliation under a block: delta %d, record %+v", d, r)
	}
	if d := r.ReconcileBlocked("a", false); d != 1 || r.Contrib.Get("a") != (PN{P: 2, N: 1}) {
		t.Fatalf("origin's reconciliation after unblock: delta %d, record %+v", d, r)
	}
}

func FuzzDecodeFlag(f *testing.F) {
	rng := newRand(72)
	for range 8 {
		f.Add(AppendFlag(nil, randFlag(rng)))
	}
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 2, 1, 1, 'a'})
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{1, 0, 0x80, 0x00, 1, 'a'}) // overlong
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := DecodeFlag(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if (fl.Origin == "") != (fl.HLC == 0) || fl.Value.Blocked && fl.HLC == 0 || fl.Origin != "" && !ValidID(fl.Origin) {
			t.Fatalf("decoded an inconsistent flag: %+v", fl)
		}
		re := AppendFlag(nil, fl)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: decodes to %+v, which encodes as % x", b, fl, re)
		}
		if f2, err := DecodeFlag(re); err != nil || f2 != fl {
			t.Fatalf("second decode: %+v, %v; first %+v", f2, err, fl)
		}
	})
}

// The blocked-likes simulation: replicas like, unlike, block and unblock
// users while messages are delayed, lost, duplicated and reordered; then
// anti-entropy runs until nothing changes. At quiescence every replica
// must hold the same records and flags, every record's excess must be zero
// under the final flag, so each item counts exactly the users whose latest
// action is a like and whose final flag is unblocked.

type blockSim struct {
	seed     uint64
	rng      *rand.Rand
	reps     []*blockRep
	net      []blockMsg
	wall     int64
	items    []string
	users    []string
	latest   map[simKey]simAction
	flags    map[string]Flag // oracle: the winning flag per user
	noFlagRe bool            // the control: a merged flag triggers no reconciliation
	refused  int
	repairs  int
}

type blockRep struct {
	id    string
	clock Clock
	recs  map[simKey]*LikeRecord
	flags map[string]Flag
}

type blockMsg struct {
	to   int
	key  simKey // a record, or a flag if key.item is ""
	rec  *LikeRecord
	flag Flag
}

func (s *blockSim) send(from int, k simKey) {
	r := s.reps[from]
	for to := range s.reps {
		if to == from || s.rng.IntN(5) == 0 { // lossy
			continue
		}
		m := blockMsg{to: to, key: k}
		if k.item == "" {
			m.flag = r.flags[k.user].Portion(r.id)
		} else {
			m.rec = r.recs[k].Portion(r.id)
		}
		s.net = append(s.net, m)
	}
}

func (r *blockRep) rec(k simKey) *LikeRecord {
	rec, ok := r.recs[k]
	if !ok {
		rec = &LikeRecord{}
		r.recs[k] = rec
	}
	return rec
}

func (s *blockSim) like(ri int, k simKey, liked bool) {
	r := s.reps[ri]
	if r.flags[k.user].Value.Blocked {
		s.refused++ // a blocked user's writes are refused
		return
	}
	h := r.clock.Now(s.wall)
	rec := r.rec(k)
	rec.Apply(r.id, liked, h)
	if a, ok := s.latest[k]; !ok || a.hlc < h || a.hlc == h && a.origin < r.id {
		s.latest[k] = simAction{hlc: h, origin: r.id, liked: liked}
	}
	s.send(ri, k)
}

func (s *blockSim) block(ri int, user string, blocked bool) {
	r := s.reps[ri]
	f := r.flags[user]
	f.Set(r.id, Block{blocked}, r.clock.Now(s.wall))
	r.flags[user] = f
	s.oracleFlag(f, user)
	s.flagChanged(ri, user)
	s.send(ri, simKey{user: user})
}

func (s *blockSim) oracleFlag(f Flag, user string) {
	o := s.flags[user]
	o.Merge(f)
	s.flags[user] = o
}

// flagChanged runs the winner's duty on every record of user at replica
// ri, and sends those that changed.
func (s *blockSim) flagChanged(ri int, user string) {
	r := s.reps[ri]
	for k, rec := range r.recs {
		if k.user == user && rec.ReconcileBlocked(r.id, r.flags[user].Value.Blocked) != 0 {
			s.repairs++
			s.send(ri, k)
		}
	}
}

func (s *blockSim) deliver(m blockMsg) bool {
	r := s.reps[m.to]
	if m.key.item == "" {
		r.clock.Observe(m.flag.HLC)
		f := r.flags[m.key.user]
		was := f.Value.Blocked
		if !f.Merge(m.flag) {
			return false
		}
		r.flags[m.key.user] = f
		if f.Value.Blocked != was && !s.noFlagRe {
			s.flagChanged(m.to, m.key.user)
		}
		return true
	}
	r.clock.Observe(m.rec.HLC)
	rec := r.rec(m.key)
	if !rec.Merge(m.rec) {
		return false
	}
	if rec.ReconcileBlocked(r.id, r.flags[m.key.user].Value.Blocked) != 0 {
		s.repairs++
		s.send(m.to, m.key)
	}
	return true
}

func (s *blockSim) deliverOne() bool {
	i := s.rng.IntN(len(s.net))
	m := s.net[i]
	if s.rng.IntN(8) == 0 { // duplicated: a copy stays behind
		return s.deliver(m)
	}
	s.net[i] = s.net[len(s.net)-1]
	s.net = s.net[:len(s.net)-1]
	return s.deliver(m)
}

// antiEntropy sends every replica's portion of everything to every other,
// reliably, and reports whether anything changed.
func (s *blockSim) antiEntropy() bool {
	changed := false
	for from, r := range s.reps {
		for to := range s.reps {
			if to == from {
				continue
			}
			for k, rec := range r.recs {
				changed = s.deliver(blockMsg{to: to, key: k, rec: rec.Portion(r.id)}) || changed
			}
			for u, f := range r.flags {
				changed = s.deliver(blockMsg{to: to, key: simKey{user: u}, flag: f.Portion(r.id)}) || changed
			}
		}
	}
	s.net = nil
	return changed
}

// runBlockSim runs one seed and returns the first way the replicas failed
// to converge to exact counts ("" if they did).
func runBlockSim(seed uint64, noFlagRe bool) (s *blockSim, failure string) {
	rng := newRand(seed)
	s = &blockSim{seed: seed, rng: rng, wall: 1_700_000_000_000, latest: map[simKey]simAction{},
		flags: map[string]Flag{}, noFlagRe: noFlagRe}
	n := 2 + rng.IntN(3)
	for i := range n {
		s.reps = append(s.reps, &blockRep{id: string(rune('a' + i)), recs: map[simKey]*LikeRecord{}, flags: map[string]Flag{}})
	}
	for i := range 1 + rng.IntN(3) {
		s.items = append(s.items, fmt.Sprintf("item%d", i))
	}
	for i := range 1 + rng.IntN(3) {
		s.users = append(s.users, fmt.Sprintf("user%d", i))
	}
	for range 100 + rng.IntN(200) {
		s.wall += int64(rng.IntN(3))
		ri := rng.IntN(n)
		k := simKey{s.items[rng.IntN(len(s.items))], s.users[rng.IntN(len(s.users))]}
		switch p := rng.IntN(100); {
		case p < 40:
			s.like(ri, k, rng.IntN(4) != 0)
		case p < 50:
			s.block(ri, k.user, rng.IntN(2) == 0)
		default:
			for range 1 + rng.IntN(3) {
				if len(s.net) > 0 {
					s.deliverOne()
				}
			}
		}
	}
	for len(s.net) > 0 {
		s.deliverOne()
	}
	for round := 0; s.antiEntropy(); round++ {
		if round > 20 {
			return s, "no quiescence after 20 anti-entropy rounds"
		}
	}
	r0 := s.reps[0]
	for _, r := range s.reps {
		for u, f := range s.flags {
			if r.flags[u] != f {
				return s, fmt.Sprintf("%s: flag of %s %+v, the winning flag is %+v", r.id, u, r.flags[u], f)
			}
		}
		for k, a := range s.latest {
			rec := r.recs[k]
			if rec == nil || !rec.Equal(r0.recs[k]) {
				return s, fmt.Sprintf("%v: %s has %+v, %s has %+v", k, r.id, rec, r0.id, r0.recs[k])
			}
			if rec.Liked != a.liked || rec.HLC != a.hlc {
				return s, fmt.Sprintf("%v: record %+v, latest action %+v", k, rec, a)
			}
			want := int64(0)
			if a.liked && !s.flags[k.user].Value.Blocked {
				want = 1
			}
			if got := rec.Contrib.Value(); got != want {
				return s, fmt.Sprintf("%v at %s: counts %d, want %d (liked %v, flag %+v)", k, r.id, got, want, a.liked, s.flags[k.user])
			}
		}
	}
	return s, ""
}

func TestBlockedLikesConverge(t *testing.T) {
	refused, repairs := 0, 0
	for seed := range uint64(300) {
		s, failure := runBlockSim(seed, false)
		if failure != "" {
			t.Fatalf("seed %d: %s", seed, failure)
		}
		refused += s.refused
		repairs += s.repairs
	}
	if refused == 0 || repairs == 0 {
		t.Fatalf("the simulation exercised no refused writes (%d) or no reconciliations (%d)", refused, repairs)
	}
}

// TestBlockedLikesControl: if a merged flag does not make the records'
// winners reconcile, the simulation catches it.
func TestBlockedLikesControl(t *testing.T) {
	for seed := range uint64(300) {
		if _, failure := runBlockSim(seed, true); failure != "" {
			t.Logf("seed %d caught it: %s", seed, failure)
			return
		}
	}
	t.Fatal("no seed caught flags that do not trigger reconciliation")
}
