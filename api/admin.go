// The shapes of shard maps and the admin routes of a deployment: links,
// shard moves, replicas and backups.

package api

import "time"

// Link is one inter-region link of a local deployment.
type Link struct {
	A       string `json:"a"`
	B       string `json:"b"`
	Up      bool   `json:"up"`
	BytesAB int64  `json:"bytes_ab"`
	BytesBA int64  `json:"bytes_ba"`
}

// Links answers GET /v1/admin/links.
type Links struct {
	Links []Link    `json:"links"`
	At    time.Time `json:"at"`
}

// ShardMap answers GET /v1/shards: which of a region's replicas hold
// each of the deployment's shards. Shards lists numbers and runs
// ("0-340", "342"); Count is how many shards that is. Revision is the
// map's revision in the deployment's shard map bucket (JetStream KV,
// `tallyd admin shards`); absent for a map the replica computed from its
// config because the bucket held none.
type ShardMap struct {
	Region   string         `json:"region"`
	Shards   int            `json:"shards"`
	Copies   int            `json:"copies"`
	Revision uint64         `json:"revision,omitempty"`
	Replicas []ShardHolding `json:"replicas"`
}

// ShardHolding is one replica's shards in a ShardMap.
type ShardHolding struct {
	Replica string   `json:"replica"`
	Shards  []string `json:"shards"`
	Count   int      `json:"count"`
	// State is how the replica answering sees this one: "up" (itself, or
	// a peer heard from within its timeout) or "stale"; absent in a map
	// not read from a replica.
	State string `json:"state,omitempty"`
	// URL is the replica's HTTP address as it advertises it
	// (advertise_url, else its bound address): a client may send a key's
	// requests straight to a holder of the key's shard. Absent when the
	// replica did not answer the replica serving the map in time, or
	// listens on every interface without advertise_url.
	URL string `json:"url,omitempty"`
	// Joining and Leaving are a shard move in progress (`tallyd admin
	// shards move`): the shards the replica is taking (it syncs them and
	// serves them once the map switches) and those it gave up (it keeps
	// them until their holders have its entries, then deletes them).
	Joining []string `json:"joining,omitempty"`
	Leaving []string `json:"leaving,omitempty"`
	// Synced (a replica joining shards) says it has pulled them from
	// every holder since it started joining; Released (a replica leaving
	// shards) says every replica keeping them compared equal with it
	// since the switch. Each as the replica itself answered (absent when
	// it did not answer in time or moves nothing).
	Synced   *bool `json:"synced,omitempty"`
	Released *bool `json:"released,omitempty"`
	// MapRevision is the revision of the region's map the replica serves
	// by, as it answered (absent when it did not answer, or serves by its
	// config's map).
	MapRevision uint64 `json:"map_revision,omitempty"`
}

// ShardMove answers PUT /v1/admin/shards/{region} in a local deployment:
// a move of the region's shards begun (State "moving"), whose progress
// GET /v1/shards shows (joining, synced, leaving, released); the
// deployment's log says when it is done.
type ShardMove struct {
	Region string `json:"region"`
	State  string `json:"state"`
	// Added is the replica added to the region, when the move spreads
	// the shards to a new one ({"add": 1}).
	Added string `json:"added,omitempty"`
	// Target is the map the region moves to.
	Target ShardMap `json:"target"`
}

// ReplicaState is one replica of a local deployment, as PUT and GET
// /v1/admin/replicas answer it. State is "up", "stopping", "down" or
// "starting"; a stop or start is asynchronous, so a PUT answers the state
// it left the replica in, and GET follows it.
type ReplicaState struct {
	Replica string `json:"replica"`
	Region  string `json:"region"`
	URL     string `json:"url"`
	State   string `json:"state"`
	// Error is why the last start failed, if it did.
	Error string `json:"error,omitempty"`
}

// Replicas answers GET /v1/admin/replicas.
type Replicas struct {
	Replicas []ReplicaState `json:"replicas"`
}

// Backup answers POST /v1/admin/backup: the checkpoint the replica wrote,
// on its own machine, ready to replace a data directory
// (docs/operations.md, "Backup and restore").
type Backup struct {
	Replica string `json:"replica"`
	Region  string `json:"region"`
	// Dir is the directory the checkpoint is in.
	Dir   string `json:"dir"`
	Files int    `json:"files"`
	// Bytes is the checkpoint's size; tables it shares with the data
	// directory through hard links count in full.
	Bytes int64 `json:"bytes"`
	// TakenAt is when the checkpoint was taken, RFC 3339 in UTC.
	TakenAt string `json:"taken_at"`
}
