// Package natsflush waits until a NATS server has processed what a
// connection sent (a subscription, say), across the connection's
// reconnects.
//
// nats.go fails a flush in progress with nats.ErrConnectionClosed when
// the connection drops while the flush waits for its PONG, even when the
// connection is not closed but reconnecting: it closes every pending
// flush's channel on a disconnect, and sends the subscriptions again on
// the reconnect. A replica starting on a busy machine saw that as a
// failed start ("serve forwarded requests: nats: connection closed")
// though its connection came back a moment later.
package natsflush

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// Attempts is how many flushes Flush tries before it gives up on a
// connection that keeps dropping. Each waits up to the connection's flush
// timeout (nats.go's default: 10 s).
const Attempts = 5

// Flush flushes nc, and flushes again, up to Attempts in all, while a
// flush fails only because the connection dropped meanwhile and nc is
// not closed for good. It returns nil once a flush succeeds, and the last
// error otherwise.
func Flush(nc *nats.Conn) error {
	var err error
	for range Attempts {
		if err = nc.Flush(); err == nil {
			return nil
		}
		if !errors.Is(err, nats.ErrConnectionClosed) || nc.IsClosed() {
			return err
		}
	}
	return fmt.Errorf("%d flushes, the connection dropped during each: %w", Attempts, err)
}
