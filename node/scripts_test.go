package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/replication/replicationtest"
	"github.com/tally-dev/tally/resp"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/shard"
)

// The scripts under testdata/shards run one sharded region, us, on the
// in-memory network of package replicationtest (real stores, replication
// driven by hand, a clock that moves only when told). Each replica runs
// node's own shard watch (following the stored map), router (choosing a
// holder, answering forwarded requests) and move state, and the HTTP API,
// with the shard map bucket and NATS replaced by a store of maps and a
// transport in memory; MoveShards runs against them, each of its polls
// one round of the network. Commands (besides replicationtest's: start,
// restart, tick, flush, deliver, antientropy, windows, ...):
//
//	region replicas=us-1,us-2,us-3 copies=2 [hot=h:4] [lists] [log] [token=T] [approx=p:0.01]
//	                              seed the store with the assigned map (the
//	                              replicas keep like lists, the event log;
//	                              counters under p are approximate)
//	seed replicas=... copies=N    SeedShardMap of another map
//	map                           the stored map, and the one each replica serves by
//	pick holders=us-2,us-3 [prefix=k] [moves-to=us-1,us-2 replicas=... copies=N [drain=R]]
//	                              a key whose shard's holders are tried in
//	                              that order (and whose holders in the
//	                              target map are those, sorted)
//	http R METHOD PATH            an HTTP request at replica R (body: the input)
//	resp R CMD ARGS...            a RESP command at R's front door (a loopback
//	                              port; forwarding stays in memory)
//	state R down|stuck|stuck-applied|ok
//	                              how R takes forwarded requests (stuck: no
//	                              answer in time; stuck-applied: the same,
//	                              after applying); down: nor hears the store
//	                              of maps
//	wire                          what went over the wire between the
//	                              replicas since the last wire: typed
//	                              reads or writes, or a typed gathered read
//	counter KEY                   the value of a counter at each replica
//	                              keeping its shard (serving, joining,
//	                              leaving it)
//	stored R KEY                  what R's store holds of a counter, whatever
//	                              R keeps: its value and vector
//	round [N]                     N polls of the network: the clock moves 1s,
//	                              every replica flushes, all is delivered and
//	                              merged, one anti-entropy round each
//	move replicas=... copies=N [drain=R,...] [cut=join|switch|settle] [start=R,...] [down=R]
//	                              MoveShards to that map; cut: the mover is
//	                              killed once it wrote that step's map;
//	                              start: replicas joining the region, started
//	                              once the join map lists them; down: that
//	                              replica goes down as the cut step's map is
//	                              written, before it hears it
func TestShardScripts(t *testing.T) {
	datadriven.Walk(t, "../testdata/shards", func(t *testing.T, path string) {
		s := newShardScripts(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return s.handle(t, d) })
	})
}

// scriptRegion is the region of the scripts.
const scriptRegion = "us"

// scriptTimeout is the replicas' request timeout: a replica that left
// shards compares them after it, on the script's clock.
const scriptTimeout = 2 * time.Second

type shardScripts struct {
	t      *testing.T
	env    *replicationtest.Env
	store  *memShardMaps
	hot    shard.Hot
	approx []region.ApproxRule // region approx=p:e
	copies int
	lists  bool // the replicas keep like lists (region lists=true)
	log    bool // the replicas keep the event log (region log=true)
	// token is every replica's read, write and admin token (region
	// token=T); http sends it with token=T.
	token string

	mu     sync.Mutex
	states map[string]string // replica -> how it takes forwarded requests
	reps   map[string]*scriptReplica
	sent   []string // what went over the wire since the last "wire" command
}

// scriptReplica is what node runs of one replica.
type scriptReplica struct {
	name   string
	node   *replicationtest.Node // the one wired; a restart opens another
	watch  *shardWatch
	router *shardRouter
	api    *httpapi.Server
	resp   *resp.Server  // on a loopback port
	client *redis.Client // a client of resp
}

