package node

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Config is one replica's settings. `tallyd serve` reads it, in rising
// precedence, from DefaultConfig, an HCL file, the environment (tokens
// only) and flags; the hcl tags name the file's attributes.
// configs/tallyd.hcl documents every field.
type Config struct {
	// Region is the geography this replica serves, e.g. "us". Default "local".
	Region string `hcl:"region,optional"`
	// Replica is this replica's stable id, unique across all regions; it
	// must not change for the same data. Default "<region>-1".
	Replica string `hcl:"replica,optional"`
	// DataDir is the Pebble directory, created if missing. Default
	// "./data/<replica>".
	DataDir string `hcl:"data_dir,optional"`
	// Listen is the HTTP address, host:port. Port 0 picks a free port.
	// Default "127.0.0.1:8080".
	Listen string `hcl:"listen,optional"`
	// AdvertiseURL is the address clients reach this replica's HTTP API
	// at, e.g. "https://us-1.tally.example:8080": GET /v1/shards lists it,
	// so a client can send a key's requests straight to a holder of its
	// shard. Default: http(s)://<the bound address> when Listen names a
	// host, none when it listens on every interface.
	AdvertiseURL string `hcl:"advertise_url,optional"`
	// DebugListen, if set, serves Go's profiler (/debug/pprof/) on this
	// separate address, host:port, for an operator finding where time or
	// memory goes. Keep it on loopback: profiles reveal internals and cost
	// CPU while they run. Default "" (off).
	DebugListen string `hcl:"debug_listen,optional"`
	// RESPListen, if set, serves the Redis protocol front door (package
	// resp) on this separate address, host:port: INCRBY, SADD likes:<item>,
	// PFADD and the rest as docs/api.md maps them, with the HTTP API's
	// validation, tokens (sent with AUTH) and durability. With tls_cert,
	// RESP is served over TLS with the HTTP listener's certificate (and
	// client CA), reloaded alike. Beyond loopback it needs a write token,
	// and TLS or insecure_listen.
	// Default "" (off).
	RESPListen string `hcl:"resp_listen,optional"`
	// RESPMaxConnections bounds the RESP connections open at once; the
	// next client is answered "ERR max number of clients reached" and
	// closed. Each open connection holds a goroutine and its buffers.
	// Default 10000, as Redis's maxclients.
	RESPMaxConnections int `hcl:"resp_max_connections,optional"`
	// RESPMaxConnectionsPerAddress bounds the RESP connections open at
	// once from one client address (IP), so one host cannot take every
	// connection of RESPMaxConnections; past it, that address is refused
	// and others are still served. Default 256.
	RESPMaxConnectionsPerAddress int `hcl:"resp_max_connections_per_address,optional"`
	// MinProcs is the fewest Go schedulers (GOMAXPROCS) the process
	// runs with; a lower GOMAXPROCS is raised to it. The runtime picks
	// one when the process may run on one CPU only (a one-CPU machine,
	// taskset, a cpuset), and GOMAXPROCS=1 sets it. With one, every WAL
	// fsync holds the only scheduler for its whole length, and requests
	// that arrive meanwhile wait unread: pinned to one core, single likes
	// over HTTP ran at 2,200-5,300/s (p99 205-256 ms) with one scheduler
	// and 10,800-14,200/s (p99 8-13 ms) with two (docs/performance.md).
	// Default 2; 0 or 1 leaves GOMAXPROCS as it is.
	MinProcs int `hcl:"min_procs,optional"`
	// Durability is "fsync" (acknowledge after the WAL fsync; the default)
	// or "none" (acknowledge before the fsync: a power loss may lose
	// acknowledged writes; /v1/status says so).
	Durability string `hcl:"durability,optional"`
	// WALMinSyncInterval makes a commit's WAL fsync wait until at least
	// this long after the previous one, as a Go duration, so that the
	// commits of that time share it. For a replica whose load comes a
	// message at a time (each replica of a sharded region on one disk:
	// docs/performance.md) rather than from many clients at once, whose
	// commits already share fsyncs. Default "" (0: sync as soon as the
	// previous sync ends); at most 100ms.
	WALMinSyncInterval string `hcl:"wal_min_sync_interval,optional"`
	// WriteToken, if set, is required as a bearer token on write routes.
	// Prefer the TALLY_WRITE_TOKEN environment variable to a file or flag.
	WriteToken string `hcl:"write_token,optional"`
	// AdminToken, if set, is required as a bearer token on admin routes and
	// is also accepted on write routes. Env: TALLY_ADMIN_TOKEN.
	AdminToken string `hcl:"admin_token,optional"`
	// ReadToken, if set, is required as a bearer token on every route but
	// the write routes and the probes, whatever its method (write and
	// admin tokens open reads too). Env: TALLY_READ_TOKEN.
	// Every token setting may list several tokens separated by spaces,
	// all valid: rotate a token by adding the new one, moving the
	// clients, then removing the old one.
	ReadToken string `hcl:"read_token,optional"`
	// TLSCert and TLSKey, if set, serve the API over HTTPS with this PEM
	// certificate (chain) and key. Both files are read again when they
	// change and on SIGHUP, so a renewed certificate needs no restart.
	TLSCert string `hcl:"tls_cert,optional"`
	TLSKey  string `hcl:"tls_key,optional"`
	// TLSClientCA, if set (with TLSCert), requires every client to present
	// a certificate signed by a CA in this PEM file (mutual TLS); reloaded
	// like the certificate.
	TLSClientCA string `hcl:"tls_client_ca,optional"`
	// InsecureListen allows listening beyond loopback without TLS or
	// without a write token. Without it such a listener is refused: bearer
	// tokens would travel in clear, or anyone reaching the port could
	// write. Default false.
	InsecureListen bool `hcl:"insecure_listen,optional"`
	// InsecureOpenAdmin allows listening beyond loopback without an admin
	// token, leaving the admin routes (block list, audit, budget handoff,
	// links) open to anyone reaching the port. Without it such a listener
	// is refused; insecure_listen does not imply it. Logged as a warning
	// at start. Default false.
	InsecureOpenAdmin bool `hcl:"insecure_open_admin,optional"`
	// Limits are token-bucket rate limits per route class (write, read,
	// scan), per client and, on the like routes, per user. HCL: limit
	// "write" { client = 100, user = 10 }. Each replica limits alone: a
	// client spread over R regions gets R times the rate. Reloaded on
	// SIGHUP. Default none.
	Limits []LimitConfig `hcl:"limit,block"`
	// TrustedProxies are the addresses or CIDR prefixes of proxies in
	// front of the replica: a request from one is limited as the client
	// its X-Forwarded-For names. Default none (the header is ignored).
	TrustedProxies []string `hcl:"trusted_proxies,optional"`
	// DrainDelay is how long SIGTERM keeps serving with /readyz failing
	// before the listener closes, so load balancers move away first, as a
	// Go duration. Default "5s".
	DrainDelay string `hcl:"drain_delay,optional"`
	// LogLevel is trace, debug, info, warn or error. Default "info"; debug
	// logs every HTTP request.
	LogLevel string `hcl:"log_level,optional"`
	// LogJSON writes logs as JSON lines instead of text. Default false.
	LogJSON bool `hcl:"log_json,optional"`
	// MaxBodyBytes caps an HTTP request body, in bytes. Default 1048576.
	MaxBodyBytes int64 `hcl:"max_body_bytes,optional"`
	// RequestTimeout bounds how long a write waits for its durable commit
	// before answering 503, as a Go duration. Default "10s".
	RequestTimeout string `hcl:"request_timeout,optional"`
	// IdempotencyTTL is how long an applied idempotency key is remembered,
	// as a Go duration: a retry with the key within it counts once, a
	// retry after it counts again. Older keys are deleted. "0" keeps them
	// forever (the store then grows with every keyed increment). Default
	// "24h".
	IdempotencyTTL string `hcl:"idempotency_ttl,optional"`
	// LikeLists keeps the index behind GET /v1/likers/{item} and
	// GET /v1/users/{user}/likes: two more keys written per like or unlike
	// that changes a user's state. false drops the index; turning it back
	// on rebuilds it from the records at start. Default true.
	LikeLists bool `hcl:"like_lists,optional"`
	// EventLog keeps the event log: every accepted event, in the batch of
	// its write, shipped to the region's JetStream stream when NATS is
	// set, and audited by GET /v1/audit. Default true.
	EventLog bool `hcl:"event_log,optional"`
	// EventRetention is how long the region's event stream keeps events,
	// as a Go duration. Default "168h".
	EventRetention string `hcl:"event_retention,optional"`
	// EventLogKeep is how long a published event stays in the local log
	// (which the audit reads), as a Go duration; "0" keeps every event.
	// Default "168h".
	EventLogKeep string `hcl:"event_log_keep,optional"`
	// Windows are the slot levels of every like count and counter:
	// comma-separated width:keep pairs, keep being how long a slot is
	// kept after it ends (units s, m, h, d, y; "forever" never deletes).
	// "" keeps no slots. Every region must say the same. Default
	// "1s:3h,1m:15d,1h:3y".
	Windows string `hcl:"windows,optional"`
	// WindowRules give keys under a prefix their own levels. HCL: window
	// "views:" { kind = "counters", levels = "1s:6h,1m:30d" }; the longest
	// matching prefix wins; levels = "" turns windows off for them.
	WindowRules []WindowRuleConfig `hcl:"window,block"`
	// EventTimePast and EventTimeFuture bound a client-given event time
	// ("at" or "timestamp") around the replica's clock. A window is final
	// only once EventTimePast has passed after its end. Defaults "5m", "1m".
	EventTimePast   string `hcl:"event_time_past,optional"`
	EventTimeFuture string `hcl:"event_time_future,optional"`
	// TrendingCapacity is k, the counters of each trending sketch: a key
	// with more than 1/k of a window's additions is never missed. Default 128.
	TrendingCapacity int `hcl:"trending_capacity,optional"`
	// UniquesWindows are the slot levels of every unique count,
	// width:keep pairs as for Windows; "" keeps none. Every region must
	// say the same. Default "1h:8d,1d:400d".
	UniquesWindows string `hcl:"uniques_windows,optional"`
	// Approx makes the counters under a prefix approximate: an increment
	// is counted in steps that grow with the counter, so a hot counter
	// writes, fsyncs and replicates a fraction of its increments, within a
	// relative standard error. HCL: approx "views:" { error = 0.01 }; the
	// longest matching prefix wins, "" is every counter. Likes are never
	// approximate. Every region should say the same. Default none.
	Approx []ApproxConfig `hcl:"approx,block"`
	// ShutdownTimeout bounds how long shutdown waits for in-flight
	// requests before closing their connections, as a Go duration. It
	// should exceed RequestTimeout. Default "15s".
	ShutdownTimeout string `hcl:"shutdown_timeout,optional"`

	// NATS is the URL (comma-separated for several) of this region's NATS
	// cluster. Empty runs a standalone replica with no replication.
	NATS string `hcl:"nats,optional"`
	// NATSCreds is a NATS credentials file (JWT + nkey) for this region's
	// account; with NATSUser/NATSPassword it is how a region authenticates.
	NATSCreds string `hcl:"nats_creds,optional"`
	// NATSUser and NATSPassword authenticate with user/password. Env:
	// TALLY_NATS_PASSWORD.
	NATSUser     string `hcl:"nats_user,optional"`
	NATSPassword string `hcl:"nats_password,optional"`
	// NATSCA is a PEM file of the CA that signed the NATS servers'
	// certificates: with it the connection uses TLS and verifies them.
	NATSCA string `hcl:"nats_ca,optional"`
	// NATSCert and NATSKey are a client certificate and key for servers
	// that require one (tls { verify: true } on the client port).
	NATSCert string `hcl:"nats_cert,optional"`
	NATSKey  string `hcl:"nats_key,optional"`
	// Peers are the ids of the other replicas (all regions): the only
	// replicas this one listens to (a message from another id is refused).
	// A replica with an empty data directory waits until it has synced
	// from every one of them before it acknowledges writes.
	Peers []string `hcl:"peers,optional"`
	// Shards, if set, shards the deployment's keys (package shard): each
	// region's keys are spread over its replicas, Copies holders per
	// shard, and a replica keeps, merges and serves only the shards it
	// holds, forwarding a request for another shard to a holder over NATS.
	// Every replica of the deployment must list the same regions and
	// replicas. Default: none (every replica holds every key).
	Shards *ShardsConfig `hcl:"shards,block"`
	// Hot names items split over several parts, each on its own shard
	// (shard.Hot): HCL hot "viral:" { splits = 3 } splits every item whose
	// id starts with "viral:" into 3 parts, the longest matching prefix
	// winning. A user's like and unlike of a split item go to one part;
	// reads sum the parts. Without Shards the parts live on this replica
	// alike, so adding shards later moves nothing. Every replica of every
	// region must say the same, and an item must be split before its
	// first like (likes stored before are not read). Default none.
	Hot []HotConfig `hcl:"hot,block"`
	// Retired are replicas gone for good: their state no longer changes,
	// so no message may add to it; only a replica recovering from an
	// empty data directory takes it, from its peers' anti-entropy pages.
	Retired []string `hcl:"retired,optional"`
	// FlushInterval is how often changed entries are published. Default "10ms".
	FlushInterval string `hcl:"flush_interval,optional"`
	// AntiEntropyInterval is how often digests are compared with each
	// peer. Default "1s".
	AntiEntropyInterval string `hcl:"anti_entropy_interval,optional"`
	// PeerTimeout: a peer unheard-from this long makes reads approx.
	// Default "5s".
	PeerTimeout string `hcl:"peer_timeout,optional"`
	// RecoveryTimeout bounds how long a replica that has data waits for its
	// peers at start before accepting writes. Default "10s".
	RecoveryTimeout string `hcl:"recovery_timeout,optional"`
	// HeartbeatInterval is how often an idle replica still tells its
	// peers it is alive (replication.Config HeartbeatInterval); a starting
	// replica listens two of them for live peers before it accepts
	// writes. Not read from HCL: for embedders such as tests, which start
	// many deployments and should not wait on production's pace. Keep it
	// well below PeerTimeout. 0: replication's default, 1s.
	HeartbeatInterval time.Duration

	// Milestones, if not empty, numbers every counted like from the global
	// "likes" sequence (leases on JetStream KV, package alloc) and fires
	// these numbers as milestones, exactly once across regions: a
	// comma-separated list of numbers, "10^k" (every power of ten) and
	// "every:N". Needs nats, with JetStream. Default "" (no numbering).
	Milestones string `hcl:"milestones,optional"`
	// Sequences are more numbered sequences, each with its own milestones:
	// the likes of one item or of items under a prefix ("the millionth
	// like of this video"), or the units of increments of counters under
	// a prefix ("the 100-billionth search query"). HCL: sequence "name"
	// { counts = "increments", match = "search:*", milestones = "..." }.
	Sequences []SequenceConfig `hcl:"sequence,block"`
	// AllocBucket is the allocator's KV bucket. Default "tally_alloc".
	AllocBucket string `hcl:"alloc_bucket,optional"`
	// AllocCluster places the bucket and the milestone stream in this NATS
	// cluster (region); empty lets JetStream choose. Every region must say
	// the same. Default "".
	AllocCluster string `hcl:"alloc_cluster,optional"`
	// AllocReplicas is the bucket's and stream's replica count (1, 3 or 5).
	// Default 1; use 3 in production.
	AllocReplicas int `hcl:"alloc_replicas,optional"`
	// LeaseTTL is how long a replica may number from a lease it could not
	// renew (cut off from the KV), as a Go duration. Default "4s".
	LeaseTTL string `hcl:"lease_ttl,optional"`
	// LeaseReclaimAfter, if not "0", is how long another replica's lease
	// beat must stay still (that replica silent, in this one's clock)
	// before this replica frees the lease's unused tail, as a Go duration.
	// It must exceed LeaseTTL. Reclaiming costs exactness: numbers the
	// silent replica used after its last report may be used again if it
	// comes back; only a replica that never returns needs it. Default "0"
	// (off: a replica gives its own tail back when it returns).
	LeaseReclaimAfter string `hcl:"lease_reclaim_after,optional"`
	// AllocAuthority: the allocator's bucket is written only by the lease
	// authority (`tallyd lease-authority`), to which this replica sends
	// its writes; its NATS user may not write the bucket, nor publish
	// milestones, itself (docs/architecture.md, "NATS permissions: what a
	// region may do"). The shipped configs set it. Needs
	// lease_reclaim_after = "0": the authority lets no replica close
	// another's lease. Default false (the replica writes the bucket).
	AllocAuthority bool `hcl:"alloc_authority,optional"`
}

