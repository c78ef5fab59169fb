package replicationtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/storage"
)

// Run runs every script under dir, each on a new Env with its stores in a
// temporary folder.
//
// The commands (a replica is named by its region, and is its own replica
// id; T is a time: now, +90s or -5m from now, 00:10:30.5 on the clock's
// first day, or RFC 3339):
//
//	windows past=5m future=1m levels=(1s:3h,1m:15d,1h)
//	                         slots of the replicas started after it
//	start us eu ...          open replicas, sync them and accept writes
//	like us alice post1 [at=T]     a like (unlike likewise)
//	incr us views 5 [idem=k] [at=T]  a counter increment
//	grant us b 100           add to budget b
//	spend us b 10 [idem=k]   spend from budget b
//	batch us                 the ops of the input lines, one per line as
//	                         above without the replica, in one batch
//	flush [us ...]           publish each replica's outbox (default: all)
//	deliver [reverse]        deliver every message in flight, then merge
//	cut us eu [oneway]       stop messages between two replicas
//	drop us eu 0.5           lose messages from us to eu with probability
//	heal us eu | heal all    restore links
//	faults us dup=1          FaultyTransport on us's publishes (TALLY_CHAOS_NET syntax)
//	tick 3s                  move the clock
//	antientropy [us ...]     one anti-entropy round from each (default: all)
//	due [us ...]             the exchanges due before the next tick, from
//	                         each: the peers compared with, then status
//	restart us [wipe]        close us (and lose its disk) and open it again
//	expire <us|all>          sweep expired slots
//	read <us|all> item       each replica's view of the item's likes and counter
//	count item               each replica's like count, on one line
//	record <us|all> alice post1      the like record of alice on post1
//	series <us|all> likes post1 step=1m from=T to=T
//	                         a series; the points with entries only
//	window <us|all> counters views from=T to=T   the net change in a window
//	slots <us|all> likes post1 width=1m [from=T to=T] [expired]
//	                         the stored, unexpired slots of one level;
//	                         with expired, also the slots past their
//	                         retention still stored (not yet swept)
//	budget <us|all> b        a budget as each replica sees it
//	metric <us|all> tally_merge_refused_total [reason=expired_bucket]
//	                         a metric's value, summed over matching labels
//	root <us|all>            the root of each replica's digests
//
// In series, window and slots, key * is the family's total.
func Run(t *testing.T, dir string) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		e := New(Config{Dir: t.TempDir()})
		t.Cleanup(e.Close)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return e.Handle(t, d)
		})
	})
}