// closeFront stops r's RESP server and client.
func (r *scriptReplica) closeFront() {
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.resp != nil {
		_ = r.resp.Close(context.Background())
	}
}

func newShardScripts(t *testing.T) *shardScripts {
	s := &shardScripts{t: t, states: map[string]string{}, reps: map[string]*scriptReplica{}}
	s.store = &memShardMaps{entries: map[string]*memEntry{}, onPut: s.follow}
	s.env = replicationtest.New(replicationtest.Config{
		Dir:         t.TempDir(),
		Region:      s.openRegion,
		Replication: s.openReplication,
	})
	t.Cleanup(func() {
		for _, r := range s.reps {
			r.closeFront()
			r.router.close()
			r.watch.stop()
		}
		s.env.Close()
	})
	return s
}

// openRegion runs as replicationtest opens a replica: its shard watch
// reads the store (a restart takes the stored map, as startShardWatch
// does) and its router serves by the map the watch adopted.
func (s *shardScripts) openRegion(rc *region.Config) {
	name := rc.Replica
	rc.Region = scriptRegion
	rc.LikeLists = s.lists
	rc.EventLog = s.log
	if len(s.approx) > 0 {
		rc.Approx, rc.Seed = s.approx, 1 // one seed: the steps counted are the script's
	}
	if old := s.reps[name]; old != nil {
		old.closeFront()
		old.router.close()
		old.watch.stop()
	}
	cfg := s.config(name)
	log := hclog.NewNullLogger()
	w, err := newShardWatch(cfg, nil, s.env.Clock.Now, log)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, m := range s.store.maps() {
		w.stored[m.Region] = m
	}
	if err := w.adopt(); err != nil {
		s.t.Fatal(err)
	}
	w.publish()
	sr := newShardRouter(scriptRegion, name, w.own, nil, memTransport{s}, s.env.Clock.Now, scriptTimeout, log)
	w.serveBy(sr.update)
	rc.Holds = sr.Holds
	s.mu.Lock()
	s.reps[name] = &scriptReplica{name: name, watch: w, router: sr}
	s.mu.Unlock()
}

// openReplication gives the replica's replication the watch's view.
func (s *shardScripts) openReplication(rc *replication.Config) {
	rc.Shards = s.reps[rc.Replica.ID()].watch
}

// config is replica name's node config: region us of the stored map's
// replicas and name.
func (s *shardScripts) config(name string) Config {
	replicas := []string{name}
	for _, m := range s.store.maps() {
		replicas = append(replicas, m.Replicas()...)
	}
	slices.Sort(replicas)
	cfg := Config{Region: scriptRegion, Replica: name, RequestTimeout: scriptTimeout.String(),
		Shards: &ShardsConfig{Copies: s.copies, Regions: []ShardRegion{{Name: scriptRegion, Replicas: slices.Compact(replicas)}}}}
	return cfg
}

// wire finishes each replica opened since the last command: its router
// answers with its API once it accepts writes, and its watch asks its
// replication whether shards it leaves are released, and drops them.
func (s *shardScripts) wire() {
	for _, name := range s.env.Names() {
		n, r := s.env.Node(name), s.reps[name]
		if n == nil || r == nil || r.node == n {
			continue
		}
		nd := &Node{cfg: s.config(name), rep: n.Rep, replica: n.Replica, shardMaps: r.watch, log: hclog.NewNullLogger()}
		r.router.accepted = n.Replica.Accepted()
		r.router.do = n.Replica.Do
		r.router.rep = n.Replica
		r.router.stale = n.Rep
		r.router.moveState = nd.moveState
		r.watch.peersBy(n.Rep.AddPeers)
		r.watch.dropBy(nd.released, nd.dropShards, nd.handOffShards, false)
		api, err := httpapi.New(httpapi.Config{Replica: n.Replica, Shards: r.router, Hot: s.hot, Version: "test",
			RequestTimeout: scriptTimeout, Replication: n.Rep, ReadToken: s.token, WriteToken: s.token, AdminToken: s.token})
		if err != nil {
			s.t.Fatal(err)
		}
		r.router.api = api
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.t.Fatal(err)
		}
		rs, err := resp.New(resp.Config{Replica: n.Replica, Listener: ln, Shards: respShards{r.router}, Hot: s.hot,
			RequestTimeout: scriptTimeout, Union: api.UniquesUnion, Logger: hclog.NewNullLogger()})
		if err != nil {
			s.t.Fatal(err)
		}
		client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, Protocol: 2})
		s.mu.Lock()
		r.api, r.node, r.resp, r.client = api, n, rs, client
		s.mu.Unlock()
	}
}

