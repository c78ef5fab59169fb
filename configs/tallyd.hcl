# Example configuration for `tallyd serve --config configs/tallyd.hcl`.
#
# Every field is optional; the values shown are the defaults unless noted.
# Precedence, lowest to highest: defaults, this file, the environment
# (TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN), flags given on the command line.

# Geography this replica serves. Ids are 1..128 bytes of [A-Za-z0-9_.:@-].
# Default: "local".
region = "us"

# Stable id of this replica, unique across all regions. Never change it for
# an existing data directory (the replica refuses data of another id).
# Required when nats is set (no two hosts may share an id); a standalone
# replica defaults to "<region>-1".
replica = "us-1"

# Pebble data directory, created if missing. Default: "./data/<replica>".
data_dir = "./data/us-1"

# HTTP listen address, host:port. Port 0 picks a free port.
listen = "127.0.0.1:8080"

# The address clients reach this replica at, listed by GET /v1/shards so a
# client can send a key straight to a replica holding its shard. Default:
# http(s)://<the bound address>, none when listening on every interface.
# advertise_url = "https://us-1.tally.example:8080"

# Go's profiler (/debug/pprof/) on its own address, unauthenticated: keep it
# on loopback. Default: "" (off).
# debug_listen = "127.0.0.1:6060"

# The Redis protocol (RESP) front door on its own address: INCRBY, SADD
# likes:<item> <user>, PFADD, ... (docs/api.md#resp). With tls_cert it
# serves TLS with the same certificate; beyond loopback it needs
# write_token, and tls_cert or insecure_listen. Default: "" (off).
# resp_listen = "127.0.0.1:6381"

# RESP connections open at once; the next client gets "ERR max number of
# clients reached" and is closed. Each holds a goroutine and buffers.
# Default: 10000 (Redis's maxclients).
# resp_max_connections = 10000

# RESP connections open at once from one client address (IP), so one host
# cannot take them all; its next is refused, other addresses are served.
# Default: 256.
# resp_max_connections_per_address = 256

# The fewest Go schedulers (GOMAXPROCS) to run with, also on one CPU: with
# one, every WAL fsync stalls request handling. 0 or 1 leave GOMAXPROCS as
# the runtime set it. Default: 2.
# min_procs = 2

# "fsync": acknowledge a write only after its WAL fsync (group-committed).
# "none": acknowledge before the fsync: survives a process crash, NOT a power
# loss. Opt-in only; tallyd warns at startup and /v1/status reports it.
durability = "fsync"

# Hold a WAL fsync until this long after the previous one (at most 100ms), so
# the commits of that time share it: for replicas whose load comes a message
# at a time, such as a sharded region's replicas sharing one disk. A lone
# replica under many clients already shares its fsyncs. Default: 0.
# wal_min_sync_interval = "2ms"

# Bearer tokens. If set, write routes need `Authorization: Bearer <write_token>`
# (the admin token works there too), admin routes need the admin token, and
# every other route under /v1/, whatever its method, needs the read token
# (any of the three opens it; /healthz, /readyz, /metrics stay open). Each
# may list several tokens separated by spaces, all valid: rotate by adding
# the new one, moving clients, removing the old one (SIGHUP reloads them).
# Prefer the environment variables (TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN,
# TALLY_READ_TOKEN) to keeping secrets in this file.
# Default: empty (routes open) -- only acceptable on loopback.
# write_token = "change-me"
# admin_token = "change-me-too"
# read_token  = "change-me-three"

# HTTPS: a PEM certificate (chain) and key, read again when the files change
# and on SIGHUP. tls_client_ca also requires client certificates signed by
# that CA (mutual TLS). Default: plain HTTP.
# tls_cert      = "/etc/tally/api-cert.pem"
# tls_key       = "/etc/tally/api-key.pem"
# tls_client_ca = "/etc/tally/clients-ca.pem"

