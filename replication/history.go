package replication

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// A pair's like history is the union of what each replica accepted: every
// replica keeps its own likes and unlikes (storage.History) and answers
// for them on tally.ae.<replica>.history, so the history is exact for
// every replica that answers, and says which did not.

func historySubject(replica string) string { return subjectAEPrefix + token(replica) + ".history" }

// PairAction is one like or unlike, with where it was accepted. It is
// region's, so that the front doors read a history without importing
// this package.
type PairAction = region.PairAction

// PairHistory is a pair's history as gathered from the replicas.
type PairHistory = region.PairHistory

// Wire: a request is v1 | typeHistoryReq | item | user | limit; a reply
// is v1 | typeHistory | region | count | (liked (0/1) | HLC | seq)* |
// flags, or empty when the replica has no history to give (its log is
// off). flags bit 0: the replica's history is partial (StateLost). A
// reply without flags (an older replica) decodes as whole; an older
// replica refuses a reply with them, so during an upgrade it names the
// newer replicas as missing, never as whole.
const (
	typeHistoryReq = 5
	typeHistory    = 6
)

func appendHistoryRequest(item, user string, limit int) []byte {
	b := []byte{wireV1, typeHistoryReq}
	b = appendStr(b, item)
	b = appendStr(b, user)
	return binary.AppendUvarint(b, uint64(limit))
}

func (r *Replicator) serveHistory(data []byte) []byte {
	d := &reader{b: data}
	d.header(typeHistoryReq)
	item, user := d.item(storage.Likes), d.id() // an item, or a split item's part
	limit := d.uvarint()
	if d.finish("history request") != nil || limit < 1 || limit > region.MaxHistory {
		r.m.badMessages.Inc()
		return nil
	}
	actions, err := r.cfg.Replica.Likes().History(item, user, int(limit))
	if err != nil {
		return nil
	}
	b := []byte{wireV1, typeHistory}
	b = appendStr(b, r.cfg.Replica.Region())
	b = binary.AppendUvarint(b, uint64(len(actions)))
	for _, a := range actions {
		liked := uint64(0)
		if a.Liked {
			liked = 1
		}
		b = binary.AppendUvarint(b, liked)
		b = binary.AppendUvarint(b, uint64(a.HLC))
		b = binary.AppendUvarint(b, a.Seq)
	}
	var flags uint64
	if r.cfg.Replica.StateLost() {
		flags |= historyPartial
	}
	return binary.AppendUvarint(b, flags)
}

// historyPartial is the flag of a reply from a replica whose history
// does not cover its whole life.
const historyPartial = 1

// DecodeHistoryReply decodes replica's answer to a history request, and
// whether replica said its history is partial.
func DecodeHistoryReply(data []byte, replica string) ([]PairAction, bool, error) {
	if len(data) == 0 {
		return nil, false, fmt.Errorf("%s keeps no history (its event log is off, or it failed)", replica)
	}
	d := &reader{b: data}
	d.header(typeHistory)
	reg := d.id()
	n := d.count()
	if d.err == nil && n > region.MaxHistory {
		d.fail("%d actions", n)
	}
	var out []PairAction
	for i := 0; i < n && d.err == nil; i++ {
		liked := d.uvarint()
		if d.err == nil && liked > 1 {
			d.fail("liked %d", liked)
		}
		out = append(out, PairAction{Replica: replica, Region: reg, Liked: liked == 1, HLC: crdt.HLC(d.uvarint()), Seq: d.uvarint()})
	}
	var flags uint64
	if d.err == nil && len(d.b) > 0 {
		if flags = d.uvarint(); d.err == nil && flags&^historyPartial != 0 {
			d.fail("history flags %#x", flags)
		}
	}
	if err := d.finish("history"); err != nil {
		return nil, false, err
	}
	return out, flags&historyPartial != 0, nil
}

// History gathers the likes and unlikes of (item, user) from this replica
// and every configured peer (the newest limit of each), oldest first.
func (r *Replicator) History(ctx context.Context, item, user string, limit int) (PairHistory, error) {
	own, err := r.cfg.Replica.Likes().History(item, user, limit)
	if err != nil {
		return PairHistory{}, err
	}
	var h PairHistory
	if r.cfg.Replica.StateLost() {
		h.Partial = append(h.Partial, r.self)
	}
	for _, a := range own {
		h.Actions = append(h.Actions, PairAction{Replica: r.self, Region: r.cfg.Replica.Region(), Liked: a.Liked, HLC: a.HLC, Seq: a.Seq})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	req := appendHistoryRequest(item, user, limit)
	for _, p := range r.peerIDs() {
		wg.Go(func() {
			data, err := r.request(ctx, historySubject(p), req)
			var got []PairAction
			var partial bool
			if err == nil {
				got, partial, err = DecodeHistoryReply(data, p)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				h.Missing = append(h.Missing, p)
				return
			}
			h.Actions = append(h.Actions, got...)
			if partial {
				h.Partial = append(h.Partial, p)
			}
		})
	}
	wg.Wait()
	slices.Sort(h.Missing)
	slices.Sort(h.Partial)
	slices.SortFunc(h.Actions, func(a, b PairAction) int {
		return cmp.Or(cmp.Compare(a.HLC, b.HLC), strings.Compare(a.Replica, b.Replica))
	})
	return h, nil
}