// follow is the bucket's watch at every replica: the stored map of
// region changed.
func (s *shardScripts) follow(m shard.Map) {
	for _, name := range s.env.Names() {
		r := s.reps[name]
		if r == nil || s.state(name) == "down" {
			continue // a replica that is down hears nothing
		}
		before := map[string]uint64{}
		for reg, sm := range r.watch.stored {
			before[reg] = sm.Revision
		}
		r.watch.stored[m.Region] = m
		r.watch.changed(before)
	}
}

// round is one poll of the network: the clock moves d, every replica
// publishes its outbox, every message is delivered and merged, and each
// replica runs one anti-entropy round.
func (s *shardScripts) round(d time.Duration) {
	ctx := context.Background()
	s.env.Clock.Advance(d)
	for _, name := range s.env.Names() {
		if n := s.env.Node(name); n != nil {
			n.Steps.Flush()
		}
	}
	s.env.Net.Deliver()
	s.env.Merge(ctx)
	for _, name := range s.env.Names() {
		if n := s.env.Node(name); n != nil {
			n.Steps.AntiEntropy(ctx)
		}
	}
	s.env.Net.Deliver()
	s.env.Merge(ctx)
}

func (s *shardScripts) handle(t *testing.T, d *datadriven.TestData) string {
	s.wire()
	defer s.wire()
	arg := func(key string) (string, bool) {
		for _, a := range d.CmdArgs {
			if a.Key == key {
				return strings.Join(a.Vals, ","), true
			}
		}
		return "", false
	}
	need := func(key string) string {
		v, ok := arg(key)
		if !ok {
			d.Fatalf(t, "%s needs %s=", d.Cmd, key)
		}
		return v
	}
	target := func() shard.Map {
		copies, err := strconv.Atoi(need("copies"))
		if err != nil {
			d.Fatalf(t, "copies: %v", err)
		}
		replicas := strings.Split(need("replicas"), ",")
		var m shard.Map
		if drain, ok := arg("drain"); ok {
			m, err = shard.Drained(scriptRegion, replicas, copies, strings.Split(drain, ",")...)
		} else {
			m, err = shard.Assign(scriptRegion, replicas, copies)
		}
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		return m
	}
	ctx := context.Background()
	switch d.Cmd {
	case "region":
		m := target()
		s.copies = m.Copies
		s.lists = d.HasArg("lists")
		s.log = d.HasArg("log")
		s.token, _ = arg("token")
		if h, ok := arg("hot"); ok {
			prefix, parts, _ := strings.Cut(h, ":")
			n, err := strconv.Atoi(parts)
			if err != nil {
				d.Fatalf(t, "hot: %v", err)
			}
			s.hot = shard.Hot{{Prefix: prefix, Parts: n}}
		}
		if a, ok := arg("approx"); ok {
			prefix, e, _ := strings.Cut(a, ":")
			relErr, err := strconv.ParseFloat(e, 64)
			if err != nil {
				d.Fatalf(t, "approx: %v", err)
			}
			s.approx = []region.ApproxRule{{Prefix: prefix, Error: relErr}}
		}
		stored, wrote, err := SeedShardMap(ctx, s.store, m)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("seeded=%v revision %d", wrote, stored.Revision)

	case "seed":
		stored, wrote, err := SeedShardMap(ctx, s.store, target())
		out := fmt.Sprintf("wrote=%v stored revision %d", wrote, stored.Revision)
		if errors.Is(err, ErrShardMapDiffers) {
			out += "\nrefused: the stored shard map differs"
		} else if err != nil {
			out += "\nerror: " + err.Error()
		}
		return out

	case "map":
		return s.describe()

	case "pick":
		want := need("holders")
		prefix, ok := arg("prefix")
		if !ok {
			prefix = "k"
		}
		m := s.stored()
		to, moving := arg("moves-to")
		var next shard.Map
		if moving {
			next = target()
		}
		for i := range 10000 {
			key := prefix + strconv.Itoa(i)
			sh := shard.Of(key)
			if strings.Join(m.Preferred(sh), ",") != want || moving && strings.Join(next.Holders(sh), ",") != to {
				continue
			}
			return fmt.Sprintf("%s (shard %d)", key, sh)
		}
		return "none"

	case "state":
		if len(d.CmdArgs) != 2 {
			d.Fatalf(t, "state R HOW")
		}
		s.mu.Lock()
		s.states[d.CmdArgs[0].Key] = d.CmdArgs[1].Key
		s.mu.Unlock()
		return "ok"

	case "http":
		// http R METHOD PATH [token=T]
		if len(d.CmdArgs) < 3 {
			d.Fatalf(t, "http R METHOD PATH [token=T]")
		}
		token, _ := arg("token")
		return s.http(t, d, d.CmdArgs[0].Key, d.CmdArgs[1].Key, d.CmdArgs[2].String(), token, d.Input)

	case "wire":
		s.mu.Lock()
		sent := s.sent
		s.sent = nil
		s.mu.Unlock()
		if len(sent) == 0 {
			return "nothing"
		}
		// Sorted: a read of a split item asks its parts' holders at
		// once, in whatever order the goroutines run.
		slices.Sort(sent)
		return strings.Join(sent, "\n")

	case "resp":
		if len(d.CmdArgs) < 2 {
			d.Fatalf(t, "resp R COMMAND ARGS...")
		}
		r := s.reps[d.CmdArgs[0].Key]
		var cmd []any
		for _, a := range d.CmdArgs[1:] {
			cmd = append(cmd, a.String())
		}
		v, err := r.client.Do(ctx, cmd...).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return "(nil)"
		case err != nil:
			return "error: " + err.Error()
		}
		return fmt.Sprint(v)

	case "respraw":
		// respraw R [proto=3] COMMAND ARGS...: the reply's bytes as they
		// came, on a new connection (after HELLO 3 with proto=3).
		if len(d.CmdArgs) < 2 {
			d.Fatalf(t, "respraw R [proto=3] COMMAND ARGS...")
		}
		args := d.CmdArgs[1:]
		var cmds [][]string
		if args[0].Key == "proto" {
			cmds = append(cmds, []string{"HELLO", args[0].Vals[0]})
			args = args[1:]
		}
		var cmd []string
		for _, a := range args {
			cmd = append(cmd, a.String())
		}
		return fmt.Sprintf("%q", rawReplies(t, s.reps[d.CmdArgs[0].Key].resp.Addr().String(), append(cmds, cmd))[len(cmds)])

	case "counter":
		if len(d.CmdArgs) != 1 {
			d.Fatalf(t, "counter KEY")
		}
		key := d.CmdArgs[0].Key
		m := s.stored()
		var b strings.Builder
		fmt.Fprintf(&b, "shard %d, held by %s\n", shard.Of(key), strings.Join(m.Holders(shard.Of(key)), " "))
		for _, name := range s.env.Names() {
			sh := shard.Of(key)
			held, joining, leaving := m.Held(name), m.Joining(name), m.Leaving(name)
			c, err := s.env.Node(name).Replica.Counters().Get(key)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			switch {
			case held.Has(sh):
				fmt.Fprintf(&b, "%s: %d\n", name, c.Value)
			case joining.Has(sh):
				fmt.Fprintf(&b, "%s: %d (joining)\n", name, c.Value)
			case leaving.Has(sh):
				fmt.Fprintf(&b, "%s: %d (leaving, a passive copy)\n", name, c.Value)
			default:
				fmt.Fprintf(&b, "%s: keeps nothing of the shard\n", name)
			}
		}
		return strings.TrimSpace(b.String())

	case "stored":
		if len(d.CmdArgs) != 2 {
			d.Fatalf(t, "stored R KEY")
		}
		c, err := s.env.Node(d.CmdArgs[0].Key).Replica.Counters().Get(d.CmdArgs[1].Key)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		return fmt.Sprintf("%d %s", c.Value, c.Vector.String())

	case "round":
		n := 1
		if len(d.CmdArgs) == 1 {
			var err error
			if n, err = strconv.Atoi(d.CmdArgs[0].Key); err != nil {
				d.Fatalf(t, "round N: %v", err)
			}
		}
		for range n {
			s.round(time.Second)
		}
		return "ok"

	case "move":
		cut, _ := arg("cut")
		joins, _ := arg("start")
		down, _ := arg("down")
		return s.move(t, d, target(), cut, joins, down)
	}
	return s.env.Handle(t, d)
}

