package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/storage"
)

// stepClock runs a clock episode: the region's wall clock is offset by
// e.Offset for e.Dur, then set right, two steps of the kind a bad NTP
// server or an operator's typo makes. Only a chaos build can be told to.
func (x *executor) stepClock(ctx context.Context, e Episode) error {
	p := x.d.proc(e.Region)
	if err := p.client.setClockOffset(ctx, e.Offset); err != nil {
		return fmt.Errorf("clock step skipped: %w", err)
	}
	sleep(ctx, e.Dur)
	// Set right even if ctx ended: the final checks run on this clock.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return p.client.setClockOffset(cctx, 0)
}

// setClockOffset offsets a chaos build's wall clock (PUT
// /v1/admin/chaos/clock).
func (c *client) setClockOffset(ctx context.Context, d time.Duration) error {
	body, _ := json.Marshal(map[string]int64{"offset_ms": d.Milliseconds()})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.api.BaseURL()+"/v1/admin/chaos/clock", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d (a chaos build of tallyd serves this route)", req.URL, resp.StatusCode)
	}
	return nil
}

// forgedReplica is the id the malicious region makes up.
const forgedReplica = "zz-9"

// forge runs a forge episode: a client on e.Region's NATS server, with
// that region's access, publishes forged deltas for e.Dur. None of them
// may change a count or a record anywhere (docs/architecture.md, "Threat
// model"); the final checks find out.
//
//   - From a replica nobody configured: like-count and counter entries of
//     its own, in the all-time vectors and the time buckets, and like
//     records naming real replicas.
//   - On the region's own replica's subject: like records whose register
//     and contributions belong to other replicas, as if relayed, and block
//     flags set in another replica's name.
//   - On the same subject: the replica's own records and block flags
//     stamped a year ahead.
func (x *executor) forge(ctx context.Context, e Episode) error {
	nc, err := nats.Connect(x.d.net.ClientURL(e.Region), nats.Name("chaos forger"))
	if err != nil {
		return fmt.Errorf("forge skipped: %w", err)
	}
	defer nc.Close()
	rng := rand.New(rand.NewPCG(x.cfg.Seed, uint64(e.Index)))
	self := replicaID(e.Region)
	var others []string
	for _, r := range x.cfg.Regions {
		if r != e.Region {
			others = append(others, replicaID(r))
		}
	}
	pickKey := func() (string, string) {
		return itemID(rng.IntN(x.cfg.Items)), userID(rng.IntN(x.cfg.Users))
	}
	seq := uint64(0)
	publish := func(d *replication.Delta) error {
		seq++
		d.Incarnation, d.Seq, d.SentAtMs = 0x5eed, seq, time.Now().UnixMilli()
		return nc.Publish("tally.delta."+d.Region+"."+d.Replica, replication.AppendDelta(nil, d))
	}
	sent := 0
	for end := time.Now().Add(e.Dur); time.Now().Before(end) && ctx.Err() == nil; sleep(ctx, 50*time.Millisecond) {
		now := crdt.MakeHLC(time.Now().UnixMilli(), 0)
		y, z := others[rng.IntN(len(others))], others[rng.IntN(len(others))]
		item, user := pickKey()
		ctr := counterID(rng.IntN(x.cfg.Counters))
		sec := time.Now().Unix()
		stranger := &replication.Delta{Replica: forgedReplica, Region: e.Region,
			Vectors: []replication.OwnEntry{
				{Kind: storage.Likes, Item: item, PN: crdt.PN{P: 1000}},
				{Kind: storage.Counters, Item: ctr, PN: crdt.PN{N: 1000}},
				// And their time buckets (windowLevels' 1 s and 1 min).
				{Kind: storage.Likes.Windows(), Item: crdt.Bucket{Key: item, Width: 1, Start: sec, Keep: 3 * 3600}.Name(), PN: crdt.PN{P: 1000}},
				{Kind: storage.Counters.Windows(), Item: crdt.Bucket{Key: ctr, Width: 60, Start: sec - sec%60, Keep: 15 * 86400}.Name(), PN: crdt.PN{P: 1000}},
			},
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: now + 5000<<16, Origin: y,
				Contrib: crdt.Vector{}.Set(y, crdt.PN{N: 7}).Set(forgedReplica, crdt.PN{P: 1000}),
			}}},
		}
		item, user = pickKey()
		relay := &replication.Delta{Replica: self, Region: e.Region,
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: now + 5000<<16, Origin: y,
				Contrib: crdt.Vector{}.Set(y, crdt.PN{N: 7}).Set(z, crdt.PN{P: 3}),
			}}},
		}
		// A block of any user (most are never blocked), as if relayed.
		_, user = pickKey()
		relay.Records = append(relay.Records, replication.Record{Item: region.BlockRecordItem, User: user,
			Rec: crdt.Flag{Blocked: true, HLC: now + 5000<<16, Origin: y}.Record()})
		item, user = pickKey()
		yearAhead := crdt.MakeHLC(time.Now().Add(365*24*time.Hour).UnixMilli(), 0)
		future := &replication.Delta{Replica: self, Region: e.Region,
			Records: []replication.Record{{Item: item, User: user, Rec: &crdt.LikeRecord{
				Liked: rng.IntN(2) == 0, HLC: yearAhead, Origin: self,
				Contrib: crdt.Vector{}.Set(self, crdt.PN{P: 1}),
			}}},
		}
		_, user = pickKey()
		future.Records = append(future.Records, replication.Record{Item: region.BlockRecordItem, User: user,
			Rec: crdt.Flag{Blocked: true, HLC: yearAhead, Origin: self}.Record()})
		for _, d := range []*replication.Delta{stranger, relay, future} {
			if err := publish(d); err != nil {
				return fmt.Errorf("forge: %w", err)
			}
			sent++
		}
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("forge: %w", err)
	}
	x.logf("forged %d deltas as %s", sent, e.Region)
	return nil
}
