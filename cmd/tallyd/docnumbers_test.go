package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/base/ratelog"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/dashboard"
	tallynode "github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
	"go.yaml.in/yaml/v3"
)

// TestDocNumbersAreTheDefaults checks every default the docs quote (an
// interval, a timeout, a size, a limit, a port) against the constant or
// DefaultConfig field it describes: a default changed in the code and
// not in the doc fails here, naming the doc's line and both values.
// Each row finds its sentence by an anchor phrase (testkit.DocNumber),
// so a reworded sentence fails too until its row moves with it.
// Measured figures (docs/benchmarks.md, most of docs/performance.md) are
// not defaults and are not checked. A setting's default is quoted in one
// place, operations.md's configuration table, and named elsewhere; where
// a second copy of a number stays (a summary, a paragraph that reasons
// with it), it is a row here too. The defaults only a package sees are
// checked by that package's TestDocNumbersAreTheDefaults (node, region,
// httpapi).
func TestDocNumbersAreTheDefaults(t *testing.T) {
	const (
		arch   = "docs/architecture.md"
		ops    = "docs/operations.md"
		readme = "README.md"
		perf   = "docs/performance.md"
		hcl    = "configs/tallyd.hcl"
	)
	nc := tallynode.DefaultConfig()
	rc := replication.DefaultConfig()
	gc := region.DefaultConfig()
	sc := storage.DefaultConfig()
	lc := defaultLocalConfig()
	win := levelsOf(t, nc.Windows)
	uniq := levelsOf(t, nc.UniquesWindows)
	copies := shardsDefaultCopies(t)
	opsField := func(field, want string) testkit.DocNumber {
		// A row of the configuration table: | `field` | flag | default | meaning |
		return testkit.DocNumber{ops, "\\| `" + regexp.QuoteMeta(field) + "` \\| [^|]* \\| `?([^|` ]+)`?[^|]* \\|", want}
	}

	rows := []testkit.DocNumber{
		// docs/operations.md, the configuration table: the one place for
		// every setting's default.
		opsField("region", nc.Region),
		opsField("listen", nc.Listen),
		opsField("drain_delay", nc.DrainDelay),
		opsField("resp_max_connections", strconv.Itoa(nc.RESPMaxConnections)),
		opsField("resp_max_connections_per_address", strconv.Itoa(nc.RESPMaxConnectionsPerAddress)),
		opsField("min_procs", strconv.Itoa(nc.MinProcs)),
		opsField("durability", nc.Durability),
		opsField("log_level", nc.LogLevel),
		opsField("log_json", strconv.FormatBool(nc.LogJSON)),
		opsField("insecure_listen", strconv.FormatBool(nc.InsecureListen)),
		opsField("insecure_open_admin", strconv.FormatBool(nc.InsecureOpenAdmin)),
		opsField("max_body_bytes", strconv.FormatInt(nc.MaxBodyBytes, 10)),
		opsField("request_timeout", nc.RequestTimeout),
		opsField("shutdown_timeout", nc.ShutdownTimeout),
		opsField("idempotency_ttl", nc.IdempotencyTTL),
		opsField("like_lists", strconv.FormatBool(nc.LikeLists)),
		opsField("event_log", strconv.FormatBool(nc.EventLog)),
		opsField("event_retention", nc.EventRetention),
		opsField("event_log_keep", nc.EventLogKeep),
		opsField("windows", nc.Windows),
		opsField("uniques_windows", nc.UniquesWindows),
		opsField("trending_capacity", strconv.Itoa(nc.TrendingCapacity)),
		opsField("flush_interval", nc.FlushInterval),
		opsField("anti_entropy_interval", nc.AntiEntropyInterval),
		opsField("peer_timeout", nc.PeerTimeout),
		opsField("recovery_timeout", nc.RecoveryTimeout),
		opsField("alloc_replicas", strconv.Itoa(nc.AllocReplicas)),
		opsField("alloc_bucket", nc.AllocBucket),
		opsField("lease_ttl", nc.LeaseTTL),
		opsField("lease_reclaim_after", nc.LeaseReclaimAfter),
		{ops, "\\| `event_time_past`, `event_time_future` \\| [^|]* \\| `([^`]*)`, `[^`]*` \\|", nc.EventTimePast},
		{ops, "\\| `event_time_past`, `event_time_future` \\| [^|]* \\| `[^`]*`, `([^`]*)` \\|", nc.EventTimeFuture},
		{ops, "`copies` \\(default (\\d+)\\) of a region's replicas hold each shard", strconv.Itoa(copies)},
		{ops, "`tallyd local` serves it on (\\d+) and up \\(`--resp-port`", strconv.Itoa(lc.RESPPort)},
		{ops, "each slot sketch costs up to (\\d+ KiB) per replica", testkit.IEC(crdt.HLLRegisters)},

		// docs/operations.md: the values fixed in code, with no setting.
		{ops, "no setting: the heartbeat interval \\(([^)]*)\\)", testkit.Human(rc.HeartbeatInterval)},
		{ops, "the anti-entropy request timeout \\(([^)]*)\\)", testkit.Human(rc.RequestTimeout)},
		{ops, "the largest replication message \\(([^)]*)\\)", testkit.IEC(int64(rc.MaxMessageBytes))},
		{ops, "segments pulled per peer per round \\((\\d+)\\)", strconv.Itoa(rc.MaxSegmentsPerRound)},
		{ops, "writer batches \\(([\\d,]+) operations\\)", testkit.Commas(gc.MaxBatch)},
		{ops, "writer batches \\([^)]*\\) and queue \\(([\\d,]+)\\)", testkit.Commas(gc.QueueDepth)},
		{ops, "Keep `peer_timeout` well above the (\\S+ s) heartbeat interval", testkit.Human(rc.HeartbeatInterval)},

		// docs/operations.md, Memory: the one place for the sizes of the
		// caches and filters.
		{ops, "the \\*\\*record filter\\*\\*, (\\S+ MiB) on the Go heap", testkit.IEC(sc.RecordFilterBytes)},
		{ops, "and the \\*\\*vector filter\\*\\*, (\\S+ MiB) \\(`storage.Config.VectorFilterBytes`\\)", testkit.IEC(sc.VectorFilterBytes)},
		{ops, "Pebble's \\*\\*memtables\\*\\*, two of (\\S+ MiB) under write load", testkit.IEC(sc.MemTableBytes)},
		{ops, "Pebble's \\*\\*block cache\\*\\*, (\\S+ MiB) for blocks", testkit.IEC(sc.CacheBytes)},
		{ops, "for blocks \\(up to (\\S+ MiB) while the third memtable slot", testkit.IEC(sc.CacheBytes + int64(sc.MemTableBytes))},
		{ops, "the vector read cache \\(at most ([\\d,]+) vectors\\)", testkit.Commas(gc.CacheItems)},

		// docs/operations.md: ports, limits and the rest.
		{ops, "`tallyd local` uses NATS client ports (\\d+) and up", strconv.Itoa(lc.NATSPort)},
		{ops, "HTTP (\\d+) and up \\(`--port`\\)", strconv.Itoa(lc.Port)},
		{ops, "RESP (\\d+) and up \\(`--resp-port`\\)", strconv.Itoa(lc.RESPPort)},
		{ops, "and the dashboard on (\\d+) \\(`--dashboard`\\)", portOf(t, dashboard.DefaultAddr)},
		{ops, "The replica remembers the ([\\d,]+) addresses", testkit.Commas(authguard.DefaultMaxAddrs)},
		{ops, "each address may send (\\d+) wrong tokens at once", strconv.Itoa(authguard.DefaultBurst)},
		{ops, "wrong tokens at once, and gets (one) back a second", numberWord(int(authguard.DefaultRate))},
		{ops, "an address owing more than (\\d+ seconds) is refused unchecked", fmt.Sprintf("%d seconds", authguard.DefaultMaxWait/time.Second)},
		{ops, "`tallyd local` splits `viral:` items in (\\d+) by default", strconv.Itoa(lc.Hot.List[0].Splits)},
		{ops, "several blocks wins; ids up to (\\d+) bytes\\)", strconv.Itoa(crdt.MaxSplitIDLen)},
		{ops, "the repeating errors are logged once and then at most once every (\\d+ seconds)", fmt.Sprintf("%d seconds", ratelog.DefaultEvery/time.Second)},
		{ops, "`entry_cap` \\(past 2\\^(\\d+)\\)", strconv.Itoa(bits.Len64(region.MaxEntry) - 1)},
		{ops, "It sends batches \\(`--batch`, default ([\\d,]+) lines\\)", testkit.Commas(atoi(t, flagDefault(t, "batch", "import")))},
		{ops, "\\| `--batch` \\| `(\\d+)` \\| at most this many stream messages", flagDefault(t, "batch", "events", "sink")},
		{ops, "stream messages \\(each up to (\\d+) events\\) per write and transaction", strconv.Itoa(storage.LogChunk)},
		{ops, "\\| `--retry-for` \\| `([^`]*)` \\|", shortDuration(mustDuration(t, flagDefault(t, "retry-for", "events", "sink")))},

		// configs/tallyd.hcl: the defaults its comments and commented-out
		// lines state (TestExampleConfigShowsTheDefaults checks the lines
		// it sets).
		{hcl, "Default: (\\d+) \\(Redis's maxclients\\)\\. # resp_max_connections = \\d+", strconv.Itoa(nc.RESPMaxConnections)},
		{hcl, "# resp_max_connections = (\\d+)", strconv.Itoa(nc.RESPMaxConnections)},
		{hcl, "Default: (\\d+)\\. # resp_max_connections_per_address = \\d+", strconv.Itoa(nc.RESPMaxConnectionsPerAddress)},
		{hcl, "# resp_max_connections_per_address = (\\d+)", strconv.Itoa(nc.RESPMaxConnectionsPerAddress)},
		{hcl, "Default: (\\d+)\\. # min_procs = \\d+", strconv.Itoa(nc.MinProcs)},
		{hcl, "# min_procs = (\\d+)", strconv.Itoa(nc.MinProcs)},
		{hcl, "Default \"([^\"]*)\"\\. drain_delay =", nc.DrainDelay},
		{hcl, "Default \"([^\"]*)\"\\. flush_interval =", nc.FlushInterval},
		{hcl, "Default \"([^\"]*)\"\\. anti_entropy_interval =", nc.AntiEntropyInterval},
		{hcl, "Default \"([^\"]*)\"\\. peer_timeout =", nc.PeerTimeout},
		{hcl, "Default \"([^\"]*)\"\\. recovery_timeout =", nc.RecoveryTimeout},
		{hcl, "Default \"([^\"]*)\"\\. # lease_ttl = \"[^\"]*\"", nc.LeaseTTL},
		{hcl, "# lease_ttl = \"([^\"]*)\"", nc.LeaseTTL},
		{hcl, "Default (?:# )?\"([^\"]*)\": never;", nc.LeaseReclaimAfter},
		{hcl, "each shard held by (?:# )?`copies` of them \\(default (\\d+)\\)", strconv.Itoa(copies)},
		{hcl, "# copies = (\\d+)", strconv.Itoa(copies)},

		// README.md: the ports of `tallyd local`.
		{readme, "one replica per region on HTTP ports (\\d+),", strconv.Itoa(lc.Port)},
		{readme, "us=(\\d+), eu=\\d+, ap=\\d+, `tallyd local`'s defaults", strconv.Itoa(lc.Port)},
		{readme, "with a dashboard at http://([\\d.:]+)\\.", dashboard.DefaultAddr},
		{readme, "speaks the Redis protocol \\((\\d+) and up\\)", strconv.Itoa(lc.RESPPort)},

		// docs/performance.md: where it says what runs today.
		{perf, "The record filter is an in-memory filter over \\(item, user\\) keys, fixed at (\\S+ MiB)", testkit.IEC(sc.RecordFilterBytes)},
		{perf, "it publishes its changes as deltas every (\\S+ ms)", testkit.Human(mustDuration(t, nc.FlushInterval))},
		{perf, "a round at most every (\\S+ ms) while events keep coming, and the chunks", testkit.Human(replication.DefaultPublishLinger)},
		{perf, "has never sent merged into one of up to (\\d+) events", strconv.Itoa(storage.LogChunk)},

		// docs/architecture.md.
		{arch, "The defaults are (.*?) \\(`windows`, per prefix", levelsProse(win)},
		{arch, "own hourly \\(kept ([^)]*)\\) and daily", keepProse(uniq[0].keep)},
		{arch, "own hourly \\(kept [^)]*\\) and daily \\(kept ([^)]*)\\) slot sketches", keepProse(uniq[1].keep)},
		{arch, "`storage.Config.RecordFilterBytes`, default ([^,]*),", testkit.IEC(sc.RecordFilterBytes)},
		{arch, "`storage.Config.VectorFilterBytes`, default ([^:]*):", testkit.IEC(sc.VectorFilterBytes)},
		{arch, "Pebble settings: a (\\S+ MiB) block cache", testkit.IEC(sc.CacheBytes)},
		{arch, "a (\\S+ MiB) memtable, 10-bit bloom", testkit.IEC(sc.MemTableBytes)},
		{arch, "It starts a round at most every (\\S+ ms) \\(`PublisherConfig.Linger`\\)", testkit.Human(replication.DefaultPublishLinger)},
		{arch, "merges the chunks it has never sent into chunks of up to (\\d+) events", strconv.Itoa(storage.LogChunk)},
		{arch, "Large outboxes are split into messages of at most (\\S+ KiB)", testkit.IEC(int64(rc.MaxMessageBytes))},
		{arch, "If nothing changed for `HeartbeatInterval` \\(([^)]*)\\)", testkit.Human(rc.HeartbeatInterval)},
		{arch, "requests the peer's (\\d+) digests", strconv.Itoa(storage.Segments)},
		{arch, "pulls at most (\\d+) segments per peer per round", strconv.Itoa(rc.MaxSegmentsPerRound)},
		{arch, "the answer is a page of up to (\\S+ KiB) of keys", testkit.IEC(rc.MaxMessageBytes / 2)},
		{arch, "requests the peer's \\d+ digests \\(about (\\S+ KiB)\\)", testkit.IEC(8 * storage.Segments)},
		{ops, "digest replies about (\\S+ KiB)", testkit.IEC(8 * storage.Segments)},
		{arch, "Each anti-entropy request times out after (\\S+ s)\\.", testkit.Human(rc.RequestTimeout)},
		{arch, "sends the digests of those segments only \\(8 bytes each, (\\w+) a shard\\)", numberWord(storage.SegmentsPerShard)},
		{arch, "blocks last at most `2 × target` \\(([^)]*)\\), so the order", testkit.Human(2 * alloc.DefaultTarget)},
		{arch, "with the defaults \\(`lease_ttl` ([^,]*), target", testkit.Human(alloc.DefaultTTL)},
		{arch, "with the defaults \\(`lease_ttl` [^,]*, target ([^)]*)\\)", testkit.Human(alloc.DefaultTarget)},
		{arch, "until the lease's TTL \\(([^)]*)\\) passes", testkit.Human(alloc.DefaultTTL)},
		{arch, "renews every `TTL/4` \\(([^)]*)\\)", testkit.Human(alloc.DefaultTTL / 4)},
		{arch, "queue \\((\\d+)\\) ─▶ writer: take up to \\d+ ops", strconv.Itoa(gc.QueueDepth)},
		{arch, "queue \\(\\d+\\) ─▶ writer: take up to (\\d+) ops", strconv.Itoa(gc.MaxBatch)},
		{arch, "NDJSON of up to ([\\d,]+) `like`", testkit.Commas(httpapi.MaxBatchEvents)},
		{arch, "in-memory cache \\(\\d+ shards, ([\\d,]+) vectors in total", testkit.Commas(gc.CacheItems)},
		{arch, "one of the deployment's ([\\d,]+) fixed parts", testkit.Commas(shard.Count)},
		{arch, "There are ([\\d,]+) shards, fixed at build time", testkit.Commas(shard.Count)},
		{arch, "\\(`crdt.BaseKey`\\) modulo ([\\d,]+), so", testkit.Commas(shard.Count - 1)},
		{arch, "The ([\\d,]+) anti-entropy segments are cut \\w+ per shard", testkit.Commas(storage.Segments)},
		{arch, "The [\\d,]+ anti-entropy segments are cut (\\w+) per shard", numberWord(storage.SegmentsPerShard)},
		{ops, "Each of the ([\\d,]+) shards is then held", testkit.Commas(shard.Count)},
		{arch, "finest level that still holds its start and needs at most ([\\d,]+) slots", testkit.Commas(region.MaxWindowSlots)},
		{arch, "the top (\\d+) bits pick one of [\\d,]+ registers", strconv.Itoa(crdt.HLLPrecision)},
		{arch, "the top \\d+ bits pick one of ([\\d,]+) registers", testkit.Commas(crdt.HLLRegisters)},
		{arch, "is 1\\.04/sqrt\\((\\d+)\\)", strconv.Itoa(crdt.HLLRegisters)},
		{arch, "stored and replicated as (\\d+) pages of \\d+ registers", strconv.Itoa(crdt.HLLPages)},
		{arch, "stored and replicated as \\d+ pages of (\\d+) registers", strconv.Itoa(crdt.HLLPageSize)},
		{arch, "\\(offset, rho pairs\\) up to (\\d+) registers set", strconv.Itoa(crdt.HLLSparseMax)},
		{arch, "dense \\((\\d+) bytes\\) above", strconv.Itoa(crdt.HLLPageSize)},
		{arch, "a large one at most ([\\d,]+) bytes", testkit.Commas(crdt.HLLPages * (1 + crdt.HLLPageSize))},
		{arch, "The cost is space: up to (\\S+ KiB) per replica per key", testkit.IEC(crdt.HLLRegisters)},
		{arch, "an increment of 2\\^(\\d+) within about", strconv.Itoa(bits.Len64(region.MaxBy) - 1)},
		{arch, "One increment is at most 2\\^(\\d+) \\(`region.MaxBy`\\)", strconv.Itoa(bits.Len64(region.MaxBy) - 1)},
		{arch, "entry of a key may grow freely to 2\\^(\\d+),", strconv.Itoa(bits.Len64(region.FreeEntry) - 1)},
		{arch, "and past it by at most 2\\^(\\d+) \\(about 10\\^6\\) a millisecond", strconv.Itoa(bits.Len64(region.EntryRatePerMs) - 1)},
		{arch, "a millisecond since (\\d{4}-\\d\\d-\\d\\d), about 10\\^9 a second", time.UnixMilli(region.EntryEpochMs).UTC().Format(time.DateOnly)},
		{arch, "an increment of 2\\^\\d+ within about (\\d+) minutes", strconv.Itoa(int(time.Duration(region.MaxBy/region.EntryRatePerMs) * time.Millisecond / time.Minute))},
		{arch, "the cap stops at 2\\^(\\d+) \\(`region.MaxEntry`\\)", strconv.Itoa(bits.Len64(region.MaxEntry) - 1)},
		{arch, "take at most (\\w+) new leases of at most `2\\^\\d+` numbers each", numberWord(alloc.MaxAcquires)},
		{arch, "take at most \\w+ new leases of at most `2\\^(\\d+)` numbers each", strconv.Itoa(bits.Len64(alloc.DefaultMaxBlock) - 1)},
		{ops, "an id \\(1\\.\\.(\\d+) bytes of", strconv.Itoa(crdt.MaxIDLen)},
		{ops, "prefix into N parts \\(2\\.\\.(\\d+)\\)", strconv.Itoa(crdt.MaxParts)},
		{ops, "`error` \\(([\\d.]+)\\.\\.[\\d.]+\\) is the relative standard error target", strconv.FormatFloat(region.MinApproxError, 'g', -1, 64)},
		{ops, "`error` \\([\\d.]+\\.\\.([\\d.]+)\\) is the relative standard error target", strconv.FormatFloat(region.MaxApproxError, 'g', -1, 64)},
		{ops, "none; `tallyd local`: `(hot:=[\\d.]+)`", lc.Approx.List[0].Prefix + "=" + strconv.FormatFloat(lc.Approx.List[0].Error, 'g', -1, 64)},
		{ops, "empty \\(off\\); `([^`]*)` in `tallyd local`", lc.Milestones},
	}

	rows = append(rows, alertWaits(t)...)
	testkit.CheckDocNumbers(t, "../..", rows)
}