// stored is the stored map of the region.
func (s *shardScripts) stored() shard.Map {
	for _, m := range s.store.maps() {
		if m.Region == scriptRegion {
			return m
		}
	}
	s.t.Fatal("no stored shard map")
	return shard.Map{}
}

// describe writes the stored map and each replica's own.
func (s *shardScripts) describe() string {
	m := s.stored()
	var b strings.Builder
	fmt.Fprintf(&b, "stored revision %d, copies %d\n", m.Revision, m.Copies)
	for _, r := range m.Replicas() {
		held, joining, leaving := m.Held(r), m.Joining(r), m.Leaving(r)
		fmt.Fprintf(&b, "  %s: serves %d", r, held.Len())
		if joining.Len() > 0 {
			fmt.Fprintf(&b, ", joining %d", joining.Len())
		}
		if leaving.Len() > 0 {
			fmt.Fprintf(&b, ", leaving %d", leaving.Len())
		}
		b.WriteString("\n")
	}
	for _, name := range s.env.Names() {
		if r := s.reps[name]; r != nil {
			fmt.Fprintf(&b, "%s serves by revision %d\n", name, r.router.Map().Revision)
		}
	}
	return strings.TrimSpace(b.String())
}

// http serves one request at replica name's API and writes its answer.
func (s *shardScripts) http(t *testing.T, d *datadriven.TestData, name, method, path, token, body string) string {
	r := s.reps[name]
	if r == nil || r.api == nil {
		d.Fatalf(t, "no replica %q", name)
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	r.api.ServeHTTP(rec, req)
	out := fmt.Sprintf("%d", rec.Code)
	if by := rec.Header().Get(httpapi.ServedByHeader); by != "" {
		out += " served by " + by
	}
	return out + "\n" + strings.TrimSpace(rec.Body.String())
}

// move runs MoveShards to target, each poll one round of the network;
// cut names the step after whose map the mover is killed.
func (s *shardScripts) move(t *testing.T, d *datadriven.TestData, target shard.Map, cut, joins, down string) string {
	var b strings.Builder
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	s.store.mu.Lock()
	s.store.writing = func(m shard.Map) {
		if cut != "" && mapStep(m) == cut && down != "" {
			fmt.Fprintf(&b, "%s goes down before it hears the %s map\n", down, cut)
			s.mu.Lock()
			s.states[down] = "down"
			s.mu.Unlock()
		}
	}
	s.store.wrote = func(m shard.Map) {
		if cut != "" && mapStep(m) == cut {
			fmt.Fprintf(&b, "the mover is killed after writing the %s map\n", cut)
			kill()
		}
	}
	s.store.mu.Unlock()
	defer func() {
		s.store.mu.Lock()
		s.store.writing, s.store.wrote = nil, nil
		s.store.mu.Unlock()
	}()
	polls := 0
	res, err := MoveShards(ctx, MoveConfig{
		KV:     s.store,
		Target: target,
		Status: func(ctx context.Context) (api.ShardMap, error) {
			if err := ctx.Err(); err != nil {
				return api.ShardMap{}, err
			}
			return s.status(t, d)
		},
		Poll: time.Second,
		Now:  s.env.Clock.Now,
		Wait: func(ctx context.Context, p time.Duration) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if polls++; polls > 100 {
				return errors.New("still waiting after 100 polls")
			}
			s.round(p)
			return nil
		},
		Progress: func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) },
		Joined: func(ctx context.Context, join shard.Map) error {
			for _, name := range strings.Split(joins, ",") {
				if name == "" || s.env.Node(name) != nil {
					continue
				}
				s.env.Add(name)
				if _, err := s.env.Open(name); err != nil {
					return err
				}
				fmt.Fprintf(&b, "%s started, listed by the join map\n", name)
			}
			s.wire()
			return nil
		},
	})
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	} else {
		fmt.Fprintf(&b, "moved %d shard copies; synced in %s, released in %s\n", res.Moved, res.Synced, res.Released)
	}
	return strings.TrimSpace(b.String())
}

