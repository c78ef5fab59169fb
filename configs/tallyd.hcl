# Example configuration for `tallyd serve --config configs/tallyd.hcl`.
#
# Every field is optional; the values shown are the defaults unless noted.
# Precedence, lowest to highest: defaults, this file, the environment
# (TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN), flags given on the command line.

# Geography this replica serves. Ids are 1..128 bytes of [A-Za-z0-9_.:@-].
region = "us"

# Stable id of this replica, unique across all regions. Never change it for
# an existing data directory (the replica refuses data of another id).
# Default: "<region>-1".
replica = "us-1"

# Pebble data directory, created if missing. Default: "./data/<replica>".
data_dir = "./data/us-1"

# HTTP listen address, host:port. Port 0 picks a free port.
listen = "127.0.0.1:8080"

# "fsync": acknowledge a write only after its WAL fsync (group-committed).
# "none": acknowledge before the fsync: survives a process crash, NOT a power
# loss. Opt-in only; tallyd warns at startup and /v1/status reports it.
durability = "fsync"

# Bearer tokens. If set, write routes need `Authorization: Bearer <write_token>`
# (the admin token works there too) and admin routes need the admin token.
# Prefer the environment variables to keeping secrets in this file.
# Default: empty (routes open) -- only acceptable on loopback.
# write_token = "change-me"
# admin_token = "change-me-too"

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
