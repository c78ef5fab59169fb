package crdt

import (
	"errors"
	"slices"
	"strings"
)

// # Bounded counters (budgets)
//
// A budget is a PN-counter that must never go below zero, however the
// replicas are cut apart. The plain vector cannot promise that: two
// replicas that each see 10 left may each spend 10. So the value is split
// into rights, in the manner of escrow (Antidote's bounded counter): a
// replica may only spend rights it holds, and it knows its own rights
// exactly, because every term of them that others write only ever grows.
//
// State, as vectors (each entry written only by its replica, merged by
// element-wise max like every other vector):
//
//   - Main: entry r has P = what r granted (plus refunds of duplicate
//     keyed spends, see region) and N = what r spent.
//   - Inbox[j], one vector per replica j that ever received rights:
//     entry s ≠ j has P = the rights s has sent to j in all; entry j
//     itself has N = the rights j has sent to anyone in all.
//
// The rights of r are
//
//	rights(r) = Main[r].P − Main[r].N + Σ_{s≠r} Inbox[r][s].P − Inbox[r][r].N
//
// and they add up to the value: every transfer appears once as P in the
// receiver's inbox and once in the sender's own N. A replica writes its own
// Main entry, its own entry of its own inbox (sent) and its own entry of
// the receiver's inbox (sent to j), all in one commit. Its view of the
// terms it does not write (what others sent it) can only be behind, so
// the rights it computes for itself are never more than it truly holds,
// and a spend it allows never takes any replica's true rights below zero.
// Summed over replicas: total spent ≤ total granted, under any partition,
// message loss or reordering.

// BudgetInboxSep separates a budget key from the receiving replica in the
// name of an inbox vector ("<key>~<replica>"). It is not an id byte, so a
// name splits one way only.
const BudgetInboxSep = '~'

// Budget errors.
var (
	// ErrBudgetExhausted: the budget as this replica sees it has less left
	// than the spend asks for.
	ErrBudgetExhausted = errors.New("budget exhausted")
	// ErrRightsElsewhere: the budget has enough left, but this replica
	// holds too few of the rights to spend it; other replicas hold them.
	ErrRightsElsewhere = errors.New("budget rights held elsewhere")
)

// BudgetInboxName names the inbox vector of replica to in budget key.
func BudgetInboxName(key, to string) string { return key + string(BudgetInboxSep) + to }

// SplitBudgetName splits a budget vector name into the budget key and, for
// an inbox, the receiving replica (inbox false for the main vector). ok is
// false unless both parts are ids.
func SplitBudgetName(name string) (key, to string, inbox, ok bool) {
	i := strings.IndexByte(name, BudgetInboxSep)
	if i < 0 {
		return name, "", false, ValidID(name)
	}
	key, to = name[:i], name[i+1:]
	return key, to, true, ValidID(key) && ValidID(to)
}

// Budget is one replica's view of a bounded counter. The zero value is an
// empty budget. Vectors are shared with the caller: methods that change
// the budget change them (the replica's writer keeps its own copies).
type Budget struct {
	Main  Vector
	Inbox map[string]Vector // by receiving replica
}

// Remaining is what is left to spend, ΣP − ΣN of Main: exact once the
// view is complete, but a view may hold a replica's spends before the
// rights it spent them from (deltas from different replicas arrive in any
// order, and none relays another's entries), and then be low, even
// negative. Available is the figure to show.
func (b *Budget) Remaining() int64 { return b.Main.Value() }

// Available is what is left to spend as this view can vouch for: every
// holder's rights summed, a holder whose spends arrived before the rights
// it spent counting as holding none. It is never negative, and equals
// Remaining in any view that is causally complete, such as every view
// once replicas have exchanged state (where every replica's rights are at
// least zero, because each spends only what it holds).
func (b *Budget) Available() int64 {
	var sum uint64
	b.eachHolder(func(r string) {
		if n := b.Rights(r); n > 0 {
			sum = addSat(sum, uint64(n))
		}
	})
	return subSat(sum, 0)
}

// Granted and Spent are the halves of Main summed (Granted includes the
// refunds of duplicate keyed spends). They saturate at the int64 range.
func (b *Budget) Granted() int64 {
	var s uint64
	for _, e := range b.Main {
		s = addSat(s, e.P)
	}
	return subSat(s, 0)
}