// mapStep is the step of a move whose map m is: join, switch (some
// replica keeps shards it left) or settle.
func mapStep(m shard.Map) string {
	if m.Moving() {
		return "join"
	}
	if hasLeaving(m) {
		return "switch"
	}
	return "settle"
}

// status is GET /v1/shards at the first replica of the stored map that
// is up, as the mover reads it.
func (s *shardScripts) status(t *testing.T, d *datadriven.TestData) (api.ShardMap, error) {
	for _, name := range s.stored().Replicas() {
		r := s.reps[name]
		if r == nil || r.api == nil || s.state(name) == "down" {
			continue
		}
		rec := httptest.NewRecorder()
		r.api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/shards", nil))
		var m api.ShardMap
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != http.StatusOK {
			d.Fatalf(t, "GET /v1/shards: %d %s", rec.Code, rec.Body)
		}
		return m, nil
	}
	return api.ShardMap{}, errors.New("no replica up")
}

func (s *shardScripts) state(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.states[name]
}

// memTransport carries forwarded requests to the replicas' routers, each
// as its state says.
type memTransport struct{ s *shardScripts }

func (m memTransport) Request(ctx context.Context, replica string, data []byte) ([]byte, error) {
	m.s.mu.Lock()
	r, how := m.s.reps[replica], m.s.states[replica]
	m.s.mu.Unlock()
	if r == nil || r.api == nil || how == "down" {
		return nil, route.ErrNoResponders
	}
	if how == "stuck" {
		return nil, fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)
	}
	m.s.mu.Lock()
	m.s.sent = append(m.s.sent, "to "+replica+": "+sentKind(data))
	m.s.mu.Unlock()
	a, ok := r.router.handle(data)
	if !ok || how == "stuck-applied" {
		return nil, fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)
	}
	return a.Marshal(), nil
}