// Handle runs one command of a script and returns its output.
func (e *Env) Handle(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	var b strings.Builder
	switch d.Cmd {
	case "windows":
		e.Windows = parseWindows(t, d)
		return "ok"

	case "start":
		a := args(t, d, 1)
		e.Add(a...)
		for _, name := range a {
			if _, err := e.Open(name); err != nil {
				t.Fatal(err)
			}
		}
		e.Clock.Advance(2 * Heartbeat) // past the wait for heartbeats
		e.antiEntropy(ctx, e.pick(t, d, 0))
		e.status(&b, e.pick(t, d, 0))

	case "like", "unlike", "incr", "grant", "spend":
		n := e.node(t, d, args(t, d, 1)[0])
		var words []string
		for _, arg := range d.CmdArgs[1:] {
			words = append(words, arg.String()) // at=T and idem=k as written
		}
		op, err := e.parseOp(d.Cmd, words)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		res, err := n.Replica.Apply(ctx, op)
		return result(op, res, err)

	case "batch":
		n := e.node(t, d, args(t, d, 1)[0])
		var ops []region.Op
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			w := strings.Fields(line)
			if len(w) == 0 {
				continue
			}
			op, err := e.parseOp(w[0], w[1:])
			if err != nil {
				d.Fatalf(t, "%s: %v", line, err)
			}
			ops = append(ops, op)
		}
		res, err := n.Replica.Do(ctx, ops)
		if err != nil {
			return fmt.Sprintf("error: %v", err)
		}
		for i, op := range ops {
			fmt.Fprintf(&b, "%s\n", result(op, res[i], res[i].Err))
		}

	case "flush":
		before := e.Net.Pending()
		for _, n := range e.pick(t, d, 0) {
			n.Steps.Flush()
		}
		fmt.Fprintf(&b, "%d messages in flight", e.Net.Pending()-before)

	case "deliver":
		var got int
		if d.HasArg("reverse") {
			got = e.Net.DeliverReversed()
		} else {
			got = e.Net.Deliver()
		}
		e.Merge(ctx)
		fmt.Fprintf(&b, "%d deliveries", got)

	case "cut":
		a := args(t, d, 2)
		if d.HasArg("oneway") {
			e.Net.CutOneWay(a[0], a[1])
		} else {
			e.Net.Cut(a[0], a[1])
		}
		return "ok"

	case "drop":
		a := args(t, d, 3)
		p, err := strconv.ParseFloat(a[2], 64)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		e.Net.SetLoss(a[0], a[1], p)
		return "ok"

	case "heal":
		a := args(t, d, 1)
		if a[0] == "all" {
			e.Net.HealAll()
		} else {
			e.Net.Heal(a[0], args(t, d, 2)[1])
		}
		return "ok"

	case "faults":
		a := args(t, d, 1)
		var kvs []string
		for _, arg := range d.CmdArgs[1:] {
			kvs = append(kvs, arg.String()) // key=value
		}
		spec := strings.Join(kvs, ",")
		if !strings.Contains(spec, "seed=") {
			spec += ",seed=1"
		}
		f, err := replication.ParseChaosNet(spec)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		e.node(t, d, a[0]).Faults.SetFaults(f)
		return "ok"

	case "tick":
		dur, err := parseDuration(args(t, d, 1)[0])
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		e.Clock.Advance(dur)
		return "ok"

	case "antientropy":
		nodes := e.pick(t, d, 0)
		e.antiEntropy(ctx, nodes)
		e.status(&b, nodes)

	case "due":
		nodes := e.pick(t, d, 0)
		for _, n := range nodes {
			ids := n.Steps.Due(ctx)
			if len(ids) == 0 {
				ids = []string{"nothing due"}
			}
			fmt.Fprintf(&b, "%s compared with: %s\n", n.Name, strings.Join(ids, " "))
		}
		e.status(&b, nodes)

	case "restart":
		a := args(t, d, 1)
		e.node(t, d, a[0])
		n, err := e.Restart(a[0], d.HasArg("wipe"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: fresh=%v accepting=%v", n.Name, n.Replica.Fresh(), n.Replica.Accepting())

	case "expire":
		args(t, d, 1)
		for _, n := range e.pick(t, d, 0) {
			got, err := n.Replica.Windows().Expire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: %d slots expired\n", n.Name, got)
		}

	case "read":
		a := args(t, d, 2)
		item := a[len(a)-1]
		for _, n := range e.pickNamed(t, d, a[:len(a)-1]) {
			likes, err := n.Replica.Likes().Count(item)
			if err != nil {
				t.Fatal(err)
			}
			ctr, err := n.Replica.Counters().Get(item)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: likes=%d %s unreconciled=%d; counter=%d %s\n",
				n.Name, likes.Value, likes.Vector.String(), likes.Unreconciled, ctr.Value, ctr.Vector.String())
		}

	case "count":
		item := args(t, d, 1)[0]
		for i, name := range e.names {
			rd, err := e.nodes[name].Replica.Likes().Count(item)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s=%d", name, rd.Value)
		}

	case "record":
		a := args(t, d, 3)
		for _, n := range e.pickNamed(t, d, a[:1]) {
			rec, ok, err := n.Replica.Likes().Record(a[2], a[1])
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				fmt.Fprintf(&b, "%s: none\n", n.Name)
				continue
			}
			at := "stamp"
			if rec.At != 0 {
				at = "client"
			}
			fmt.Fprintf(&b, "%s: liked=%v origin=%s booked=%s (%s time) excess=%d contrib=%s\n",
				n.Name, rec.Liked, rec.Origin, e.fmtTime(rec.BookedMs()), at, rec.Excess(), rec.Contrib.String())
		}

	case "series", "window", "slots":
		a := args(t, d, 3)
		kind, key := parseKind(t, d, a[1]), a[2]
		if key == "*" {
			key = ""
		}
		for _, n := range e.pickNamed(t, d, a[:1]) {
			switch d.Cmd {
			case "series":
				e.series(t, d, &b, n, kind, key)
			case "window":
				e.window(t, d, &b, n, kind, key)
			default:
				e.slots(t, d, &b, n, kind, key)
			}
		}

	case "budget":
		a := args(t, d, 2)
		for _, n := range e.pickNamed(t, d, a[:1]) {
			rd, err := n.Replica.Budgets().Get(a[1])
			if err != nil {
				t.Fatal(err)
			}
			var rights []string
			for _, id := range slices.Sorted(maps.Keys(rd.Rights)) {
				rights = append(rights, fmt.Sprintf("%s:%d", id, rd.Rights[id]))
			}
			fmt.Fprintf(&b, "%s: remaining=%d granted=%d spent=%d rights={%s} unreconciled=%d\n",
				n.Name, rd.Remaining, rd.Granted, rd.Spent, strings.Join(rights, " "), rd.Unreconciled)
		}

	case "metric":
		a := args(t, d, 2)
		for _, n := range e.pickNamed(t, d, a[:1]) {
			v, err := metric(n, a[1], d.CmdArgs[2:])
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s: %v\n", n.Name, v)
		}

	case "root":
		args(t, d, 1)
		for _, n := range e.pick(t, d, 0) {
			fmt.Fprintf(&b, "%s: %016x\n", n.Name, n.Store.Root())
		}

	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	return strings.TrimRight(b.String(), "\n")
}

