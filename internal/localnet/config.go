package localnet

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
)

// Default resource limits for each region's JetStream. They are small on
// purpose: a local super-cluster of three regions must fit on a laptop or a
// two-core CI machine.
const (
	DefaultHost               = "127.0.0.1"
	DefaultJetStreamMaxMemory = 64 << 20 // 64 MiB per region
	DefaultJetStreamMaxStore  = 1 << 30  // 1 GiB per region
)

// regionName restricts region names to what is safe as a NATS server name,
// cluster name, gateway name, stream placement tag and directory name.
var regionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$`)

// Config describes a local super-cluster.
type Config struct {
	// Regions names the regions, one embedded nats-server each, e.g. us, eu,
	// ap. Each name is used as the server name, the NATS cluster name and the
	// gateway name of that region, so it is also the JetStream placement
	// cluster for assets that must live in that region.
	Regions []string

	// Dir is the root for JetStream storage; region r stores in Dir/r.
	Dir string

	// Host is the IP address every listener binds to (client ports, real
	// gateway ports and the link proxies) and that the servers advertise,
	// so it cannot be unspecified (0.0.0.0). Empty means DefaultHost.
	Host string

	// ClientPorts optionally fixes the client port of some regions (for
	// `tallyd local`, so a CLI can find them). Missing or 0 picks a free
	// port.
	ClientPorts map[string]int

	// Logger receives the nats-server logs (named per region) and the
	// proxy logs. Nil means hclog.NewNullLogger().
	Logger hclog.Logger

	// Debug and Trace turn on nats-server debug and protocol trace logs.
	Debug, Trace bool

	// PingInterval is the servers' ping interval; zero keeps the NATS
	// default (2m, and at most 15s on gateways). Lower it to have servers
	// notice a link that silently drops bytes (SetDrop) sooner: they close
	// a connection after two unanswered pings.
	PingInterval time.Duration

	// Users, if set, gives the users of region's server (with their
	// permissions): clients must then authenticate as one of them, or be
	// taken as NoAuthUser. Nil (the default) lets any client do anything.
	Users func(region string) []*server.User
	// NoAuthUser is the user a client connecting without credentials is
	// taken as, when Users is set ("": such a client is refused).
	NoAuthUser string

	// JetStreamMaxMemory and JetStreamMaxStore limit each region's
	// JetStream. Zero means the Default values above.
	JetStreamMaxMemory int64
	JetStreamMaxStore  int64
}

// DefaultConfig returns the configuration of `tallyd local`: regions us, eu
// and ap on loopback, small JetStream limits. Dir must still be set.
func DefaultConfig() Config {
	return Config{
		Regions:            []string{"us", "eu", "ap"},
		Host:               DefaultHost,
		JetStreamMaxMemory: DefaultJetStreamMaxMemory,
		JetStreamMaxStore:  DefaultJetStreamMaxStore,
	}
}

// withDefaults fills the zero-valued optional fields.
func (c Config) withDefaults() Config {
	if c.Host == "" {
		c.Host = DefaultHost
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.JetStreamMaxMemory == 0 {
		c.JetStreamMaxMemory = DefaultJetStreamMaxMemory
	}
	if c.JetStreamMaxStore == 0 {
		c.JetStreamMaxStore = DefaultJetStreamMaxStore
	}
	return c
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Regions) == 0 {
		errs = append(errs, errors.New("regions: at least one region is required"))
	}
	seen := make(map[string]bool, len(c.Regions))
	for i, r := range c.Regions {
		switch {
		case !regionName.MatchString(r):
			errs = append(errs, fmt.Errorf("regions[%d] %q: must match %s", i, r, regionName))
		case seen[r]:
			errs = append(errs, fmt.Errorf("regions[%d] %q: duplicate region", i, r))
		}
		seen[r] = true
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: required (root of JetStream storage)"))
	}
	if c.Host != "" {
		if ip := net.ParseIP(c.Host); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("host %q: must be a specific IP address, such as 127.0.0.1", c.Host))
		}
	}
	ports := make(map[int]string, len(c.ClientPorts))
	for _, r := range slices.Sorted(maps.Keys(c.ClientPorts)) {
		p := c.ClientPorts[r]
		if !seen[r] {
			errs = append(errs, fmt.Errorf("client port for %q: unknown region", r))
		}
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("client port for %q: %d out of range 0..65535", r, p))
		}
		if other, dup := ports[p]; dup && p != 0 {
			errs = append(errs, fmt.Errorf("client port %d: used by both %q and %q", p, other, r))
		}
		ports[p] = r
	}
	if c.JetStreamMaxMemory < 0 {
		errs = append(errs, fmt.Errorf("jetstream max memory %d: must not be negative", c.JetStreamMaxMemory))
	}
	if c.JetStreamMaxStore < 0 {
		errs = append(errs, fmt.Errorf("jetstream max store %d: must not be negative", c.JetStreamMaxStore))
	}
	if c.PingInterval < 0 {
		errs = append(errs, fmt.Errorf("ping interval %v: must not be negative", c.PingInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("localnet config: %w", err)
	}
	return nil
}