// sentKind says what a forwarded request is: typed reads or writes, or
// a typed gathered read.
func sentKind(data []byte) string {
	req, err := route.UnmarshalRequest(data)
	switch {
	case err != nil:
		return "malformed: " + err.Error()
	case req.Kind == route.KindOps && reads(req):
		return "typed reads"
	case req.Kind == route.KindOps:
		return "typed writes"
	case req.Kind == route.KindQuestion:
		return "typed gathered " + req.Question.Asked.String()
	}
	return fmt.Sprintf("kind %d", req.Kind)
}

// memShardMaps is a store of shard maps in memory, as the shard map
// bucket keeps them: one revision sequence for every key,
// compare-and-swap writes, and a watch (onPut) that hears each map
// written.
type memShardMaps struct {
	mu       sync.Mutex
	entries  map[string]*memEntry
	revision uint64
	onPut    func(shard.Map)
	writing  func(shard.Map) // the script's, before onPut
	wrote    func(shard.Map) // the script's, after onPut
}

type memEntry struct {
	key      string
	value    []byte
	revision uint64
}

func (e *memEntry) Bucket() string                  { return ShardsBucket }
func (e *memEntry) Key() string                     { return e.key }
func (e *memEntry) Value() []byte                   { return e.value }
func (e *memEntry) Revision() uint64                { return e.revision }
func (e *memEntry) Created() time.Time              { return time.Time{} }
func (e *memEntry) Delta() uint64                   { return 0 }
func (e *memEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

func (kv *memShardMaps) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	e, ok := kv.entries[key]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (kv *memShardMaps) Create(ctx context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return kv.put(key, value, 0)
}

func (kv *memShardMaps) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	return kv.put(key, value, revision)
}

