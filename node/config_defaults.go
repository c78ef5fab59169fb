// The Config's defaults: DefaultConfig and the fields Derive fills from
// others.

package node

import (
	"path/filepath"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/resp"
)

// DefaultConfig returns the defaults. Replica and DataDir are left empty:
// they derive from Region and Replica once those are final (see Derive).
func DefaultConfig() Config {
	return Config{
		Region:                       "local",
		Listen:                       "127.0.0.1:8080",
		MinProcs:                     2,
		Durability:                   "fsync",
		LogLevel:                     "info",
		MaxBodyBytes:                 1 << 20,
		RESPMaxConnections:           resp.DefaultMaxConnections,
		RESPMaxConnectionsPerAddress: resp.DefaultMaxConnectionsPerAddress,
		RequestTimeout:               "10s",
		ShutdownTimeout:              "15s",
		DrainDelay:                   "5s",
		IdempotencyTTL:               "24h",
		LikeLists:                    true,
		EventLog:                     true,
		EventRetention:               "168h",
		EventLogKeep:                 "168h",
		Windows:                      "1s:3h,1m:15d,1h:3y",
		EventTimePast:                "5m",
		EventTimeFuture:              "1m",
		TrendingCapacity:             128,
		UniquesWindows:               "1h:8d,1d:400d",

		FlushInterval:       "10ms",
		AntiEntropyInterval: "1s",
		PeerTimeout:         "5s",
		RecoveryTimeout:     "10s",

		AllocBucket:   alloc.DefaultBucket,
		AllocReplicas: 1,
		LeaseTTL:      alloc.DefaultTTL.String(),

		LeaseReclaimAfter: "0",
	}
}

// Derive fills the fields whose defaults depend on others (Replica from
// Region, DataDir from Replica) if they are empty. Call it once the
// fields it reads are final.
func (c *Config) Derive() {
	// Only a standalone replica gets a default id: replicas sharing one
	// would overwrite each other's entries, and "<region>-1" on two hosts
	// is the easiest way to get there.
	if c.Replica == "" && c.Region != "" && c.NATS == "" {
		c.Replica = c.Region + "-1"
	}
	if c.DataDir == "" && c.Replica != "" {
		c.DataDir = filepath.Join(".", "data", c.Replica)
	}
}
