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
	return StartNATSWith(t, func(o *server.Options) {
		if jetStream {
			o.JetStream, o.StoreDir = true, t.TempDir()
		}
	})
}

// StartNATSWith is StartNATS with the server's options changed by tweak
// (nil: none) before it starts.
func StartNATSWith(t testing.TB, tweak func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	if tweak != nil {
		tweak(o)
	}
	s, err := server.NewServer(o)
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
