package deploy_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// testGatewaysSolicitDelay is how long a test deployment's NATS servers
// wait before dialing each other's gateways; nats-server's default is 1s.
// With the default the regions' JetStream meta group usually campaigns
// before the gateways are up and its first election waits out a raft
// election timeout (4 to 9 s: localnet's package comment): starting three
// regions took 1 to 10 s, about 6 on average, for every test. Dialing
// at once, they start in under a second. The delay is nats-server's
// process-wide setting (it has no per-server option), so it is set once,
// here, for this test binary only, before any test starts a server.
const testGatewaysSolicitDelay = 10 * time.Millisecond

func TestMain(m *testing.M) {
	server.SetGatewaysSolicitDelay(testGatewaysSolicitDelay)
	os.Exit(m.Run())
}