// level is one `width:keep` pair of a window setting.
type level struct{ width, keep string }

func levelsOf(t *testing.T, spec string) []level {
	t.Helper()
	var ls []level
	for _, p := range strings.Split(spec, ",") {
		w, k, ok := strings.Cut(p, ":")
		if !ok {
			t.Fatalf("window levels %q: want width:keep pairs", spec)
		}
		ls = append(ls, level{w, k})
	}
	return ls
}

// levelsProse is how architecture.md spells levels: "1 s slots kept 3
// hours, 1 min slots kept 15 days and 1 h slots kept 3 years".
func levelsProse(ls []level) string {
	var parts []string
	for _, l := range ls {
		n, u := splitUnit(l.width)
		parts = append(parts, n+" "+map[string]string{"s": "s", "m": "min", "h": "h", "d": "d"}[u]+" slots kept "+keepProse(l.keep))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// keepProse spells a keep ("3h", "400d") as the docs do: "3 hours", "400 days".
func keepProse(k string) string {
	n, u := splitUnit(k)
	return n + " " + map[string]string{"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "y": "years"}[u]
}

func splitUnit(s string) (number, unit string) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("default %q: %v", s, err)
	}
	return d
}

func numberWord(n int) string {
	if w := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}; n < len(w) {
		return w[n]
	}
	return strconv.Itoa(n)
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, ok := strings.Cut(addr, ":")
	if !ok {
		t.Fatalf("address %q has no port", addr)
	}
	return port
}

