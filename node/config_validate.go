// Config.Validate and the address and token checks it uses.

package node

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/storage"
)

// Validate reports every problem with c at once, one per line of the
// joined error. Each section's validator adds its problems in turn, so
// the lines keep the order of the sections below.
func (c Config) Validate() error {
	var p problems
	c.validateHost(&p)
	c.validateListeners(&p)
	c.validateAccess(&p)
	c.validateRuntime(&p)
	c.validateDurations(&p)
	c.validateTokens(&p)
	c.validateCluster(&p)
	c.validateNumbering(&p)
	c.validateCounters(&p)
	c.validateAlloc(&p)
	return errors.Join(p...)
}

// problems collects, in order, what Validate finds wrong.
type problems []error

// bad adds a problem described by format and args.
func (p *problems) bad(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// add adds a problem a check returned (non-nil) as it is.
func (p *problems) add(err error) { *p = append(*p, err) }

// idRule is what a region or replica id must be (crdt.ValidID).
const idRule = "1..128 bytes of [A-Za-z0-9_.:@-]"

// validateHost checks who the replica is and where it runs: region,
// replica id, data directory, HTTP listen address and processors.
func (c Config) validateHost(p *problems) {
	if !crdt.ValidID(c.Region) {
		p.bad("region %q: want %s", c.Region, idRule)
	}
	if c.Replica == "" && c.NATS != "" {
		p.bad("replica is required when nats is set: every replica needs its own id (e.g. %q), and a default one "+
			"that two hosts share would overwrite each other's counts", c.Region+"-1")
	} else if !crdt.ValidID(c.Replica) {
		p.bad("replica %q: want %s", c.Replica, idRule)
	}
	if c.DataDir == "" && (c.Replica != "" || c.NATS == "") {
		p.bad("data_dir is empty")
	}
	if err := checkListen(c.Listen); err != nil {
		p.bad("listen %q: %v", c.Listen, err)
	}
	if c.MinProcs < 0 || c.MinProcs > 1024 {
		p.bad("min_procs %d: want 0 to 1024", c.MinProcs)
	}
	if c.WALMinSyncInterval != "" {
		if v, err := time.ParseDuration(c.WALMinSyncInterval); err != nil || v < 0 || v > 100*time.Millisecond {
			p.bad("wal_min_sync_interval %q: want a duration from 0 to 100ms, such as 1ms", c.WALMinSyncInterval)
		}
	}
}

// validateListeners checks the other listeners (debug, RESP), the
// advertised URL and the TLS files' pairing.
func (c Config) validateListeners(p *problems) {
	if c.DebugListen != "" {
		if err := checkListen(c.DebugListen); err != nil {
			p.bad("debug_listen %q: %v", c.DebugListen, err)
		}
	}
	if c.RESPListen != "" {
		if err := checkListen(c.RESPListen); err != nil {
			p.bad("resp_listen %q: %v", c.RESPListen, err)
		} else if !loopback(c.RESPListen) {
			if c.WriteToken == "" {
				p.bad("resp_listen %q is beyond loopback without a write token: anyone reaching the port could write; "+
					"set write_token (TALLY_WRITE_TOKEN), which RESP clients send with AUTH", c.RESPListen)
			}
			if !c.InsecureListen && c.TLSCert == "" {
				p.bad("resp_listen %q is beyond loopback without TLS: AUTH tokens and data would travel in clear; "+
					"set tls_cert and tls_key (RESP then serves TLS as the HTTP listener does), keep it on loopback, "+
					"or set insecure_listen = true (--insecure-listen) behind a TLS proxy", c.RESPListen)
			}
		}
	}
	if c.AdvertiseURL != "" {
		if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" && u.Path != "/" {
			p.bad("advertise_url %q: want http(s)://host:port", c.AdvertiseURL)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		p.bad("tls_cert and tls_key go together")
	}
	if c.TLSClientCA != "" && c.TLSCert == "" {
		p.bad("tls_client_ca needs tls_cert and tls_key: client certificates are asked for over TLS")
	}
}

// validateAccess checks what guards the HTTP listener beyond loopback
// (TLS, write and admin tokens), the trusted proxies and the rate limits.
func (c Config) validateAccess(p *problems) {
	if !loopback(c.Listen) && !c.InsecureListen {
		if c.TLSCert == "" {
			p.bad("listen %q is beyond loopback without TLS: bearer tokens and data would travel in clear; "+
				"set tls_cert and tls_key, or insecure_listen = true (--insecure-listen) behind a TLS proxy", c.Listen)
		}
		if c.WriteToken == "" {
			p.bad("listen %q is beyond loopback without a write token: anyone reaching the port could write; "+
				"set write_token (TALLY_WRITE_TOKEN), or insecure_listen = true (--insecure-listen)", c.Listen)
		}
	}
	if !loopback(c.Listen) && c.AdminToken == "" && !c.InsecureOpenAdmin {
		p.bad("listen %q is beyond loopback without an admin token: anyone reaching the port could block users, "+
			"read the audit and move budgets; set admin_token (TALLY_ADMIN_TOKEN), or insecure_open_admin = true "+
			"(--insecure-open-admin) if something in front guards the admin routes", c.Listen)
	}
	if _, err := c.trustedProxies(); err != nil {
		p.bad("%v", err)
	}
	seenLimit := map[string]bool{}
	for _, lc := range c.Limits {
		if err := lc.api().Validate(); err != nil {
			p.bad("%v", err)
		}
		if seenLimit[lc.Class] {
			p.bad("limit %q is configured twice", lc.Class)
		}
		seenLimit[lc.Class] = true
	}
}

// validateRuntime checks the storage durability, the log level and the
// connection and body size limits.
func (c Config) validateRuntime(p *problems) {
	if _, err := storage.ParseDurability(c.Durability); err != nil || c.Durability == "" {
		p.bad("durability %q: want fsync or none", c.Durability)
	}
	if hclog.LevelFromString(c.LogLevel) == hclog.NoLevel {
		p.bad("log_level %q: want trace, debug, info, warn or error", c.LogLevel)
	}
	if c.RESPMaxConnections < 0 {
		p.bad("resp_max_connections %d: want > 0 (0: the default, %d)", c.RESPMaxConnections, resp.DefaultMaxConnections)
	}
	if c.RESPMaxConnectionsPerAddress < 0 {
		p.bad("resp_max_connections_per_address %d: want > 0 (0: the default, %d)", c.RESPMaxConnectionsPerAddress, resp.DefaultMaxConnectionsPerAddress)
	}
	if c.MaxBodyBytes <= 0 {
		p.bad("max_body_bytes %d: want > 0", c.MaxBodyBytes)
	}
}

// validateDurations checks every duration setting: timeouts and
// intervals, the heartbeat, lease reclaiming, draining, event retention,
// the windows and the idempotency keys' life.
func (c Config) validateDurations(p *problems) {
	for _, d := range []struct{ name, v string }{
		{"request_timeout", c.RequestTimeout}, {"shutdown_timeout", c.ShutdownTimeout},
		{"flush_interval", c.FlushInterval}, {"anti_entropy_interval", c.AntiEntropyInterval},
		{"peer_timeout", c.PeerTimeout}, {"recovery_timeout", c.RecoveryTimeout},
		{"lease_ttl", c.LeaseTTL},
	} {
		if v, err := time.ParseDuration(d.v); err != nil || v <= 0 {
			p.bad("%s %q: want a positive duration such as 10s", d.name, d.v)
		}
	}
	if pt, err := time.ParseDuration(c.PeerTimeout); c.HeartbeatInterval < 0 || err == nil && c.HeartbeatInterval >= pt {
		p.bad("heartbeat interval %s: want 0 (the default, 1s) or a positive duration below peer_timeout %q", c.HeartbeatInterval, c.PeerTimeout)
	}
	if v, err := time.ParseDuration(c.LeaseReclaimAfter); err != nil || v < 0 {
		p.bad("lease_reclaim_after %q: want a duration such as 1h, or 0 for never", c.LeaseReclaimAfter)
	} else if ttl, err := time.ParseDuration(c.LeaseTTL); err == nil && v != 0 && v <= ttl {
		p.bad("lease_reclaim_after %q: must exceed lease_ttl %q", c.LeaseReclaimAfter, c.LeaseTTL)
	}
	if c.AllocAuthority && duration(c.LeaseReclaimAfter) != 0 {
		p.bad("lease_reclaim_after %q: the lease authority (alloc_authority) lets no replica close another's lease; retire it with tallyd admin retire", c.LeaseReclaimAfter)
	}
	if v, err := time.ParseDuration(c.DrainDelay); err != nil || v < 0 {
		p.bad("drain_delay %q: want a duration such as 5s, or 0 to stop at once", c.DrainDelay)
	}
	if v, err := time.ParseDuration(c.EventRetention); err != nil || v <= 0 {
		p.bad("event_retention %q: want a duration such as 168h", c.EventRetention)
	}
	if v, err := time.ParseDuration(c.EventLogKeep); err != nil || v < 0 {
		p.bad("event_log_keep %q: want a duration such as 168h, or 0 to keep every event", c.EventLogKeep)
	}
	if _, err := c.WindowConfig(); err != nil {
		p.bad("%v", err)
	}
	if v, err := time.ParseDuration(c.IdempotencyTTL); err != nil || v < 0 {
		p.bad("idempotency_ttl %q: want a duration such as 24h, or 0 to keep keys forever", c.IdempotencyTTL)
	}
}

// validateTokens checks that each token setting can be sent as bearer
// tokens; an error names the setting, never the value.
func (c Config) validateTokens(p *problems) {
	for _, t := range []struct{ name, v string }{
		{"write_token", c.WriteToken}, {"admin_token", c.AdminToken}, {"read_token", c.ReadToken},
	} {
		for _, tok := range strings.Split(t.v, " ") {
			if !ValidToken(tok) {
				p.bad("%s: want tokens of printable ASCII separated by single spaces (each is sent as a bearer token)", t.name)
				break
			}
		}
	}
}

// validateCluster checks the other replicas: peers (and retired ones),
// the shard maps, and the NATS settings they need.
func (c Config) validateCluster(p *problems) {
	for _, id := range append(append([]string(nil), c.Peers...), c.Retired...) {
		if !crdt.ValidID(id) {
			p.bad("peer %q: want %s", id, idRule)
		}
		if id == c.Replica {
			p.bad("peers lists this replica's own id %q", id)
		}
	}
	if c.Shards != nil {
		if _, _, err := c.shardMaps(); err != nil {
			p.bad("%v", err)
		}
		if c.Shards.Copies < 0 {
			p.bad("shards: copies %d < 0", c.Shards.Copies)
		}
		if c.NATS == "" {
			p.bad("shards are set but nats is empty: a sharded replica forwards requests over NATS")
		}
		listed := map[string]bool{}
		for _, r := range c.Shards.Regions {
			for _, id := range r.Replicas {
				if listed[id] {
					p.bad("shards: replica %q is listed twice", id)
				}
				listed[id] = true
				if id != c.Replica && !slices.Contains(c.Peers, id) {
					p.bad("shards: replica %q is not in peers", id)
				}
			}
		}
	}
	if (c.NATSCert == "") != (c.NATSKey == "") {
		p.bad("nats_cert and nats_key go together")
	}
	if len(c.Peers) > 0 && c.NATS == "" {
		p.bad("peers are set but nats is empty: peers replicate over NATS")
	}
}

// validateNumbering checks the milestones rule and the numbered
// sequences.
func (c Config) validateNumbering(p *problems) {
	if _, err := milestone.ParseRule(c.Milestones); err != nil {
		p.bad("%v", err)
	} else if c.Milestones != "" && c.NATS == "" {
		p.bad("milestones are set but nats is empty: the allocator lives on JetStream")
	}
	seen := map[string]bool{}
	for _, sc := range c.Sequences {
		if err := sc.validate(); err != nil {
			p.add(err)
		}
		if seen[sc.Name] {
			p.bad("sequence %q is configured twice", sc.Name)
		}
		seen[sc.Name] = true
	}
	if len(c.Sequences) > maxSequences {
		p.bad("%d sequences: at most %d", len(c.Sequences), maxSequences)
	}
}

// validateCounters checks the approximate-counter rules and the hot
// blocks.
func (c Config) validateCounters(p *problems) {
	if err := c.validateApprox(); err != nil {
		p.add(err)
	}
	if err := c.HotItems().Validate(); err != nil {
		p.add(err)
	}
	if len(c.Hot) > maxHotRules {
		p.bad("%d hot blocks: at most %d", len(c.Hot), maxHotRules)
	}
}

// validateAlloc checks the allocator the sequences use: NATS, the
// bucket's replicas and its name.
func (c Config) validateAlloc(p *problems) {
	if len(c.Sequences) > 0 && c.NATS == "" {
		p.bad("sequences are set but nats is empty: the allocator lives on JetStream")
	}
	if c.AllocReplicas != 1 && c.AllocReplicas != 3 && c.AllocReplicas != 5 {
		p.bad("alloc_replicas %d: want 1, 3 or 5", c.AllocReplicas)
	}
	if c.AllocBucket == "" || strings.Trim(c.AllocBucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		p.bad("alloc_bucket %q: want [A-Za-z0-9_-]+", c.AllocBucket)
	}
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return fmt.Errorf("bad port %q", port)
	}
	return nil
}

// loopback reports whether a listen address (valid host:port) reaches
// this host only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true // refused by checkListen
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ValidToken reports whether s can be sent as a bearer token: printable
// ASCII without spaces (empty is valid: no token).
func ValidToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
