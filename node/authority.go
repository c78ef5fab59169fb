package node

import (
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/replication"
)

// AuthorityUser is the lease authority's NATS user in the shipped configs.
const AuthorityUser = "tally-authority"

// AuthorityConfig configures the lease authority (`tallyd
// lease-authority`): where NATS is, as whom, and where the allocator's
// bucket and the milestone stream live (the same as every replica's
// alloc_* settings).
type AuthorityConfig struct {
	NATS, NATSUser, NATSPassword, NATSCreds, NATSCA string
	AllocBucket, AllocCluster                       string
	AllocReplicas                                   int
	// MaxBlock bounds one lease. Default alloc.DefaultMaxBlock, as the
	// replicas' holders.
	MaxBlock uint64
	// NATSOptions are extra nats.Options (tests).
	NATSOptions []nats.Option
	Logger      hclog.Logger
}

// Authority is a running lease authority.
type Authority struct {
	nc   *nats.Conn
	auth *alloc.Authority
}

// StartAuthority connects to NATS and serves the replicas' writes until
// Close, opening (or creating) the allocator's bucket and the milestone
// stream when first needed.
func StartAuthority(cfg AuthorityConfig) (*Authority, error) {
	if cfg.AllocBucket == "" {
		cfg.AllocBucket = alloc.DefaultBucket
	}
	if cfg.AllocReplicas == 0 {
		cfg.AllocReplicas = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	opts := append([]nats.Option{nats.CustomInboxPrefix(replication.InboxPrefix(AuthorityUser))}, cfg.NATSOptions...)
	if cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	}
	if cfg.NATSUser != "" {
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if cfg.NATSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.NATSCA))
	}
	nc, err := replication.Dial(replication.DialConfig{URL: cfg.NATS, Name: "tally lease authority", Options: opts, Logger: cfg.Logger.Named("nats")})
	if err != nil {
		return nil, fmt.Errorf("lease authority: %w", err)
	}
	a, err := startAuthority(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return a, nil
}

func startAuthority(nc *nats.Conn, cfg AuthorityConfig) (*Authority, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("lease authority: jetstream: %w", err)
	}
	// Opened (or created) on first use, and again after a failure: the
	// authority starts while JetStream is still electing its leaders.
	kv := alloc.NewLazyBucket(js, alloc.BucketConfig{Name: cfg.AllocBucket, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster})
	feed, err := milestone.NewFeed(milestone.FeedConfig{JS: js, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("lease authority: %w", err)
	}
	auth, err := alloc.NewAuthority(alloc.AuthorityConfig{
		NC: nc, KV: kv, MaxBlock: cfg.MaxBlock,
		Claim: milestone.DecodeClaim, Publish: feed.PublishClaim,
		Logger: cfg.Logger,
	})
	if err == nil {
		err = auth.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("lease authority: %w", err)
	}
	cfg.Logger.Info("lease authority serving", "bucket", cfg.AllocBucket, "cluster", cfg.AllocCluster)
	return &Authority{nc: nc, auth: auth}, nil
}

// Close stops serving and disconnects.
func (a *Authority) Close() {
	a.auth.Close()
	a.nc.Close()
}