// Spent is what all replicas spent, as far as this view knows.
func (b *Budget) Spent() int64 {
	var s uint64
	for _, e := range b.Main {
		s = addSat(s, e.N)
	}
	return subSat(s, 0)
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

// Received is what r has been sent by others, as far as this view knows.
func (b *Budget) Received(r string) uint64 {
	var s uint64
	for _, e := range b.Inbox[r] {
		if e.Replica != r {
			s = addSat(s, e.P)
		}
	}
	return s
}

// Sent is what r has sent to others in all.
func (b *Budget) Sent(r string) uint64 { return b.Inbox[r].Get(r).N }

// Rights is what replica r may spend or give away, in this view. For r's
// own view of itself it is exact or low, never high (see the comment at
// the top of this file). It can be negative only in a view that is not
// r's own and holds r's outgoing entries without its incoming ones.
func (b *Budget) Rights(r string) int64 {
	own := b.Main.Get(r)
	var hi, lo uint64 // rights = hi − lo, in saturating halves
	hi = addSat(own.P, b.Received(r))
	lo = addSat(own.N, b.Sent(r))
	return subSat(hi, lo)
}

// Holders lists every replica that appears in the budget, sorted: any
// replica with rights granted, spent or received some.
func (b *Budget) Holders() []string {
	var out []string
	b.eachHolder(func(r string) { out = append(out, r) })
	slices.Sort(out)
	return out
}

// eachHolder calls fn once for every replica in the budget, in no order.
// A spend answers with Available, so this runs once per spend: budgets
// have a handful of holders, and a scan of those seen is cheaper than a
// map.
func (b *Budget) eachHolder(fn func(string)) {
	var buf [8]string
	seen := buf[:0]
	add := func(r string) {
		if !slices.Contains(seen, r) {
			seen = append(seen, r)
			fn(r)
		}
	}
	for _, e := range b.Main {
		add(e.Replica)
	}
	for to, v := range b.Inbox {
		add(to)
		for _, e := range v {
			add(e.Replica)
		}
	}
}

// Grant adds n (> 0) to the budget, as rights of self.
func (b *Budget) Grant(self string, n int64) {
	b.Main = b.Main.Add(self, n)
}

// Spend takes n (> 0) from self's rights: ErrRightsElsewhere if self
// holds less than n but the budget has at least n available as seen
// (others hold it), ErrBudgetExhausted if it has not. Nothing changes on
// error.
func (b *Budget) Spend(self string, n int64) error {
	if err := b.Check(self, n); err != nil {
		return err
	}
	b.Main = b.Main.Add(self, -n)
	return nil
}

// Check is Spend's test alone: nil if Spend(self, n) would succeed, else
// its error. Nothing changes.
func (b *Budget) Check(self string, n int64) error {
	if n <= 0 || b.Rights(self) >= n {
		return nil
	}
	// Both measures of what is left must fall short: each can be low in
	// a view that is not complete. Available is low while the view holds
	// a sender's total sent (its own inbox) without its entry in the
	// receiver's inbox: the two are separate vectors and may travel
	// apart. Remaining is low while a grant has not arrived. A view low
	// by one measure only answers ErrRightsElsewhere, which a client
	// retries, rather than ErrBudgetExhausted, on which it gives up.
	if b.Available() < n && b.Remaining() < n {
		return ErrBudgetExhausted
	}
	return ErrRightsElsewhere
}

// Transfer moves n (> 0) of self's rights to replica to, under the same
// rule as Spend: a replica gives away only rights it holds.
func (b *Budget) Transfer(self, to string, n int64) error {
	if to == self || n <= 0 {
		return nil
	}
	if b.Rights(self) < n {
		return ErrRightsElsewhere
	}
	if b.Inbox == nil {
		b.Inbox = make(map[string]Vector)
	}
	b.Inbox[to] = b.Inbox[to].Add(self, n)      // P: sent to `to`
	b.Inbox[self] = b.Inbox[self].Add(self, -n) // N: sent in all
	return nil
}

// Give is how much of its rights a holder gives a replica that asked for
// want, the rule of "What an ask can take" in docs/architecture.md:
//
//   - nothing if the asker already has want, as far as the holder sees
//     (has: the asker's rights in the holder's view), or wants nothing;
//   - the holder keeps keep, its own recent demand (what it spent
//     lately), and of the rest, its spare, gives half, rounded up: at
//     least the last right, so every right can reach demand, and never
//     more than half, whatever want says.
//
// An ask's want is the asker's word, not checked: bounding it would not
// bound what a region that lies can take. What bounds that is the holder:
// one ask takes at most half its spare (the rest only in further asks,
// which replicas answer at a bounded rate) and never its recent demand.
// Giving half rather than want moves rights to demand in a few rounds,
// not one spend at a time.
func Give(holds, keep, want, has int64) int64 {
	keep = max(keep, 0)
	if want <= 0 || has >= want || holds <= keep {
		return 0
	}
	spare := holds - keep
	return spare - spare/2
}

// Spend is one idempotency key of a budget spend or grant: the lattice of
// a counter's keyed record (KeyedRecord), whose Amount is the change to
// the budget (−by for a spend of by, +by for a grant), counted in the
// budget's main vector. What sets it apart is who fixes an excess: a
// spend is never reconciled by the winner's rule, only by RefundLoser,
// and a grant by TakeBackLoser.
type Spend KeyedRecord

func (s *Spend) keyed() *KeyedRecord { return (*KeyedRecord)(s) }

// Applied reports whether the register holds an application of the key.
func (s *Spend) Applied() bool { return s.keyed().Applied() }

// BookedMs is the time the winning application is booked at.
func (s *Spend) BookedMs() int64 { return s.keyed().BookedMs() }

// Wins reports whether s's register beats o's, as KeyedRecord.Wins.
func (s *Spend) Wins(o *Spend) bool { return s.keyed().Wins(o.keyed()) }

// Merge folds o into s, as KeyedRecord.Merge; it reports whether s changed.
func (s *Spend) Merge(o *Spend) bool { return s.keyed().Merge(o.keyed()) }

// Excess is Σ(P − N) over Contrib minus Amount if applied.
func (s *Spend) Excess() int64 { return s.keyed().Excess() }

// Apply records the local application of a spend's key at replica self,
// stamped hlc, on a record that holds no earlier application: Amount is
// amount (−by), and self's contribution takes it. The application takes At
// zero; a caller with a client's time sets At afterwards. It returns the
// change to self's contribution, which the caller's spend of the budget
// has already made to the main vector.
func (s *Spend) Apply(self string, amount int64, hlc HLC) (delta int64) {
	return s.keyed().ApplyCounted(self, amount, amount, hlc)
}

// Fence makes s's register a fence by replica self, as KeyedRecord.Fence;
// the caller gives self's own application back (RefundLoser).
func (s *Spend) Fence(self string, hlc HLC, at int64) { s.keyed().Fence(self, hlc, at) }

// IsFenced reports whether the register is a fence.
func (s *Spend) IsFenced() bool { return s.Fenced }

// Requested is the amount the key was applied with, as
// KeyedRecord.Requested.
func (s *Spend) Requested() int64 { return s.keyed().Requested() }

// Clone returns a deep copy.
func (s *Spend) Clone() *Spend { return (*Spend)(s.keyed().Clone()) }

// Equal reports whether s and o are the same state.
func (s *Spend) Equal(o *Spend) bool { return s.keyed().Equal(o.keyed()) }

// Restrict returns a copy of s keeping only what keep accepts, as
// KeyedRecord.Restrict.
func (s *Spend) Restrict(keep func(replica string) bool) (*Spend, bool) {
	p, cut := s.keyed().Restrict(keep)
	return (*Spend)(p), cut
}

// Empty reports whether s holds nothing: no register, no contribution.
func (s *Spend) Empty() bool { return s.keyed().Empty() }

// Stamp is the register's HLC and Origin.
func (s *Spend) Stamp() (HLC, string) { return s.HLC, s.Origin }

// Contributions is Contrib.
func (s *Spend) Contributions() Vector { return s.Contrib }

func (*Spend) isRecord() {}

// RefundLoser is the reconciliation rule of a budget's keyed spend: a
// replica that applied the spend but is not the record's winner (Origin)
// takes its own application back, as a refund (P). The winner never acts,
// unless the winner is a fence (KeyedRecord.Fence): then every replica,
// its origin too, gives its own application back.
// So every change a reconciliation makes gives rights back and none spends
// them: the like records' rule, where the winner fixes the excess in either
// direction from its own view, could spend again on a stale view of a
// loser's refund, without the rights check a spend needs. It returns the
// change to self's entry of the budget's main vector (≥ 0).
func (s *Spend) RefundLoser(self string) (delta int64) {
	if s.Origin == self && !s.Fenced {
		return 0
	}
	own := s.Contrib.Get(self)
	if own.N <= own.P {
		return 0
	}
	d := own.N - own.P
	s.Contrib = s.Contrib.Set(self, PN{P: own.P + d, N: own.N})
	return int64(d)
}

// TakeBackLoser is the reconciliation rule of a budget's keyed grant: a
// replica that applied the grant but is not the record's winner takes
// its own application back (N), as far as rights, what it holds of the
// budget now, allows. Taking back more would spend rights it does not
// hold: rights it already spent of the duplicate grant stay granted. A
// later call (after more rights came) takes back the rest. It returns
// the change to self's entry of the budget's main vector (≤ 0).
func (s *Spend) TakeBackLoser(self string, rights int64) (delta int64) {
	if (s.Origin == self && !s.Fenced) || rights <= 0 {
		return 0
	}
	own := s.Contrib.Get(self)
	if own.P <= own.N {
		return 0
	}
	d := min(own.P-own.N, uint64(rights))
	s.Contrib = s.Contrib.Set(self, PN{P: own.P, N: own.N + d})
	return -int64(d)
}
