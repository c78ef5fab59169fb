//go:build !chaos

package replication

import (
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// Hooks for the chaos build (chaos_on.go, `go build -tags chaos`), which can
// mangle published messages and switch on one deliberate bug so that the
// chaos suite proves it catches it. In a normal build they are the plain
// code and compile away.

// publish sends one message.
func (t *NATS) publish(subject string, data []byte) error { return t.nc.Publish(subject, data) }

// chaosGossip is the state of the gossip-increments bug: none here.
type chaosGossip struct{}

// outgoing returns the own entries to publish: the absolute values.
func (*chaosGossip) outgoing(vecs []OwnEntry) []OwnEntry { return vecs }

// incoming returns the sender's entry to max-merge: the one received.
func (*chaosGossip) incoming(_ *region.Replica, _ string, e OwnEntry) crdt.PN { return e.PN }