// LimitConfig is the rate limits of one route class: requests per second
// (events, for POST /v1/events) and token-bucket sizes. 0 is no limit; a burst
// of 0 is one second's worth.
type LimitConfig struct {
	// Class is "write" (every write route), "read" (GETs of one key and
	// the status) or "scan" (lists, windows, series, trending, feed,
	// history, union, audit).
	Class       string  `hcl:"class,label"`
	Client      float64 `hcl:"client,optional"`
	ClientBurst int     `hcl:"client_burst,optional"`
	// User limits each user on the like routes (class write only).
	User      float64 `hcl:"user,optional"`
	UserBurst int     `hcl:"user_burst,optional"`
}

// ParseLimit parses the flag form of a limit, "CLASS=KEY:N,...", with
// keys client, client_burst, user and user_burst, e.g.
// "write=client:100,user:10".
func ParseLimit(s string) (LimitConfig, error) {
	class, rest, ok := strings.Cut(s, "=")
	lc := LimitConfig{Class: class}
	if !ok || rest == "" {
		return lc, fmt.Errorf("limit %q: want CLASS=KEY:N,..., e.g. write=client:100,user:10", s)
	}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, ":")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return lc, fmt.Errorf("limit %q: %q: want KEY:N", s, kv)
		}
		switch k {
		case "client":
			lc.Client = f
		case "user":
			lc.User = f
		case "client_burst", "user_burst":
			if f != float64(int(f)) {
				return lc, fmt.Errorf("limit %q: %s: want a whole number", s, k)
			}
			if k == "client_burst" {
				lc.ClientBurst = int(f)
			} else {
				lc.UserBurst = int(f)
			}
		default:
			return lc, fmt.Errorf("limit %q: unknown key %q: want client, client_burst, user or user_burst", s, k)
		}
	}
	return lc, lc.api().Validate()
}

