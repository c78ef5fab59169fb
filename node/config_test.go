package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/alloc"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Derive()
	return c
}

func TestDefaultsAreValidAndDerive(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Replica != "local-1" || c.DataDir == "" || c.LeaseReclaimAfter != "0" {
		t.Fatalf("%+v", c)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Region, c.Listen, c.Durability, c.AllocReplicas = "a/b", "nohost", "fast", 2
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, w := range []string{`region "a/b"`, `listen "nohost"`, `durability "fast"`, "alloc_replicas 2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}

// wal_min_sync_interval is empty (0) by default and takes a duration
// from 0 to 100ms; anything else is refused by name.
func TestWALMinSyncInterval(t *testing.T) {
	if v := DefaultConfig().WALMinSyncInterval; v != "" {
		t.Errorf("default %q, want empty", v)
	}
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {"0", true}, {"500us", true}, {"2ms", true}, {"100ms", true},
		{"101ms", false}, {"1s", false}, {"-1ms", false}, {"soon", false},
	} {
		c := validConfig()
		c.WALMinSyncInterval = tc.v
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok=%v", tc.v, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "wal_min_sync_interval") {
			t.Errorf("%q: error %q does not name wal_min_sync_interval", tc.v, err)
		}
	}
}

// lease_reclaim_after is off by default, must exceed lease_ttl when set
// (as alloc.Config.Validate demands), and reaches the holder's config.
func TestLeaseReclaimAfter(t *testing.T) {
	kv := alloc.NewLazyBucket(nil, alloc.BucketConfig{Name: "b"})
	for _, tc := range []struct {
		ttl, reclaim string
		ok           bool
		want         time.Duration
	}{
		{"4s", "0", true, 0},
		{"4s", "10m", true, 10 * time.Minute},
		{"4s", "4s", false, 0},
		{"4s", "3s", false, 0},
		{"4s", "-1s", false, 0},
		{"4s", "soon", false, 0},
		{"1s", "2s", true, 2 * time.Second},
	} {
		c := validConfig()
		c.LeaseTTL, c.LeaseReclaimAfter = tc.ttl, tc.reclaim
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("ttl %s reclaim %s: err %v, want ok=%v", tc.ttl, tc.reclaim, err, tc.ok)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "lease_reclaim_after") {
				t.Errorf("error %q does not name lease_reclaim_after", err)
			}
			continue
		}
		acfg := allocConfig(c, LikesSequence, kv, nil)
		if acfg.ReclaimAfter != tc.want || acfg.TTL != duration(tc.ttl) {
			t.Errorf("ttl %s reclaim %s: alloc config has ttl %v reclaim %v", tc.ttl, tc.reclaim, acfg.TTL, acfg.ReclaimAfter)
		}
		if _, err := alloc.New(acfg); err != nil {
			t.Errorf("ttl %s reclaim %s: the holder refuses what Validate accepted: %v", tc.ttl, tc.reclaim, err)
		}
	}
}

// A replicating replica must be given its id: a shared default would let
// two hosts run as one replica.
func TestReplicaRequiredWithNATS(t *testing.T) {
	c := DefaultConfig()
	c.NATS = "nats://127.0.0.1:4222"
	c.Derive()
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "replica is required when nats is set") {
		t.Fatalf("Validate() = %v, want the replica to be required", err)
	}
	c.Replica = "local-7"
	c.Derive()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Sequences: the flag form parses to what HCL would give, matchers do
// what Match says, and every malformed sequence is refused with its name.
func TestSequenceConfig(t *testing.T) {
	sc, err := ParseSequence("search=increments/search:*/every:1_000_000")
	if err != nil {
		t.Fatal(err)
	}
	if sc != (SequenceConfig{Name: "search", Counts: CountsIncrements, Match: "search:*", Milestones: "every:1_000_000"}) {
		t.Fatalf("parsed %+v", sc)
	}
	if sc.String() != "search=increments/search:*/every:1_000_000" {
		t.Fatalf("String %q", sc.String())
	}
	m := sc.matcher()
	if !m("search:cats") || !m("search:") || m("searc") || m("x-search:cats") {
		t.Fatal("prefix matcher")
	}
	exact, _ := ParseSequence("launch=likes/video:launch/1000")
	if m := exact.matcher(); !m("video:launch") || m("video:launch2") {
		t.Fatal("exact matcher")
	}
	if all, _ := ParseSequence("all=increments/*/10^k"); all.matcher() != nil {
		t.Fatal(`"*" should match everything (a nil matcher)`)
	}
	for _, bad := range []string{
		"search", "search=increments/search:*", "likes=likes/*/10", "a b=likes/x/10",
		"s=views/x/10", "s=likes//10", "s=likes/a b/10", "s=likes/x/", "s=likes/x/every:0",
	} {
		if _, err := ParseSequence(bad); err == nil {
			t.Errorf("ParseSequence(%q) accepted", bad)
		}
	}
	c := DefaultConfig()
	c.Replica, c.NATS = "us-1", "nats://127.0.0.1:4222"
	c.Sequences = []SequenceConfig{sc, sc}
	c.Derive()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "configured twice") {
		t.Fatalf("a sequence twice: %v", err)
	}
	c.Sequences, c.NATS = []SequenceConfig{sc}, ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "sequences are set but nats is empty") {
		t.Fatalf("sequences without nats: %v", err)
	}
}

