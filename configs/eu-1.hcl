# tallyd serve --config configs/eu-1.hcl
#
# Replica eu-1 of a three-region production deployment (us-1, eu-1, ap-1),
# one tallyd process per replica. us-1.hcl and ap-1.hcl are the same with
# the region swapped. The region's NATS servers are configured by
# configs/nats/eu.conf. docs/operations.md explains every field; fields left
# out keep their defaults (see configs/tallyd.hcl).
#
# Secrets come from the environment, not from this file:
#   TALLY_NATS_PASSWORD  password of NATS user tally-eu-1
#   TALLY_WRITE_TOKEN    bearer token for likes, unlikes and increments
#                        (required: the listener is public)
#   TALLY_ADMIN_TOKEN    bearer token for admin routes (block list, audit,
#                        budget handoff; required: the listener is public)

region  = "eu"
replica = "eu-1" # never reuse or change for this data directory

data_dir = "/var/lib/tally/eu-1"

# Reachable by the load balancer and Prometheus. Beyond loopback, tallyd
# refuses to start without both TLS and a write token (TALLY_WRITE_TOKEN),
# unless insecure_listen = true says a proxy in front does TLS, and
# without an admin token (TALLY_ADMIN_TOKEN), unless insecure_open_admin.
listen = "0.0.0.0:8080"

# HTTPS; the files are read again when they change and on SIGHUP, so a
# renewed certificate needs no restart. Add tls_client_ca to require client
# certificates (mutual TLS) from the load balancer.
tls_cert = "/etc/tally/api-cert.pem"
tls_key  = "/etc/tally/api-key.pem"

# Abuse limits, per replica, per client (its token, else its address) and,
# on the like routes, per user; over them a 429 with Retry-After.
limit "write" {
  client = 2000
  user   = 5
}
limit "scan" {
  client = 50
}

# On SIGTERM, /readyz fails this long before the listener closes.
drain_delay = "5s"

durability = "fsync"

log_level = "info"
log_json  = true

# This region's NATS cluster; the client reconnects to any of them.
nats      = "nats://nats-a.eu.tally.internal:4222,nats://nats-b.eu.tally.internal:4222,nats://nats-c.eu.tally.internal:4222"
nats_user = "tally-eu-1" # its own user: it may publish only as eu-1 (configs/nats/eu.conf)
nats_ca   = "/etc/tally/nats-ca.pem" # TLS to NATS, verified against tally's private CA

# Every other replica, in all regions. A replica whose data directory is
# empty acknowledges nothing until it has synced from every one of them, so
# keep this list complete and current.
peers = ["us-1", "ap-1"]

# Replication timings (these are the defaults).
flush_interval        = "10ms"
anti_entropy_interval = "1s"
peer_timeout          = "5s"
recovery_timeout      = "10s"

# Milestones: every counted like takes a number of the global "likes"
# sequence; these numbers fire once across all regions. The allocator's KV
# bucket and the milestone stream live in one region, the same in every
# replica's config, with 3 replicas there.
milestones     = "1000,1000000,1000000000"
alloc_cluster  = "us"
alloc_replicas = 3
lease_ttl      = "4s"
# The bucket is written only by the lease authority (tallyd lease-authority,
# run in the alloc_cluster region), which checks every replica's write; this
# replica's NATS user may not write it (configs/nats/*.conf).
alloc_authority = true

# A per-item sequence and a numbered counter, with their own milestones.
# Every region must configure the same sequences: each numbers only the
# likes and increments it accepts itself.
sequence "launch" {
  counts     = "likes"
  match      = "video:launch"
  milestones = "1000000"
}
sequence "searches" {
  counts     = "increments"
  match      = "search:*"
  milestones = "10^k"
}