// String is the limit in ParseLimit's form.
func (lc LimitConfig) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v float64
	}{{"client", lc.Client}, {"client_burst", float64(lc.ClientBurst)}, {"user", lc.User}, {"user_burst", float64(lc.UserBurst)}} {
		if p.v != 0 {
			parts = append(parts, p.k+":"+strconv.FormatFloat(p.v, 'g', -1, 64))
		}
	}
	return lc.Class + "=" + strings.Join(parts, ",")
}

func (lc LimitConfig) api() httpapi.Limit {
	return httpapi.Limit{Class: lc.Class, Client: lc.Client, ClientBurst: lc.ClientBurst, User: lc.User, UserBurst: lc.UserBurst}
}

// trustedProxies parses TrustedProxies: an address is a prefix of its
// full length.
func (c Config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted_proxies %q: want an IP address or a CIDR prefix such as 10.0.0.0/8", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// apiLimits are the limits as the HTTP API takes them.
func (c Config) apiLimits() []httpapi.Limit {
	var out []httpapi.Limit
	for _, lc := range c.Limits {
		out = append(out, lc.api())
	}
	return out
}

// WindowRuleConfig gives the keys under a prefix their own slot levels.
type WindowRuleConfig struct {
	// Prefix is the key prefix the rule matches ("" would be every key:
	// that is Config.Windows).
	Prefix string `hcl:"prefix,label"`
	// Kind is "likes", "counters" or "" (both). Default "".
	Kind string `hcl:"kind,optional"`
	// Levels as Config.Windows.
	Levels string `hcl:"levels"`
}

// What a sequence counts (SequenceConfig.Counts).
const (
	CountsLikes      = "likes"
	CountsIncrements = "increments"
)

// SequenceConfig is one numbered sequence besides the global likes one.
type SequenceConfig struct {
	// Name names the sequence in milestones, KV keys and routes:
	// [A-Za-z0-9_-], at most 64, not "likes".
	Name string `hcl:"name,label"`
	// Counts is "likes" (a user's first like of a matching item takes a
	// number) or "increments" (an increment by k of a matching counter
	// takes k numbers; decrements take none).
	Counts string `hcl:"counts"`
	// Match is an item or counter key, or a prefix ending in "*" ("*"
	// alone: all of them).
	Match string `hcl:"match"`
	// Milestones is the sequence's rule, as Config.Milestones.
	Milestones string `hcl:"milestones"`
}

// ParseSequence parses the flag form of a sequence,
// "NAME=COUNTS/MATCH/MILESTONES", e.g. "search=increments/search:*/every:1000".
func ParseSequence(s string) (SequenceConfig, error) {
	name, rest, ok := strings.Cut(s, "=")
	parts := strings.SplitN(rest, "/", 3)
	if !ok || len(parts) != 3 {
		return SequenceConfig{}, fmt.Errorf("sequence %q: want NAME=COUNTS/MATCH/MILESTONES, e.g. search=increments/search:*/every:1000", s)
	}
	sc := SequenceConfig{Name: name, Counts: parts[0], Match: parts[1], Milestones: parts[2]}
	return sc, sc.validate()
}

// String is the sequence in ParseSequence's form.
func (sc SequenceConfig) String() string {
	return sc.Name + "=" + sc.Counts + "/" + sc.Match + "/" + sc.Milestones
}

var sequenceName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (sc SequenceConfig) validate() error {
	var errs []error
	if !sequenceName.MatchString(sc.Name) || sc.Name == LikesSequence {
		errs = append(errs, fmt.Errorf("sequence %q: want a name of [A-Za-z0-9_-], at most 64, other than %q", sc.Name, LikesSequence))
	}
	if sc.Counts != CountsLikes && sc.Counts != CountsIncrements {
		errs = append(errs, fmt.Errorf("sequence %s: counts %q: want %s or %s", sc.Name, sc.Counts, CountsLikes, CountsIncrements))
	}
	if m := strings.TrimSuffix(sc.Match, "*"); m != "" && !crdt.ValidID(m) || sc.Match == "" {
		errs = append(errs, fmt.Errorf("sequence %s: match %q: want an item or key, or a prefix ending in *", sc.Name, sc.Match))
	}
	if r, err := milestone.ParseRule(sc.Milestones); err != nil {
		errs = append(errs, fmt.Errorf("sequence %s: %w", sc.Name, err))
	} else if r.Empty() {
		errs = append(errs, fmt.Errorf("sequence %s: milestones are empty", sc.Name))
	}
	return errors.Join(errs...)
}

// matcher is the region's Match for sc: nil for "*".
func (sc SequenceConfig) matcher() func(string) bool {
	if sc.Match == "*" {
		return nil
	}
	if p, ok := strings.CutSuffix(sc.Match, "*"); ok {
		return func(k string) bool { return strings.HasPrefix(k, p) }
	}
	m := sc.Match
	return func(k string) bool { return k == m }
}

// maxSequences bounds the configured sequences: each checks every like
// or increment it could match, and runs a lease holder and a claimer.
const maxSequences = 32

// HotConfig splits the items under a prefix into parts (Config.Hot).
type HotConfig struct {
	// Prefix is the item id prefix the split matches, never "".
	Prefix string `hcl:"prefix,label"`
	// Splits is how many parts, 2..64.
	Splits int `hcl:"splits"`
}

// ParseHot parses the flag form of a hot block, "PREFIX=SPLITS", e.g.
// "viral:=3".
func ParseHot(s string) (HotConfig, error) {
	i := strings.LastIndex(s, "=")
	if i < 0 {
		return HotConfig{}, fmt.Errorf("hot %q: want PREFIX=SPLITS, e.g. viral:=3", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil {
		return HotConfig{}, fmt.Errorf("hot %q: splits %q is not a whole number such as 3", s, s[i+1:])
	}
	hc := HotConfig{Prefix: s[:i], Splits: n}
	return hc, shard.Hot{{Prefix: hc.Prefix, Parts: hc.Splits}}.Validate()
}

// String is the block in ParseHot's form.
func (hc HotConfig) String() string { return hc.Prefix + "=" + strconv.Itoa(hc.Splits) }

// maxHotRules bounds the hot blocks: routing checks each like's item
// against them.
const maxHotRules = 64

// HotItems is the split items as package shard takes them.
func (c Config) HotItems() shard.Hot {
	var h shard.Hot
	for _, hc := range c.Hot {
		h = append(h, shard.Split{Prefix: hc.Prefix, Parts: hc.Splits})
	}
	return h
}

// CrossShardCashbacks reports whether cashbacks run across shards
// (CrossShardCashback, default true).
func (c *ShardsConfig) CrossShardCashbacks() bool {
	return c.CrossShardCashback == nil || *c.CrossShardCashback
}

// ShardsConfig is the deployment's shard layout: every region's replicas,
// and how many of a region's replicas hold each shard.
type ShardsConfig struct {
	// Copies is how many replicas of a region hold each shard (at most the
	// region's replicas). Default 2.
	Copies int `hcl:"copies,optional"`
	// CrossShardCashback runs a cashback whose three balances no one
	// replica holds across shards (package purchase); false refuses it
	// with shard_not_held instead. Default true. A replica finishes the
	// purchases its journal holds whatever the setting.
	CrossShardCashback *bool `hcl:"cross_shard_cashback,optional"`
	// Regions list every region's replicas. HCL: region "us" { replicas =
	// ["us-1", "us-2", "us-3"] }.
	Regions []ShardRegion `hcl:"region,block"`
}

// ShardRegion is one region's replicas.
type ShardRegion struct {
	Name     string   `hcl:"name,label"`
	Replicas []string `hcl:"replicas"`
}

// Map is region's shard map as the config computes it (shard.Assign of
// its replicas, Copies each): what `tallyd admin shards assign` stores,
// and what a replica uses while the shard map bucket holds none.
func (sc ShardsConfig) Map(region string) (shard.Map, error) {
	for _, r := range sc.Regions {
		if r.Name == region {
			return shard.Assign(r.Name, r.Replicas, sc.copies())
		}
	}
	return shard.Map{}, fmt.Errorf("shards: no region %q", region)
}

// copies is Copies with its default.
func (sc ShardsConfig) copies() int {
	if sc.Copies == 0 {
		return 2
	}
	return sc.Copies
}

// shardMaps are the regions' shard maps the config describes, and this
// replica's region's; nil, and a map of this replica holding everything,
// without Shards.
func (c Config) shardMaps() (shard.Maps, shard.Map, error) {
	if c.Shards == nil {
		return nil, shard.Single(c.Region, c.Replica), nil
	}
	var maps shard.Maps
	var own shard.Map
	found := false
	for _, r := range c.Shards.Regions {
		m, err := shard.Assign(r.Name, r.Replicas, c.Shards.copies())
		if err != nil {
			return nil, shard.Map{}, err
		}
		maps = append(maps, m)
		if r.Name == c.Region {
			own, found = m, true
		}
	}
	if !found || !slices.Contains(own.Replicas(), c.Replica) {
		return nil, shard.Map{}, fmt.Errorf("shards: region %q does not list this replica %q", c.Region, c.Replica)
	}
	return maps, own, nil
}

// durability parses the validated Durability field.
func (c Config) durability() storage.Durability {
	d, _ := storage.ParseDurability(c.Durability)
	return d
}

// duration parses a validated duration field.
func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}