# Listening beyond loopback needs TLS and a write token, or this opt-in
# (say, behind a proxy that terminates TLS). Default: false.
# insecure_listen = true

# Listening beyond loopback also needs admin_token, or this opt-in, which
# leaves the admin routes (block list, audit, budget handoff, links) open
# to anyone reaching the port; logged as a warning. Default: false.
# insecure_open_admin = true

# Rate limits per route class, per replica: "write" (every write route),
# "read" (GETs of one key, status) and "scan" (lists, windows, series,
# trending, feed, history, union, audit). client = requests (events, for
# batches) per second per client (its bearer token, else its address);
# user = per user on the like routes (write only). Bursts default to one
# second's worth. Over a limit: 429 rate_limited with Retry-After. SIGHUP
# reloads them. Default: no limits.
# limit "write" {
#   client       = 2000
#   client_burst = 4000
#   user         = 5
# }
# limit "scan" {
#   client = 50
# }

# Proxies in front of tallyd (addresses or CIDR prefixes) whose
# X-Forwarded-For names the client the limits key on. Default: none, and
# the header is ignored.
# trusted_proxies = ["10.0.0.0/8"]

# On SIGTERM, /readyz fails for this long (so load balancers move away)
# before the listener closes. Default "5s".
drain_delay = "5s"

# trace, debug, info, warn or error. debug logs every HTTP request.
log_level = "info"

# Log JSON lines instead of human-readable text.
log_json = false

# Largest accepted HTTP request body, in bytes (1 MiB).
max_body_bytes = 1048576

# How long a write waits for its durable commit before answering 503
# "timeout" (the write may still apply). Go duration syntax.
request_timeout = "10s"

# How long shutdown waits for in-flight requests before cutting them off.
# Keep it above request_timeout.
shutdown_timeout = "15s"

# How long an applied idempotency key is remembered: a retried increment
# with the same key within it counts once, after it counts again. Older keys
# are deleted in the background. "0" keeps them forever (the data directory
# then grows with every keyed increment).
idempotency_ttl = "24h"

# Keep the lists of who likes an item and what a user likes
# (GET /v1/likers/{item}, GET /v1/users/{user}/likes): two more keys per
# changed like. false drops them; true again rebuilds them at start.
like_lists = true

# The event log: every accepted like, unlike and increment, and every budget
# grant, spend and transfer, in the batch of its write; with nats set, published to the region's stream
# TALLY_EVENTS_<REGION> (kept event_retention), and read back by
# GET /v1/audit and GET /v1/likes/{item}/{user}/history. A published event
# stays in the local log (which the audit reads) for event_log_keep.
event_log       = true
event_retention = "168h"
event_log_keep  = "168h"

# Time windows: every like count and counter also keeps slots, one
# per level, as width:keep pairs (keep: how long a slot stays after it
# ends; units s, m, h, d, y, or "forever"). They answer
# GET /v1/counters/{key}/window?last=60s, the series and the trending
# lists. Every region must use the same levels. "" keeps no slots.
windows = "1s:3h,1m:15d,1h:3y"

# Keys under a prefix can have their own levels (the longest prefix wins):
# window "views:" {
#   kind   = "counters"       # likes, counters, or leave out for both
#   levels = "1s:6h,1m:30d"
# }

# A client may say when an event happened ("at" or "timestamp"), within
# these bounds of the replica's clock. A window is final only once
# event_time_past has gone by after its end.
event_time_past   = "5m"
event_time_future = "1m"

# Trending sketches keep this many counters (k): a key with more than 1/k
# of a window's additions is never missed; counts are always exact.
trending_capacity = 128

# Unique counts (POST /v1/uniques/{key}) keep a HyperLogLog sketch per key
# and also per slot of these levels, for GET /v1/uniques/{key}?last=24h.
# A slot sketch costs up to 16 KiB per replica (a few bytes per id while
# small). Every region must use the same levels. "" keeps no slots.
uniques_windows = "1h:8d,1d:400d"