// shardsDefaultCopies is the copies of a shard when a shards block sets
// none: the map the config computes for a region of three replicas.
func shardsDefaultCopies(t *testing.T) int {
	t.Helper()
	sc := tallynode.ShardsConfig{Regions: []tallynode.ShardRegion{{Name: "us", Replicas: []string{"us-1", "us-2", "us-3"}}}}
	m, err := sc.Map("us")
	if err != nil {
		t.Fatal(err)
	}
	return m.Copies
}

// flagDefault is the default of a flag of a tallyd command, as the
// command's -h prints it.
func flagDefault(t *testing.T, flag string, command ...string) string {
	t.Helper()
	var out bytes.Buffer
	run(context.Background(), append(command, "-h"), &out, &out)
	m := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(flag) + `\b.*\n\s+.*\(default "?([^")]*)"?\)$`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("tallyd %s -h shows no default of -%s:\n%s", strings.Join(command, " "), flag, out.String())
	}
	return m[1]
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// shortDuration is a duration as the docs write a flag's value: "10m",
// not "10m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// alertWaits are the rows of operations.md's alert table: each alert's
// "for N min" is the for: of its rule in deploy/prometheus/alerts.yml.
func alertWaits(t *testing.T) []testkit.DocNumber {
	t.Helper()
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readDoc(t, "../../deploy/prometheus/alerts.yml")), &file); err != nil {
		t.Fatalf("deploy/prometheus/alerts.yml: %v", err)
	}
	var rows []testkit.DocNumber
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.For == "" {
				continue
			}
			rows = append(rows, testkit.DocNumber{
				Doc:    "docs/operations.md",
				Anchor: "\\| `" + regexp.QuoteMeta(r.Alert) + "` \\| [^|]* for (\\d+ (?:s|min|h))\\b[^|]*\\|",
				Want:   testkit.Human(mustDuration(t, r.For)),
			})
		}
	}
	if len(rows) < 5 {
		t.Fatalf("only %d alerts with a for: in alerts.yml: the parse is broken", len(rows))
	}
	return rows
}

// configs/tallyd.hcl says "the values shown are the defaults unless
// noted": every attribute it sets, but the three noted (region, replica,
// data_dir), is the default.
func TestExampleConfigShowsTheDefaults(t *testing.T) {
	cfg, err := loadConfig([]string{"--config", "../../configs/tallyd.hcl"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := tallynode.DefaultConfig()
	want.Region, want.Replica, want.DataDir = cfg.Region, cfg.Replica, cfg.DataDir
	got, wantV := reflect.ValueOf(cfg), reflect.ValueOf(want)
	for i := range got.NumField() {
		if f := got.Type().Field(i); !reflect.DeepEqual(got.Field(i).Interface(), wantV.Field(i).Interface()) {
			t.Errorf("configs/tallyd.hcl sets %s (%s) to %v; the default is %v", f.Name, f.Tag.Get("hcl"), got.Field(i).Interface(), wantV.Field(i).Interface())
		}
	}
}
