package localnet

// What only the tests use.

import "github.com/nats-io/nats-server/v2/server"

// Server is the embedded server of a region, nil for an unknown region.
func (c *Cluster) Server(region string) *server.Server {
	if r := c.byName[region]; r != nil {
		return r.srv
	}
	return nil
}
