package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/authguard"
	"github.com/tally-dev/tally/internal/dashboard"
	tallynode "github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// docNumber is one default a doc quotes: in doc, the one match of anchor
// (a regular expression whose first group is the number) must read want,
// which the row computes from the code. Runs of white space in the doc,
// line breaks too, read as one space, so an anchor does not care where
// a paragraph wraps.
type docNumber struct {
	doc, anchor, want string
}

// TestDocNumbersAreTheDefaults checks every default the docs quote (an
// interval, a timeout, a size, a limit, a port) against the constant or
// DefaultConfig field it describes: a default changed in the code and
// not in the doc fails here, naming the doc's line and both values.
// Measured figures (docs/benchmarks.md, most of docs/performance.md) are
// not defaults and are not checked. A number the docs quote in several
// places is kept in one and pointed to from the others; where a second
// copy stays (a summary table, a paragraph that needs it to read), it is
// a row here too.
func TestDocNumbersAreTheDefaults(t *testing.T) {
	const (
		arch   = "docs/architecture.md"
		ops    = "docs/operations.md"
		readme = "README.md"
		perf   = "docs/performance.md"
	)
	nc := tallynode.DefaultConfig()
	rc := replication.DefaultConfig()
	gc := region.DefaultConfig()
	sc := storage.DefaultConfig()
	lc := defaultLocalConfig()
	win := levelsOf(t, nc.Windows)
	uniq := levelsOf(t, nc.UniquesWindows)
	copies := shardsDefaultCopies(t)
	opsField := func(field, want string) docNumber {
		// A row of the configuration table: | `field` | flag | default | meaning |
		return docNumber{ops, "\\| `" + regexp.QuoteMeta(field) + "` \\| [^|]* \\| `?([^|` ]+)`?[^|]* \\|", want}
	}

	rows := []docNumber{
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
		{ops, "each slot sketch costs up to (\\d+ KiB) per replica", iec(crdt.HLLRegisters)},

		// docs/operations.md: the values fixed in code, with no setting.
		{ops, "no setting: the heartbeat interval \\(([^)]*)\\)", human(rc.HeartbeatInterval)},
		{ops, "the anti-entropy request timeout \\(([^)]*)\\)", human(rc.RequestTimeout)},
		{ops, "the largest replication message \\(([^)]*)\\)", iec(int64(rc.MaxMessageBytes))},
		{ops, "segments pulled per peer per round \\((\\d+)\\)", strconv.Itoa(rc.MaxSegmentsPerRound)},
		{ops, "writer batches \\(([\\d,]+) operations\\)", commas(gc.MaxBatch)},
		{ops, "writer batches \\([^)]*\\) and queue \\(([\\d,]+)\\)", commas(gc.QueueDepth)},
		{ops, "the vector cache \\(([\\d,]+) items\\)", commas(gc.CacheItems)},
		{ops, "Pebble's block cache \\(([^)]*)\\)", iec(sc.CacheBytes)},
		{ops, "Pebble's block cache \\([^)]*\\) and memtable \\(([^)]*)\\)", iec(sc.MemTableBytes)},
		{ops, "Keep `peer_timeout` well above the (\\S+ s) heartbeat interval", human(rc.HeartbeatInterval)},

		// docs/operations.md: ports, limits and the rest.
		{ops, "`tallyd local` uses NATS client ports (\\d+) and up", strconv.Itoa(lc.NATSPort)},
		{ops, "HTTP (\\d+) and up \\(`--port`\\)", strconv.Itoa(lc.Port)},
		{ops, "RESP (\\d+) and up \\(`--resp-port`\\)", strconv.Itoa(lc.RESPPort)},
		{ops, "and the dashboard on (\\d+) \\(`--dashboard`\\)", portOf(t, dashboard.DefaultAddr)},
		{ops, "The replica remembers the ([\\d,]+) addresses", commas(authguard.DefaultMaxAddrs)},
		{ops, "`tallyd local` splits `viral:` items in (\\d+) by default", strconv.Itoa(lc.Hot.List[0].Splits)},

		// README.md: the ports of `tallyd local`.
		{readme, "one replica per region on HTTP ports (\\d+),", strconv.Itoa(lc.Port)},
		{readme, "us=(\\d+), eu=\\d+, ap=\\d+, `tallyd local`'s defaults", strconv.Itoa(lc.Port)},
		{readme, "with a dashboard at http://([\\d.:]+)\\.", dashboard.DefaultAddr},
		{readme, "speaks the Redis protocol \\((\\d+) and up\\)", strconv.Itoa(lc.RESPPort)},

		// docs/architecture.md.
		{arch, "A key lives `idempotency_ttl` \\(([^;]*) by default;", human(mustDuration(t, nc.IdempotencyTTL))},
		{arch, "The defaults are (.*?) \\(`windows`, per prefix", levelsProse(win)},
		{arch, "`event_time_past` \\(([^)]*)\\) before", human(region.DefaultEventPast)},
		{arch, "and `event_time_future` \\(([^)]*)\\) after", human(region.DefaultEventFuture)},
		{arch, "own hourly \\(kept ([^)]*)\\) and daily", keepProse(uniq[0].keep)},
		{arch, "own hourly \\(kept [^)]*\\) and daily \\(kept ([^)]*)\\) slot sketches", keepProse(uniq[1].keep)},
		{arch, "`storage.Config.RecordFilterBytes`, default ([^,]*),", iec(sc.RecordFilterBytes)},
		{arch, "`storage.Config.VectorFilterBytes`, default ([^:]*):", iec(sc.VectorFilterBytes)},
		{arch, "Pebble settings: a (\\S+ MiB) block cache", iec(sc.CacheBytes)},
		{arch, "a (\\S+ MiB) memtable, 10-bit bloom", iec(sc.MemTableBytes)},
		{arch, "It starts a round at most every (\\S+ ms) \\(`PublisherConfig.Linger`\\)", human(replication.DefaultPublishLinger)},
		{arch, "merges the chunks it has never sent into chunks of up to (\\d+) events", strconv.Itoa(storage.LogChunk)},
		{arch, "Every `flush_interval` \\(([^)]*)\\) the flusher", human(mustDuration(t, nc.FlushInterval))},
		{arch, "Large outboxes are split into messages of at most (\\S+ KiB)", iec(int64(rc.MaxMessageBytes))},
		{arch, "If nothing changed for `HeartbeatInterval` \\(([^)]*)\\)", human(rc.HeartbeatInterval)},
		{arch, "Every `anti_entropy_interval` \\(([^)]*)\\), for each known peer", human(mustDuration(t, nc.AntiEntropyInterval))},
		{arch, "requests the peer's (\\d+) digests", strconv.Itoa(storage.Segments)},
		{arch, "pulls at most (\\d+) segments per peer per round", strconv.Itoa(rc.MaxSegmentsPerRound)},
		{arch, "Each anti-entropy request times out after (\\S+ s)\\.", human(rc.RequestTimeout)},
		{arch, "waits at most `recovery_timeout` \\(([^)]*)\\)", human(mustDuration(t, nc.RecoveryTimeout))},
		{arch, "sends the digests of those segments only \\(8 bytes each, (\\w+) a shard\\)", numberWord(storage.SegmentsPerShard)},
		{arch, "held by `copies` replicas of each region \\(default (\\d+)\\)", strconv.Itoa(copies)},
		{arch, "unheard from for longer than `peer_timeout` \\(([^)]*)\\)", human(mustDuration(t, nc.PeerTimeout))},
		{arch, "blocks last at most `2 × target` \\(([^)]*)\\), so the order", human(2 * alloc.DefaultTarget)},
		{arch, "with the defaults \\(`lease_ttl` ([^,]*), target", human(alloc.DefaultTTL)},
		{arch, "with the defaults \\(`lease_ttl` [^,]*, target ([^)]*)\\)", human(alloc.DefaultTarget)},
		{arch, "until the lease's TTL \\(([^)]*)\\) passes", human(alloc.DefaultTTL)},
		{arch, "renews every `TTL/4` \\(([^)]*)\\)", human(alloc.DefaultTTL / 4)},
		{arch, "queue \\((\\d+)\\) ─▶ writer: take up to \\d+ ops", strconv.Itoa(gc.QueueDepth)},
		{arch, "queue \\(\\d+\\) ─▶ writer: take up to (\\d+) ops", strconv.Itoa(gc.MaxBatch)},
		{arch, "NDJSON of up to ([\\d,]+) `like`", commas(httpapi.MaxBatchEvents)},
		{arch, "in-memory cache \\(\\d+ shards, ([\\d,]+) vectors in total", commas(gc.CacheItems)},
		{arch, "one of the deployment's ([\\d,]+) fixed parts", commas(shard.Count)},
		{arch, "There are ([\\d,]+) shards, fixed at build time", commas(shard.Count)},
		{arch, "\\(`crdt.BaseKey`\\) modulo ([\\d,]+), so", commas(shard.Count - 1)},
		{arch, "The ([\\d,]+) anti-entropy segments are cut \\w+ per shard", commas(storage.Segments)},
		{arch, "The [\\d,]+ anti-entropy segments are cut (\\w+) per shard", numberWord(storage.SegmentsPerShard)},
		{ops, "Each of the ([\\d,]+) shards is then held", commas(shard.Count)},
	}

	docs := map[string]*flatDoc{}
	for _, row := range rows {
		d, ok := docs[row.doc]
		if !ok {
			d = readFlatDoc(t, "../../"+row.doc)
			docs[row.doc] = d
		}
		re, err := regexp.Compile(row.anchor)
		if err != nil {
			t.Errorf("%s: anchor %q: %v", row.doc, row.anchor, err)
			continue
		}
		ms := re.FindAllStringSubmatchIndex(d.text, -1)
		switch {
		case len(ms) == 0:
			t.Errorf("%s: no sentence matches %q (reworded? then move the anchor; want %q in it)", row.doc, row.anchor, row.want)
			continue
		case len(ms) > 1:
			t.Errorf("%s: %d sentences match %q, lines %d and %d: make the anchor name one", row.doc, len(ms), row.anchor, d.line(ms[0][0]), d.line(ms[1][0]))
			continue
		case len(ms[0]) < 4 || ms[0][2] < 0:
			t.Errorf("%s: anchor %q has no group to read the number from", row.doc, row.anchor)
			continue
		}
		if got := d.text[ms[0][2]:ms[0][3]]; got != row.want {
			t.Errorf("%s:%d says %q where the code's default is %q (%s)", row.doc, d.line(ms[0][2]), got, row.want, row.anchor)
		}
	}
}

// flatDoc is a doc with every run of white space made one space, and
// where each byte of it came from.
type flatDoc struct {
	text  string
	lines []int // lines[i]: the doc's line of text[i]
}

func readFlatDoc(t *testing.T, path string) *flatDoc {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the doc: %v", err)
	}
	var b strings.Builder
	var lines []int
	line, space := 1, false
	for _, r := range string(raw) {
		if unicode.IsSpace(r) {
			if r == '\n' {
				line++
			}
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
			lines = append(lines, line)
		}
		space = false
		n, _ := b.WriteRune(r)
		for range n {
			lines = append(lines, line)
		}
	}
	return &flatDoc{text: b.String(), lines: lines}
}

func (d *flatDoc) line(i int) int { return d.lines[i] }

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

// human spells a duration as the docs' prose does: "10 ms", "2 s",
// "5 min", "24 h".
func human(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	default:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("default %q: %v", s, err)
	}
	return d
}

// iec spells a size as the docs do: "64 MiB", "256 KiB".
func iec[N int | int64 | uint64](n N) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(n) >= u.size && int64(n)%u.size == 0 {
			return fmt.Sprintf("%d %s", int64(n)/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", int64(n))
}

// commas spells a count with thousands separated: "16,384".
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
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
