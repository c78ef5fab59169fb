package replication

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/tally-dev/tally/region"
)

// A replica id must be held by one process at a time: two processes with
// the same id write the same entries, and max-merge keeps only the larger
// of two different histories, losing acknowledged writes. Each process
// announces itself on tally.id.<replica> when it starts, and again when a
// delta shows another incarnation publishing as its id. When two processes
// hear each other, the one that started later (ties by incarnation) stops:
// it refuses reads and writes with region.ErrIDConflict until restarted,
// and the earlier one goes on. A newcomer hears the holder before its
// recovery ends (recovery waits at least two heartbeat intervals, and the
// holder sends a heartbeat every interval), so it never acknowledges a
// write. Two processes started on opposite sides of a partition are found
// when it heals; the later one then stops.
//
// A hello is only a claim, so it stops this process only once the
// process it names has also been seen doing what a holder of the id does:
// publishing deltas on this replica's own delta subject, with the
// incarnation the hello names. A hello alone (issue 27: one with
// started_ms 0 stopped a live replica) makes this process announce itself
// and log, nothing more. With the shipped NATS permissions only the
// replica's own user may publish on either subject, so only a process
// holding its credentials can be taken for a rival at all; on a NATS
// without authorization anyone can forge both (docs/architecture.md,
// "Threat model").

const subjectIDPrefix = "tally.id."

func idSubject(replica string) string { return subjectIDPrefix + token(replica) }

// hello is the announcement of one process holding a replica id.
type hello struct {
	Replica     string `json:"replica"`
	Incarnation uint64 `json:"incarnation"`
	StartedMs   int64  `json:"started_ms"`
	Host        string `json:"host"`
	PID         int    `json:"pid"`
}

func (r *Replicator) hello() hello {
	host, _ := os.Hostname()
	return hello{Replica: r.self, Incarnation: r.incarnation, StartedMs: r.started.UnixMilli(), Host: host, PID: os.Getpid()}
}

// announce publishes this process's hello.
func (r *Replicator) announce() {
	data, err := json.Marshal(r.hello())
	if err == nil {
		err = r.cfg.Transport.Publish(idSubject(r.self), data)
	}
	if err != nil {
		r.log.Debug("announce replica id", "error", err)
	}
}

// onHello runs on the transport's goroutine for every hello on our id.
func (r *Replicator) onHello(_ string, data []byte) {
	var h hello
	if err := json.Unmarshal(data, &h); err != nil || h.Replica != r.self {
		r.m.badMessages.Inc()
		return
	}
	if h.Incarnation == r.incarnation {
		return // our own
	}
	r.m.ownIDConflicts.Inc()
	if r.seenRival.Swap(h.Incarnation) != h.Incarnation {
		r.announce() // so that the other process decides too
	}
	r.idMu.Lock()
	r.rivalHello = &h
	r.idMu.Unlock()
	r.judgeRival()
}

// sawRivalDelta notes a delta on this replica's own subject from another
// incarnation: the evidence a hello needs (judgeRival).
func (r *Replicator) sawRivalDelta(incarnation uint64) {
	r.rivalDelta.Store(incarnation)
	r.judgeRival()
}

// judgeRival decides, once the latest rival hello and a delta from the same
// incarnation are both in, which of the two processes stops: this one if
// the other started first.
func (r *Replicator) judgeRival() {
	r.idMu.Lock()
	h := r.rivalHello
	if h == nil {
		r.idMu.Unlock()
		return
	}
	me := r.hello()
	earlier := h.StartedMs < me.StartedMs || h.StartedMs == me.StartedMs && h.Incarnation < me.Incarnation
	proven := r.rivalDelta.Load() == h.Incarnation
	logged := r.rivalLogged == h.Incarnation
	if !earlier || !proven {
		r.rivalLogged = h.Incarnation
	}
	r.idMu.Unlock()
	switch {
	case earlier && proven:
		r.cfg.Replica.Stop(fmt.Errorf("%w: process %x (pid %d on %s, started %s) held %q first; give this process its own id",
			region.ErrIDConflict, h.Incarnation, h.PID, h.Host,
			time.UnixMilli(h.StartedMs).UTC().Format(time.RFC3339), r.self))
	case logged:
	case earlier:
		r.log.Warn("a hello says another process held this replica's id first; this one stops only once that process publishes as it too",
			"replica", r.self, "other_host", h.Host, "other_pid", h.PID)
	default:
		r.log.Error("another process started with this replica's id; it stops, this one goes on",
			"replica", r.self, "other_host", h.Host, "other_pid", h.PID)
	}
}