// node is the named replica; a script naming another is a script bug.
func (e *Env) node(t *testing.T, d *datadriven.TestData, name string) *Node {
	n, ok := e.nodes[name]
	if !ok {
		d.Fatalf(t, "no replica %q", name)
	}
	return n
}

// pick is the replicas named by the command's arguments from i on, or
// every replica if none is named or one is "all".
func (e *Env) pick(t *testing.T, d *datadriven.TestData, i int) []*Node {
	var names []string
	for _, a := range d.CmdArgs[i:] {
		names = append(names, a.Key)
	}
	return e.pickNamed(t, d, names)
}

// pickNamed is the named replicas, or every replica if none is named or
// one is "all".
func (e *Env) pickNamed(t *testing.T, d *datadriven.TestData, names []string) []*Node {
	var out []*Node
	for _, name := range names {
		if name == "all" {
			return e.pickNamed(t, d, nil)
		}
		out = append(out, e.node(t, d, name))
	}
	if len(out) == 0 {
		for _, name := range e.names {
			out = append(out, e.nodes[name])
		}
	}
	return out
}

// args is the command's positional arguments (key=value ones included, as
// written).
func args(t *testing.T, d *datadriven.TestData, n int) []string {
	if len(d.CmdArgs) < n {
		d.Fatalf(t, "%s wants %d arguments", d.Cmd, n)
	}
	out := make([]string, 0, len(d.CmdArgs))
	for _, a := range d.CmdArgs {
		if len(a.Vals) > 0 {
			continue
		}
		out = append(out, a.Key)
	}
	if len(out) < n {
		d.Fatalf(t, "%s wants %d arguments", d.Cmd, n)
	}
	return out
}

// antiEntropy runs one round from each replica, as its anti-entropy loop
// would, deciding recovery for those still holding writes.
func (e *Env) antiEntropy(ctx context.Context, nodes []*Node) {
	for _, n := range nodes {
		n.Steps.AntiEntropy(ctx)
	}
}

// status prints, per replica, whether it accepts writes and how each peer
// compared at its last anti-entropy round.
func (e *Env) status(b *strings.Builder, nodes []*Node) {
	for _, n := range nodes {
		fmt.Fprintf(b, "%s: accepting=%v", n.Name, n.Replica.Accepting())
		for _, p := range n.Rep.Peers() {
			switch {
			case p.Error != "":
				fmt.Fprintf(b, " %s=unreachable", p.Replica)
			case p.ComparedAt == nil:
				fmt.Fprintf(b, " %s=not-compared", p.Replica)
			default:
				fmt.Fprintf(b, " %s=%d-differing", p.Replica, p.DifferingSegments)
			}
		}
		b.WriteString("\n")
	}
}