# Approximate counters: the counters under a prefix count an increment in
# steps that grow with the counter (an increment of 1 counts as the step
# with probability 1/step), so a hot counter writes, fsyncs and replicates
# a fraction of its increments. error is the relative standard error
# target, 0.001..0.5; the longest matching prefix wins, "" is every
# counter. Reads of such counters say "mode":"approx" with an error bound.
# Likes are never approximate, and a counter a sequence numbers
# (counts = "increments") cannot be. Every region should say the same.
# approx "views:" {
#   error = 0.01
# }

# --- Replication (leave nats empty for a standalone replica) ---

# URL(s) of this region's NATS cluster, comma-separated.
# nats = "nats://127.0.0.1:4222"

# How this region authenticates to NATS: a credentials file, or a user whose
# password comes from the TALLY_NATS_PASSWORD environment variable.
# nats_creds = "/etc/tally/us.creds"
# nats_user  = "tally-us-1"
# nats_ca    = "/etc/tally/nats-ca.pem"  # TLS to NATS; nats_cert/nats_key for a client certificate

# Every other replica's id, in all regions. A replica whose data directory is
# empty waits until it has synced from each of them before it acknowledges a
# write, so it never counts on from a lost state.
# peers = ["eu-1", "ap-1"]

# Sharding: spread each region's keys over its replicas, each shard held by
# `copies` of them (default 2); list every region's replicas, the same in
# every replica's config. Without it every replica holds every key.
# A cashback whose three balances no one replica holds runs across shards
# (docs/architecture.md, "Cashback across shards"); cross_shard_cashback =
# false refuses it (421 shard_not_held) instead. Default true.
# shards {
#   copies = 2
#   cross_shard_cashback = false
#   region "us" { replicas = ["us-1", "us-2", "us-3"] }
#   region "eu" { replicas = ["eu-1", "eu-2", "eu-3"] }
# }

# How often changed entries are published (the fast path). Default "10ms".
flush_interval = "10ms"

# How often digests are compared with each peer (anti-entropy). Default "1s".
anti_entropy_interval = "1s"

# A peer unheard-from this long makes reads approx. Default "5s".
peer_timeout = "5s"

# A replica that has data waits at most this long for its peers at start
# before it accepts writes. Default "10s".
recovery_timeout = "10s"

# Milestones (needs nats with JetStream): number every counted like from
# the global "likes" sequence and fire these numbers once across regions.
# Numbers, "10^k" (every power of ten) and "every:N". Default "" (off).
# milestones = "1000,1000000,10^k"
# The NATS cluster (region) holding the allocator's KV bucket and the
# milestone stream; say the same in every region.
# alloc_cluster = "us"
# alloc_replicas = 3
# How long a replica cut off from that region keeps numbering from its
# lease before it queues likes unnumbered. Default "4s".
# lease_ttl = "4s"
# How long another replica's lease must stay silent (its beat unchanged)
# before this replica frees the lease's unused tail, so a replica that is
# gone for good does not hold numbers (and milestones in them) forever.
# Must exceed lease_ttl. Costs exactness: numbers the silent replica used
# after its last report may be used again if it does come back. Default
# "0": never; a replica gives its own tail back when it returns.
# lease_reclaim_after = "1h"

# More numbered sequences, each with its own milestones (needs nats, as
# above; at most 32). counts = "likes": a user's first like of a matching
# item takes the next number ("the millionth like of this video").
# counts = "increments": an increment by k of a matching counter takes k
# numbers, decrements none ("the 100-billionth search query"). match is
# one item or key, or a prefix ending in "*" ("*": all). The name (not
# "likes") appears in milestones and in GET /v1/sequences/{name}.
# sequence "launch" {
#   counts     = "likes"
#   match      = "video:launch"
#   milestones = "every:1000000"
# }
# sequence "searches" {
#   counts     = "increments"
#   match      = "search:*"
#   milestones = "10^k"
# }
