# Replica eu-1 of deploy/compose: mounted at /etc/tally/tallyd.hcl in the
# tallyd-eu-1 container. docs/operations.md explains every field.
# Secrets come from the container's environment (compose.yaml, from .env):
# TALLY_NATS_PASSWORD, TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN.

region  = "eu"
replica = "eu-1"

# Under the image's volume (compose.yaml: volume eu-1-data).
data_dir = "/var/lib/tally/data"

# Published on the host's loopback only (compose.yaml, ports), without
# TLS: this is a demo on one machine. In production serve TLS or put a
# TLS proxy in front (configs/eu-1.hcl).
listen          = "0.0.0.0:8080"
insecure_listen = true

drain_delay      = "5s"
shutdown_timeout = "15s"
log_json         = true

# The region's nats-server, with the shipped configs/nats/eu.conf: TLS
# verified against the demo CA that setup.sh made, and this replica's
# own user.
nats      = "nats://nats-a.eu.tally.internal:4222"
nats_user = "tally-eu-1"
nats_ca   = "/etc/tally/nats-ca.pem"
peers     = ["us-1", "ap-1"]

# Milestones, numbered through the lease authority (compose.yaml:
# lease-authority) in us, the allocator's region. One nats-server per
# region, so one replica of the bucket.
milestones      = "10^k"
alloc_cluster   = "us"
alloc_replicas  = 1
alloc_authority = true
