# Pod tally-0: replica ap-1, region ap. docs/operations.md explains every
# field. Secrets come from files (deploy/k8s/base/tally.yaml): the NATS
# password from TALLY_NATS_PASSWORD_FILE (the Secret tally-nats-users),
# the tokens from TALLY_WRITE_TOKEN_FILE and TALLY_ADMIN_TOKEN_FILE (the
# Secret tally-secrets).
region  = "ap"
replica = "ap-1" # never reuse or change for this volume

# Under the volume claim (a subdirectory: a fresh volume may hold lost+found).
data_dir = "/var/lib/tally/data"

# TLS ends at the ingress or load balancer in front of the Service tally.
listen          = "0.0.0.0:8080"
insecure_listen = true

# On SIGTERM /readyz fails this long, then in-flight requests get
# shutdown_timeout; terminationGracePeriodSeconds covers preStop + both.
drain_delay      = "5s"
shutdown_timeout = "15s"
log_json         = true

# The region's nats-servers (Service nats-client), with configs/nats/ap.conf:
# TLS verified against tally's private CA, this replica's own user.
nats      = "nats://nats-client.tally-ap.svc.cluster.local:4222"
nats_user = "tally-ap-1"
nats_ca   = "/etc/tally/nats-ca/ca.crt"
peers     = ["us-1", "eu-1"]

# Milestones, numbered through the lease authority in us (Deployment
# lease-authority in tally-us), with 3 replicas of the bucket there.
milestones      = "1000,1000000,1000000000"
alloc_cluster   = "us"
alloc_replicas  = 3
alloc_authority = true
