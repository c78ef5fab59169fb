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
// recovery ends (recovery waits at least two heartbeat intervals), so it
// never acknowledges a write. Two processes started on opposite sides of
// a partition are found when it heals; the later one then stops.

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
	first := r.seenRival.Load() != h.Incarnation
	if first {
		r.seenRival.Store(h.Incarnation)
		r.announce() // so that the other process decides too
	}
	me := r.hello()
	if h.StartedMs < me.StartedMs || h.StartedMs == me.StartedMs && h.Incarnation < me.Incarnation {
		r.cfg.Replica.Stop(fmt.Errorf("%w: process %x (pid %d on %s, started %s) held %q first; give this process its own id",
			region.ErrIDConflict, h.Incarnation, h.PID, h.Host,
			time.UnixMilli(h.StartedMs).UTC().Format(time.RFC3339), r.self))
		return
	}
	if first {
		r.log.Error("another process started with this replica's id; it stops, this one goes on",
			"replica", r.self, "other_host", h.Host, "other_pid", h.PID)
	}
}