// parseOp reads one op: its verb, then its positional words and key=value
// options (at=T, idem=k).
func (e *Env) parseOp(verb string, words []string) (region.Op, error) {
	var op region.Op
	var pos []string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			pos = append(pos, w)
			continue
		}
		switch k {
		case "at":
			at, err := e.parseTime(v)
			if err != nil {
				return op, err
			}
			op.At = at
		case "idem":
			op.IdemKey = v
		default:
			return op, fmt.Errorf("%s: unknown option %q", verb, k)
		}
	}
	if len(pos) != 2 {
		return op, fmt.Errorf("%s wants 2 arguments, got %q", verb, pos)
	}
	switch verb {
	case "like", "unlike":
		op.Kind, op.User, op.Item = region.OpLike, pos[0], pos[1]
		if verb == "unlike" {
			op.Kind = region.OpUnlike
		}
		return op, nil
	case "incr", "grant", "spend":
		by, err := strconv.ParseInt(pos[1], 10, 64)
		if err != nil {
			return op, fmt.Errorf("%s: amount: %w", verb, err)
		}
		op.Item, op.By = pos[0], by
		op.Kind = map[string]region.OpKind{"incr": region.OpIncr, "grant": region.OpGrant, "spend": region.OpSpend}[verb]
		return op, nil
	}
	return op, fmt.Errorf("unknown op %q", verb)
}

// result prints what an op did.
func result(op region.Op, res region.Result, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("error: %v", err)
	case op.Kind == region.OpLike || op.Kind == region.OpUnlike:
		return fmt.Sprintf("liked=%v changed=%v count=%d", res.Liked, res.Changed, res.Value)
	case op.Kind == region.OpIncr && res.Duplicate:
		return fmt.Sprintf("value=%d duplicate", res.Value)
	case op.Kind == region.OpIncr:
		return fmt.Sprintf("value=%d", res.Value)
	default:
		dup := ""
		if res.Duplicate {
			dup = " duplicate"
		}
		return fmt.Sprintf("remaining=%d rights=%d%s", res.Value, res.Rights, dup)
	}
}

// parseDuration is time.ParseDuration with days: 15d.
func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %w", s, err)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", s, err)
	}
	return d, nil
}

// parseTime reads a time T in unix ms: now, +d or -d from now, a time of
// day on the clock's first day (15:04:05.999 or 15:04), or RFC 3339.
func (e *Env) parseTime(s string) (int64, error) {
	now := e.Clock.Now()
	switch {
	case s == "now":
		return now.UnixMilli(), nil
	case strings.HasPrefix(s, "+"), strings.HasPrefix(s, "-"):
		d, err := parseDuration(s)
		return now.Add(d).UnixMilli(), err
	case strings.Contains(s, "T"):
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("time %q: %w", s, err)
		}
		return t.UnixMilli(), nil
	}
	t, err := time.Parse("15:04:05.999", s)
	if err != nil {
		t, err = time.Parse("15:04", s)
	}
	if err != nil {
		return 0, fmt.Errorf("time %q: want now, ±duration, 15:04:05.999 or RFC 3339", s)
	}
	day := Start.Truncate(24 * time.Hour)
	return day.Add(t.Sub(t.Truncate(24 * time.Hour))).UnixMilli(), nil
}

// fmtTime prints unix ms as parseTime reads it: a time of day on the
// clock's first day, else RFC 3339.
func (e *Env) fmtTime(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	if t.Truncate(24 * time.Hour).Equal(Start.Truncate(24 * time.Hour)) {
		return t.Format("15:04:05.999")
	}
	return t.Format(time.RFC3339Nano)
}

// timeArg is the command's time argument key, or def if absent.
func (e *Env) timeArg(t *testing.T, d *datadriven.TestData, key string, def int64) int64 {
	arg, ok := d.Arg(key)
	if !ok {
		return def
	}
	ms, err := e.parseTime(arg.SingleVal(t))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return ms
}

// durationArg is the command's duration argument key; it must be there.
func durationArg(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	arg, ok := d.Arg(key)
	if !ok {
		d.Fatalf(t, "%s wants %s=", d.Cmd, key)
	}
	dur, err := parseDuration(arg.SingleVal(t))
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return dur
}

func parseKind(t *testing.T, d *datadriven.TestData, s string) storage.Kind {
	switch s {
	case "likes":
		return storage.Likes
	case "counters":
		return storage.Counters
	}
	d.Fatalf(t, "family %q: want likes or counters", s)
	return 0
}

// parseWindows reads the windows command: past=, future= and
// levels=(width:keep, ...), a level without :keep kept forever.
func parseWindows(t *testing.T, d *datadriven.TestData) *region.WindowConfig {
	wc := &region.WindowConfig{Past: durationArg(t, d, "past"), Future: durationArg(t, d, "future")}
	arg, ok := d.Arg("levels")
	if !ok {
		d.Fatalf(t, "windows wants levels=")
	}
	var levels []region.WindowLevel
	for _, v := range arg.Vals {
		width, keep, _ := strings.Cut(v, ":")
		var l region.WindowLevel
		var err error
		if l.Width, err = parseDuration(width); err != nil {
			d.Fatalf(t, "%v", err)
		}
		if keep != "" {
			if l.Keep, err = parseDuration(keep); err != nil {
				d.Fatalf(t, "%v", err)
			}
		}
		levels = append(levels, l)
	}
	wc.Rules = []region.WindowRule{{Levels: levels}}
	return wc
}

