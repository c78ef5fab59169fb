package deploy

// What only the tests (package deploy_test) use.

import "github.com/tally-dev/tally/internal/localnet"

// Cluster is the NATS super-cluster (to cut and heal links).
func (d *Deployment) Cluster() *localnet.Cluster { return d.cluster }
