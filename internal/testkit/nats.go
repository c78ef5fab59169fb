package testkit

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartNATS runs one real embedded nats-server on a free loopback port,
// with JetStream (its store in a temp dir) if jetStream, and shuts it
// down when the test ends.
func StartNATS(t testing.TB, jetStream bool) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	if jetStream {
		opts.JetStream, opts.StoreDir = true, t.TempDir()
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}
