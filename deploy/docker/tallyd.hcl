# The container image's configuration: the Dockerfile (through
# scripts/image-rootfs.sh) puts it at /etc/tally/tallyd.hcl, and the
# image runs `tallyd serve --config /etc/tally/tallyd.hcl`. Flags after
# the image name override it (`docker run ... tally serve --config
# /etc/tally/tallyd.hcl --region eu --replica eu-1`), or mount your own
# file over it (deploy/compose and deploy/k8s do). docs/operations.md
# explains every field.
#
# Secrets come from the environment:
#   TALLY_ADMIN_TOKEN  bearer token for admin routes (required: the
#                      listener is beyond loopback)
#   TALLY_WRITE_TOKEN  bearer token for writes (recommended)

region  = "local"
replica = "local-1" # never reuse or change for this data directory

# Under the image's volume. A subdirectory, not the volume's root: a
# fresh filesystem's root may hold lost+found.
data_dir = "/var/lib/tally/data"

# The container's port 8080 (EXPOSE 8080). TLS is expected to end in front
# of the container (a load balancer or an ingress), hence insecure_listen.
listen          = "0.0.0.0:8080"
insecure_listen = true

# On SIGTERM (docker stop), /readyz fails this long before the listener
# closes; give `docker stop` a --time above drain_delay + shutdown_timeout.
drain_delay      = "5s"
shutdown_timeout = "15s"

log_json = true