// A token setting lists tokens separated by spaces (for rotation); a token
// is printable ASCII, and an error names the setting, never the value.
func TestTokenSettings(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {"s3cret", true}, {"old new", true}, {"a b c", true},
		{"tab\there", false}, {"new\nline", false}, {"caf\u00e9", false},
	} {
		for _, field := range []string{"read_token", "write_token", "admin_token"} {
			c := validConfig()
			switch field {
			case "read_token":
				c.ReadToken = tc.v
			case "write_token":
				c.WriteToken = tc.v
			default:
				c.AdminToken = tc.v
			}
			err := c.Validate()
			if (err == nil) != tc.ok {
				t.Errorf("%s %q: err %v, want ok=%v", field, tc.v, err, tc.ok)
			}
			if err != nil && (!strings.Contains(err.Error(), field) || strings.Contains(err.Error(), tc.v)) {
				t.Errorf("%s: error %q should name the setting and not show the value", field, err)
			}
		}
	}
}

// resp_listen is off by default; on loopback it needs nothing more; beyond
// loopback it needs a write token (anyone reaching it could write) and
// TLS (tls_cert, which RESP then serves with) or insecure_listen.
func TestRESPListen(t *testing.T) {
	for _, tc := range []struct {
		listen, token string
		insecure      bool
		tls           bool
		want          []string // "" entries: valid
	}{
		{"", "", false, false, nil},
		{"127.0.0.1:6381", "", false, false, nil},
		{"localhost:0", "", false, false, nil},
		{"nohost", "", false, false, []string{`resp_listen "nohost": want host:port`}},
		{"0.0.0.0:6381", "", false, false, []string{"beyond loopback without a write token", "beyond loopback without TLS"}},
		{"0.0.0.0:6381", "", true, false, []string{"beyond loopback without a write token"}},
		{"0.0.0.0:6381", "t", false, false, []string{"beyond loopback without TLS"}},
		{"0.0.0.0:6381", "t", false, true, nil},
	} {
		c := validConfig()
		c.RESPListen, c.WriteToken, c.InsecureListen = tc.listen, tc.token, tc.insecure
		if tc.tls {
			c.TLSCert, c.TLSKey = "cert.pem", "key.pem"
		}
		err := c.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", tc, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v accepted", tc)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", tc, err, w)
			}
		}
	}
	c := validConfig()
	c.RESPListen, c.WriteToken, c.InsecureListen, c.AdminToken = "0.0.0.0:6381", "t", true, "a"
	c.Listen = "127.0.0.1:8080"
	if err := c.Validate(); err != nil {
		t.Fatalf("a write token and insecure_listen: %v", err)
	}
	c = validConfig()
	c.RESPMaxConnections = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "resp_max_connections -1") {
		t.Fatalf("resp_max_connections -1: %v", err)
	}
	for _, u := range []string{"us-1:8080", "ftp://us-1", "http://", "http://us-1:8080/v1"} {
		c = validConfig()
		c.AdvertiseURL = u
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "advertise_url") {
			t.Errorf("advertise_url %q: %v", u, err)
		}
	}
	c = validConfig()
	c.AdvertiseURL = "https://us-1.tally.example:8080/"
	if err := c.Validate(); err != nil {
		t.Fatalf("advertise_url https://us-1.tally.example:8080/: %v", err)
	}
}

// HeartbeatInterval (Go only) is 0 for replication's default or a
// positive duration below peer_timeout: a peer heard less often than it
// goes stale would make every read approx.
func TestHeartbeatInterval(t *testing.T) {
	for _, tc := range []struct {
		hb   time.Duration
		peer string
		ok   bool
	}{
		{0, "5s", true},
		{250 * time.Millisecond, "5s", true},
		{-time.Second, "5s", false},
		{5 * time.Second, "5s", false},
		{2 * time.Second, "1s", false},
	} {
		c := validConfig()
		c.HeartbeatInterval, c.PeerTimeout = tc.hb, tc.peer
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("heartbeat %s peer_timeout %s: err %v, want ok=%v", tc.hb, tc.peer, err, tc.ok)
		} else if err != nil && !strings.Contains(err.Error(), "heartbeat interval") {
			t.Errorf("error %q does not name the heartbeat interval", err)
		}
	}
}