// put writes value at key if its revision is still revision (0: none).
func (kv *memShardMaps) put(key string, value []byte, revision uint64) (uint64, error) {
	kv.mu.Lock()
	cur, ok := kv.entries[key]
	if ok && cur.revision != revision || !ok && revision != 0 {
		kv.mu.Unlock()
		return 0, jetstream.ErrKeyExists
	}
	kv.revision++
	e := &memEntry{key: key, value: slices.Clone(value), revision: kv.revision}
	kv.entries[key] = e
	onPut, writing, wrote := kv.onPut, kv.writing, kv.wrote
	kv.mu.Unlock()
	m, err := decodeShardMap(e)
	if err != nil {
		return 0, err
	}
	if writing != nil {
		writing(m)
	}
	if onPut != nil {
		onPut(m)
	}
	if wrote != nil {
		wrote(m)
	}
	return e.revision, nil
}

// maps are the stored maps, decoded.
func (kv *memShardMaps) maps() []shard.Map {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	var out []shard.Map
	for _, e := range kv.entries {
		if m, err := decodeShardMap(e); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// rawReplies sends cmds to the RESP server at addr on one connection and
// returns each reply's bytes as they came.
func rawReplies(t *testing.T, addr string, cmds [][]string) [][]byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out [][]byte
	var buf []byte
	for _, cmd := range cmds {
		req := fmt.Appendf(nil, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		for {
			if n := replyLen(buf); n > 0 {
				out = append(out, buf[:n])
				buf = buf[n:]
				break
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			more := make([]byte, 4096)
			n, err := c.Read(more)
			if err != nil {
				t.Fatalf("reading the reply to %v: %v", cmd, err)
			}
			buf = append(buf, more[:n]...)
		}
	}
	return out
}

// replyLen is the length of the RESP 2 or 3 reply at the start of b, 0
// until it is complete.
func replyLen(b []byte) int {
	i := bytes.Index(b, []byte("\r\n"))
	if i < 1 {
		return 0
	}
	n, _ := strconv.Atoi(string(b[1:i]))
	head := i + 2
	switch b[0] {
	case '$', '=', '!', '#':
		if n < 0 || b[0] == '#' {
			return head
		}
		if len(b) < head+n+2 {
			return 0
		}
		return head + n + 2
	case '*', '~', '>', '%', '|':
		if b[0] == '%' || b[0] == '|' {
			n *= 2
		}
		at := head
		for range max(n, 0) {
			m := replyLen(b[at:])
			if m == 0 {
				return 0
			}
			at += m
		}
		return at
	}
	return head // + - : _ , (
}