// series prints a series read: its span, and each point with entries.
func (e *Env) series(t *testing.T, d *datadriven.TestData, b *strings.Builder, n *Node, kind storage.Kind, key string) {
	step := durationArg(t, d, "step")
	from, to := e.timeArg(t, d, "from", 0), e.timeArg(t, d, "to", 0)
	w, err := n.Replica.Windows().Series(kind, key, from, to, step)
	if err != nil {
		fmt.Fprintf(b, "%s: error: %v\n", n.Name, err)
		return
	}
	fmt.Fprintf(b, "%s: [%s, %s) step %v of %v slots, %d points%s\n", n.Name, e.fmtTime(w.From.UnixMilli()),
		e.fmtTime(w.To.UnixMilli()), w.Width, w.SlotWidth, len(w.Points), windowFlags(w))
	for _, p := range w.Points {
		if len(p.Vector) > 0 {
			fmt.Fprintf(b, "  %s %+d %s\n", e.fmtTime(p.Start.UnixMilli()), p.Value(), p.Vector.String())
		}
	}
}

// window prints a window read: its span, widened to whole slots, and
// the net change in it.
func (e *Env) window(t *testing.T, d *datadriven.TestData, b *strings.Builder, n *Node, kind storage.Kind, key string) {
	from, to := e.timeArg(t, d, "from", 0), e.timeArg(t, d, "to", 0)
	w, err := n.Replica.Windows().Of(kind, key, from, to)
	if err != nil {
		fmt.Fprintf(b, "%s: error: %v\n", n.Name, err)
		return
	}
	fmt.Fprintf(b, "%s: [%s, %s) of %v slots: %+d %s%s\n", n.Name, e.fmtTime(w.From.UnixMilli()), e.fmtTime(w.To.UnixMilli()),
		w.SlotWidth, w.Sum().Value(), w.Sum().Vector.String(), windowFlags(w))
}

func windowFlags(w region.Window) string {
	var s string
	if w.Closed {
		s += " closed"
	}
	if w.Unreconciled != 0 {
		s += fmt.Sprintf(" unreconciled=%d", w.Unreconciled)
	}
	return s
}

// slots prints the stored slots of one level that have not expired
// by the replica's clock (expired ones are gone by rule, swept or not);
// with the expired argument, the expired slots still stored too, marked.
func (e *Env) slots(t *testing.T, d *datadriven.TestData, b *strings.Builder, n *Node, kind storage.Kind, key string) {
	width := int64(durationArg(t, d, "width") / time.Second)
	// Slot names hold 10 digits of start: the default end is the last.
	from, to := e.timeArg(t, d, "from", 0)/1000, e.timeArg(t, d, "to", 9_999_999_999_000)/1000
	nowMs := n.Replica.Now().UnixMilli()
	var lines []string
	err := n.Store.WindowSeries(kind.Windows(), key, width, from, to, func(bk crdt.Slot, v crdt.Vector) {
		gone := ""
		if bk.Expired(nowMs) {
			if !d.HasArg("expired") {
				return
			}
			gone = " expired"
		}
		keep := "forever"
		if bk.Keep != 0 {
			keep = (time.Duration(bk.Keep) * time.Second).String()
		}
		lines = append(lines, fmt.Sprintf("  %s %+d %s kept %s%s", e.fmtTime(bk.Start*1000), v.Value(), v.String(), keep, gone))
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(b, "%s: %d slots of %v\n", n.Name, len(lines), time.Duration(width)*time.Second)
	for _, l := range lines {
		fmt.Fprintln(b, l)
	}
}

// metric sums the values of a counter or gauge of the replica's metrics
// whose labels match every label=value given.
func metric(n *Node, name string, labels []datadriven.CmdArg) (float64, error) {
	mfs, err := n.Metrics.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather %s's metrics: %w", n.Name, err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, want := range labels {
				if len(want.Vals) != 1 {
					return 0, errors.New("metric: labels are label=value")
				}
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == want.Key && lp.GetValue() == want.Vals[0]
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum, nil
}
