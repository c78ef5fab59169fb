package replication

import (
	"sync"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// Outbox coalesces committed changes until the next flush: one own entry
// per vector and one state per like record, however many commits touched
// them. Its Add method is the region's OnCommit hook and never blocks on the
// network.
type Outbox struct {
	mu    sync.Mutex // protects vecs, recs and pages
	vecs  map[outVec]crdt.PN
	recs  map[outRec]crdt.Record
	pages map[outPage]*crdt.HLLPage
	asks  map[string]int64 // budget key -> rights wanted
}

// outPage names one page of this replica's sketch of a key.
type outPage struct {
	kind storage.Kind
	name string
	page int
}

type outVec struct {
	kind storage.Kind
	item string
}

// outRec names a record: a like record, a keyed record (counter key,
// idempotency key) or a spend (budget key, idempotency key), which may
// share both names with a record of another kind.
type outRec struct {
	item, user string
	kind       storage.Kind // the vectors the record counts in, as region names its kind
}

// outRecOf names the record r carries.
func outRecOf(r *region.RecordChange) outRec {
	k := outRec{item: r.Item, user: r.User, kind: storage.Likes}
	switch r.Rec.(type) {
	case *crdt.KeyedRecord:
		k.kind = storage.Counters
	case *crdt.Spend:
		k.kind = storage.Budgets
	}
	return k
}

// mergeRecord folds r into cur, a record of the same kind.
func mergeRecord(cur, r crdt.Record) {
	switch cur := cur.(type) {
	case *crdt.LikeRecord:
		cur.Merge(r.(*crdt.LikeRecord))
	case *crdt.KeyedRecord:
		cur.Merge(r.(*crdt.KeyedRecord))
	case *crdt.Spend:
		cur.Merge(r.(*crdt.Spend))
	case *crdt.TypeMeta:
		cur.Merge(*r.(*crdt.TypeMeta))
	}
}

// NewOutbox returns an empty outbox.
func NewOutbox() *Outbox {
	return &Outbox{vecs: make(map[outVec]crdt.PN), recs: make(map[outRec]crdt.Record), pages: make(map[outPage]*crdt.HLLPage),
		asks: make(map[string]int64)}
}

// Add queues one commit's changes. It is region.Config.OnCommit.
func (o *Outbox) Add(c region.Changes) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range c.Vectors {
		k := outVec{v.Kind, v.Item}
		o.vecs[k] = o.vecs[k].Merge(v.Own)
	}
	for i := range c.Records {
		r := &c.Records[i]
		k := outRecOf(r)
		if cur, ok := o.recs[k]; ok {
			mergeRecord(cur, r.Rec)
		} else {
			o.recs[k] = r.Rec // a private copy, per region.Changes
		}
	}
	for _, a := range c.Asks {
		o.asks[a.Key] = max(o.asks[a.Key], a.Want)
	}
	for i := range c.Sketches {
		sc := &c.Sketches[i]
		k := outPage{sc.Kind, sc.Name, sc.Page}
		if cur, ok := o.pages[k]; ok {
			cur.Merge(&sc.Regs)
		} else {
			p := sc.Regs
			o.pages[k] = &p
		}
	}
}

// Len is how many entries wait for the next flush.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.vecs) + len(o.recs) + len(o.pages) + len(o.asks)
}

// take empties the outbox and returns what it held.
func (o *Outbox) take() ([]OwnEntry, []Record, []OwnPage, []Ask) {
	o.mu.Lock()
	vecs, recs, pages, asks := o.vecs, o.recs, o.pages, o.asks
	if len(vecs) == 0 && len(recs) == 0 && len(pages) == 0 && len(asks) == 0 {
		o.mu.Unlock()
		return nil, nil, nil, nil
	}
	o.vecs = make(map[outVec]crdt.PN, len(vecs))
	o.recs = make(map[outRec]crdt.Record, len(recs))
	o.pages = make(map[outPage]*crdt.HLLPage, len(pages))
	o.asks = make(map[string]int64)
	o.mu.Unlock()
	oa := make([]Ask, 0, len(asks))
	for k, w := range asks {
		oa = append(oa, Ask{Key: k, Want: w})
	}
	op := make([]OwnPage, 0, len(pages))
	for k, p := range pages {
		op = append(op, OwnPage{Kind: k.kind, Name: k.name, Page: k.page, Regs: p})
	}
	ov := make([]OwnEntry, 0, len(vecs))
	for k, pn := range vecs {
		ov = append(ov, OwnEntry{Kind: k.kind, Item: k.item, PN: pn})
	}
	or := make([]Record, 0, len(recs))
	for k, r := range recs {
		or = append(or, Record{Item: k.item, User: k.user, Rec: r})
	}
	return ov, or, op, oa
}
