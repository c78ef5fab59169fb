package bench

// The simulation's computed traffic: idle heartbeats and digest
// exchanges from the wire encoders over shard maps, and the projection to
// more replicas per region.

import (
	"math"
	"slices"
	"time"

	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// simBeatModel is what one replica receives idle, each second, on the
// fast path, computed from the wire encoders over shard maps (not
// measured): the heartbeats of the peers it follows (those of its region,
// and those sharing a keyed shard with it: every replica holds
// shard.Global) and the liveness summary of each region of which it
// does not follow every replica, whose size does not grow with the
// region while its replicas are up (replication/liveness.go). EveryBeat is the same had every replica's
// heartbeats reached every replica, as before.
type simBeatModel struct {
	Replica     string  `json:"replica"`
	Peers       int     `json:"peers"`
	OwnRegion   int     `json:"own_region_peers"`
	Sharing     int     `json:"other_region_peers_sharing_a_keyed_shard"`
	Summaries   int     `json:"summaries"`
	BeatBytes   float64 `json:"heartbeat_bytes"`
	SummaryB    float64 `json:"summary_bytes"`
	BytesPerSec float64 `json:"bytes_per_second"`
	EveryBeat   float64 `json:"every_heartbeat_bytes_per_second"`
}

// beatModel computes simBeatModel for replica id of maps, whose every
// other replica is a peer, at the replicators' default intervals.
func beatModel(maps shard.Maps, id string) simBeatModel {
	def := replication.DefaultConfig()
	beat := func(p, rg string) int {
		return len(replication.AppendDelta(nil, &replication.Delta{Replica: p, Region: rg, Incarnation: math.MaxUint64,
			Seq: 1 << 20, SentAtMs: time.Now().UnixMilli(), Root: math.MaxUint64}))
	}
	own, ownRegion := shard.All(), ""
	if rg, ok := maps.RegionOf(id); ok {
		ownRegion = rg
		for _, m := range maps {
			if m.Region == rg {
				own = m.Keeps(id)
			}
		}
	}
	var global shard.Set
	global.Add(shard.Global)
	own = own.Minus(global)
	res := simBeatModel{Replica: id}
	var beats, every, summaries int
	for _, m := range maps {
		members := m.Replicas()
		followsAll := true
		for _, p := range members {
			if p == id {
				continue
			}
			res.Peers++
			b := beat(p, m.Region)
			every += b
			shared := own.And(m.Keeps(p))
			switch {
			case m.Region == ownRegion:
				res.OwnRegion++
			case shared.Len() > 0:
				res.Sharing++
			default:
				followsAll = false
				continue
			}
			beats += b
		}
		if !followsAll {
			res.Summaries++
			summaries += len(replication.AppendLiveness(nil, &replication.Liveness{Replica: members[0], Region: m.Region,
				Incarnation: math.MaxUint64, Members: math.MaxUint64, AgoMs: uint64(def.HeartbeatInterval.Milliseconds())}))
		}
	}
	followed := res.OwnRegion + res.Sharing
	res.BeatBytes = float64(beats) / float64(max(followed, 1))
	res.SummaryB = float64(summaries) / float64(max(res.Summaries, 1))
	res.BytesPerSec = float64(beats)/def.HeartbeatInterval.Seconds() +
		float64(summaries)/replication.LivenessInterval(def.HeartbeatInterval, def.PeerTimeout).Seconds()
	res.EveryBeat = float64(every) / def.HeartbeatInterval.Seconds()
	return res
}

// simDigestModel is what one replica's digest exchanges with all its
// peers weigh in one anti-entropy interval, computed from the wire
// encoders over shard maps (not measured): idle (every shared segment
// equal: a request naming the shared shards, with a summary, and an
// "equal"), with every shared segment's digest (everything differs), and
// as before DigestsRequest (every digest to every peer).
type simDigestModel struct {
	Replica string  `json:"replica"`
	Peers   int     `json:"peers"`
	Shared  float64 `json:"mean_shared_shards"`
	Idle    int64   `json:"idle_bytes"`
	Full    int64   `json:"all_differing_bytes"`
	Before  int64   `json:"every_digest_bytes"`
}

// digestModel computes simDigestModel for replica id of maps, whose
// every other replica is a peer.
func digestModel(maps shard.Maps, id string) simDigestModel {
	kept := func(r string) shard.Set {
		for _, m := range maps {
			if slices.Contains(m.Replicas(), r) {
				return m.Keeps(r)
			}
		}
		return shard.All()
	}
	own := kept(id)
	full := len(replication.AppendDigests(nil, id, make([]uint64, storage.Segments)))
	res := simDigestModel{Replica: id}
	var shared int
	for _, p := range maps.Replicas() {
		if p == id {
			continue
		}
		ss := own.And(kept(p))
		res.Peers++
		shared += ss.Len()
		res.Before += int64(full)
		if ss.Len() == 0 {
			continue // a live peer sharing nothing is not asked
		}
		req := int64(len(replication.AppendDigestsRequest(nil, &replication.DigestsRequest{Shards: ss})))
		res.Idle += req + int64(len(replication.AppendShardDigests(nil, &replication.ShardDigests{Replica: p, Equal: true})))
		res.Full += req + int64(len(replication.AppendShardDigests(nil, &replication.ShardDigests{Replica: p,
			Digests: make([]uint64, ss.Len()*storage.SegmentsPerShard)})))
	}
	res.Shared = float64(shared) / float64(max(res.Peers, 1))
	return res
}

// project scales the run's figures to replicas per region, at the same
// regions, copies and likes:
//
//   - bytes per replica ~ likes × bytes per like copy × copies / replicas
//     (a region keeps copies copies of every like, spread over its
//     replicas);
//   - fast-path bytes per like stay: a like's delta reaches the
//     regions × copies holders of its shard, however many replicas a
//     region has;
//   - every replica hears each second the heartbeats of the peers it
//     follows (its region's, and those sharing a keyed shard with it)
//     and, every few seconds, the liveness summary of each region of
//     which it does not follow every replica: the
//     bytes of one replica's are computed from the wire encoders over
//     shard.Assign's maps at that size (beatModel), times N;
//   - each anti-entropy interval every replica sends each peer it shares
//     a shard with (every one: all hold the global shard) a request
//     naming the shards they share, and idle gets "equal" back: the
//     bytes of one replica's requests and answers are computed from the
//     wire encoders over shard.Assign's maps at that size (digestModel),
//     times N.
func project(r simResult, replicas int) simProjection {
	n := float64(r.Regions * replicas)
	p := simProjection{
		Replicas:        replicas,
		BytesPerReplica: float64(r.Likes) * r.Stored.PerLikeCopy * float64(r.Copies) / float64(replicas),
	}
	if r.Likes > 0 {
		p.FastBytesPerLike = float64(r.Load.Wire.Delivered) / float64(r.Likes)
	}
	if r.AEInterval > 0 {
		p.Model = simProjectModel(r.Regions, replicas, r.Copies)
		p.DigestBytesPerSec = float64(p.Model.Idle) * n / r.AEInterval
	}
	p.Beats = simProjectBeats(r.Regions, replicas, r.Copies)
	p.HeartbeatBytesPerSec = p.Beats.BytesPerSec * n
	return p
}

// simProjectModel is digestModel for the first replica of regions
// regions of replicas replicas each, as shard.Assign maps them.
func simProjectModel(regions, replicas, copies int) simDigestModel {
	return digestModel(simProjectMaps(regions, replicas, copies), simReplica(0, 0))
}

// simProjectBeats is beatModel for the same replica.
func simProjectBeats(regions, replicas, copies int) simBeatModel {
	return beatModel(simProjectMaps(regions, replicas, copies), simReplica(0, 0))
}

// simProjectMaps are shard.Assign's maps of regions regions of replicas
// replicas each (none if it fails).
func simProjectMaps(regions, replicas, copies int) shard.Maps {
	var maps shard.Maps
	for i := range regions {
		var members []string
		for j := range replicas {
			members = append(members, simReplica(i, j))
		}
		m, err := shard.Assign(simRegion(i), members, min(copies, replicas))
		if err != nil {
			return nil
		}
		maps = append(maps, m)
	}
	return maps
}

// simHeartbeat is the replicators' heartbeat interval (their default).
var simHeartbeat = replication.DefaultConfig().HeartbeatInterval

// secs formats seconds for the progress lines and the table.
