package chaos

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/localnet"
)

// deployment is the system under test: the NATS super-cluster, run in this
// process by localnet with its fault-injecting gateway links, and one tallyd
// process per replica (Config.Replicas per region), run from the binary
// under test.
type deployment struct {
	cfg   Config
	dir   string
	net   *localnet.Cluster
	procs []*proc // in Config.Regions order, each region's replicas in order
	// shardsFile is the config file with the shards block every replica
	// of a sharded run is started with ("" unsharded).
	shardsFile string
	env        []string
	wg         sync.WaitGroup // process reapers
}

// proc is one replica's tallyd process. Its HTTP port is fixed for the
// whole run, so a restarted process keeps its URL.
type proc struct {
	region, replica string
	// view names what this process answers in the checks: its region
	// when each region has one replica, else its replica id, so that a
	// sharded run checks every replica of every region.
	view    string
	dataDir string
	addr    string
	logPath string
	peers   []string
	client  *client

	mu   sync.Mutex    // protects the fields below
	cmd  *exec.Cmd     // nil while down
	done chan struct{} // closed when cmd has been reaped
	// epoch changes at every kill and whenever the process becomes
	// sampleable; a sample taken across a change is discarded.
	epoch uint64
	// sampleable: up, and not recovering from a wiped data dir (whose reads
	// may show its own entries below what it had before the wipe until it
	// has recovered them; that is allowed while it holds writes).
	sampleable bool
	starts     int
	extraEnv   []string // the environment of the first start, kept for restarts
	// lostDead sums tally_milestones_lost_total of this region's earlier
	// processes, scraped just before each was killed (a counter restarts
	// at 0 with its process).
	lostDead float64
}

// IsChaosBuild reports whether binary was built with -tags chaos, which
// message faults and Config.Bug need.
func IsChaosBuild(binary string) (bool, error) {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return false, fmt.Errorf("read build info of %s: %w", binary, err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "chaos") {
			return true, nil
		}
	}
	return false, nil
}

// freePorts reserves n distinct loopback ports by binding them all at once
// and then releasing them.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// childEnv is this process's environment without tally's own variables
// (a write token or a chaos setting of the caller must not leak into the
// processes under test), plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TALLY_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startDeployment starts NATS and every region's process and waits until
// every region is ready. msgFaults is TALLY_CHAOS_NET ("" for none);
// regionEnv adds variables to some regions' environment (tests). On error
// everything started is stopped.
func startDeployment(ctx context.Context, cfg Config, dir, msgFaults string, regionEnv map[string][]string) (_ *deployment, err error) {
	d := &deployment{cfg: cfg, dir: dir}
	defer func() {
		if err != nil {
			d.stop()
		}
	}()
	ncfg := localnet.DefaultConfig()
	ncfg.Regions = cfg.Regions
	ncfg.Dir = filepath.Join(dir, "nats")
	ncfg.Logger = hclog.NewNullLogger()
	// Servers notice a one-way loss by unanswered pings: make that seconds.
	ncfg.PingInterval = time.Second
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if d.net, err = localnet.Start(sctx, ncfg); err != nil {
		return nil, err
	}
	ports, err := freePorts(len(cfg.Regions) * cfg.Replicas)
	if err != nil {
		return nil, err
	}
	var extra []string
	if cfg.Bug != "" && !HarnessBug(cfg.Bug) {
		extra = append(extra, "TALLY_CHAOS_BUG="+cfg.Bug)
	}
	d.env = childEnv(extra...)
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	var all []string
	for _, r := range cfg.Regions {
		for n := 1; n <= cfg.Replicas; n++ {
			all = append(all, replicaName(r, n))
		}
	}
	if cfg.sharded() {
		if d.shardsFile, err = writeShardsConfig(dir, cfg); err != nil {
			return nil, err
		}
	}
	for _, r := range cfg.Regions {
		for n := 1; n <= cfg.Replicas; n++ {
			id := replicaName(r, n)
			view := r
			if cfg.sharded() {
				view = id
			}
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[len(d.procs)]))
			p := &proc{
				region: r, replica: id, view: view, addr: addr,
				peers:   slices.DeleteFunc(slices.Clone(all), func(o string) bool { return o == id }),
				dataDir: filepath.Join(dir, "data", id),
				logPath: filepath.Join(dir, "logs", view+".log"),
				client:  newClient(view, addr, cfg.Workers+8),
			}
			d.procs = append(d.procs, p)
		}
	}
	for i, p := range d.procs {
		var env []string
		if msgFaults != "" {
			// Each region draws its own message faults, from the run's seed.
			env = []string{fmt.Sprintf("TALLY_CHAOS_NET=%s,seed=%d", msgFaults, cfg.Seed*1000+uint64(i))}
		}
		env = append(env, regionEnv[p.region]...)
		if err := d.start(p, env...); err != nil {
			return nil, err
		}
	}
	for _, p := range d.procs {
		if err := d.waitReady(sctx, p); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// proc is region's first replica (its only one, unsharded).
func (d *deployment) proc(region string) *proc {
	for _, p := range d.procs {
		if p.region == region {
			return p
		}
	}
	return nil
}

// views are every process's view (proc.view), in order: what the checks
// read and compare.
func (d *deployment) views() []string {
	out := make([]string, len(d.procs))
	for i, p := range d.procs {
		out[i] = p.view
	}
	return out
}

// target is the replica an episode of kill, wipe or pause hits: its
// Replica, else its region's first.
func (d *deployment) target(e Episode) *proc {
	if e.Replica == "" {
		return d.proc(e.Region)
	}
	for _, p := range d.procs {
		if p.replica == e.Replica {
			return p
		}
	}
	return nil
}

// writeShardsConfig writes the HCL config of a sharded run's replicas:
// every region's replicas, each shard held by cfg.Copies of them.
func writeShardsConfig(dir string, cfg Config) (string, error) {
	var b strings.Builder
	if cfg.RequestTimeout > 0 {
		fmt.Fprintf(&b, "request_timeout = %q\n", cfg.RequestTimeout.String())
	}
	fmt.Fprintf(&b, "shards {\n  copies = %d\n", cfg.Copies)
	for _, r := range cfg.Regions {
		var ids []string
		for n := 1; n <= cfg.Replicas; n++ {
			ids = append(ids, strconv.Quote(replicaName(r, n)))
		}
		fmt.Fprintf(&b, "  region %q {\n    replicas = [%s]\n  }\n", r, strings.Join(ids, ", "))
	}
	b.WriteString("}\n")
	path := filepath.Join(dir, "shards.hcl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("write the shards config: %w", err)
	}
	return path, nil
}

// start runs a region's process on its data dir.
func (d *deployment) start(p *proc, extraEnv ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: already running", p.view)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.view, err)
	}
	p.starts++
	fmt.Fprintf(logf, "=== chaos: start %d of %s at %s\n", p.starts, p.view, time.Now().Format(time.RFC3339Nano))
	args := []string{"serve"}
	if d.shardsFile != "" {
		args = append(args, "--config", d.shardsFile)
	}
	args = append(args,
		"--region", p.region, "--replica", p.replica, "--data", p.dataDir,
		"--listen", p.addr, "--nats", d.net.ClientURL(p.region),
		"--peers", strings.Join(p.peers, ","),
		// A retired replica with no state: forge episodes forge it.
		"--retired", retiredReplica,
		"--anti-entropy-interval", d.cfg.AntiEntropyInterval.String(),
		"--peer-timeout", d.cfg.PeerTimeout.String(),
		"--windows", windowLevels,
		"--approx", approxArg(),
		"--log-level", "warn", "--drain-delay", "0")
	if d.cfg.Hot != "" {
		args = append(args, "--hot", d.cfg.Hot)
	}
	if d.cfg.numbering() {
		// The allocator's KV and the milestone stream live in the first
		// region, as tallyd local and a production deployment pin them.
		args = append(args, "--milestones", d.cfg.Milestones, "--alloc-cluster", d.cfg.Regions[0])
		if d.cfg.LeaseTTL > 0 {
			args = append(args, "--lease-ttl", d.cfg.LeaseTTL.String())
		}
	}
	cmd := exec.Command(d.cfg.Binary, args...)
	if p.starts == 1 {
		p.extraEnv = extraEnv
	}
	cmd.Env = append(slices.Clone(d.env), p.extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", p.view, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	return nil
}

// setEnv replaces the extra environment of a region's next starts.
func (p *proc) setEnv(env ...string) {
	p.mu.Lock()
	p.extraEnv = env
	p.mu.Unlock()
}

// kill sends SIGKILL to a region's process and reaps it. It first reads
// the process's count of lost milestone claims, which dies with it; then,
// if aim is not nil, it calls aim, which returns at the moment to kill.
func (d *deployment) kill(p *proc, aim func()) error {
	if d.cfg.numbering() && p.running() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if lost, err := p.client.lostClaims(ctx); err == nil {
			p.mu.Lock()
			p.lostDead += lost
			p.mu.Unlock()
		}
		cancel()
	}
	if aim != nil {
		aim()
	}
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.sampleable = false
	p.epoch++
	p.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("kill %s: not running", p.view)
	}
	err := cmd.Process.Kill()
	<-done
	p.client.dropConns()
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.view, err)
	}
	return nil
}

// waitExit waits until a region's process exits by itself (a crash it was
// told to have) and reaps it, as kill would. It returns how the process
// ended (e.g. "signal: killed").
func (d *deployment) waitExit(ctx context.Context, p *proc) (string, error) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return "", fmt.Errorf("wait for %s to exit: not running", p.view)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return "", fmt.Errorf("wait for %s to exit: %w", p.view, ctx.Err())
	}
	p.mu.Lock()
	p.cmd = nil
	p.sampleable = false
	p.epoch++
	p.mu.Unlock()
	p.client.dropConns()
	return cmd.ProcessState.String(), nil
}

// pause stops (SIGSTOP) or continues (SIGCONT) a region's process.
func (d *deployment) pause(p *proc, stop bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("pause %s: not running", p.view)
	}
	if err := pauseProcess(p.cmd.Process, stop); err != nil {
		return fmt.Errorf("pause %s: %w", p.view, err)
	}
	return nil
}

// terminate stops a process gracefully (SIGTERM), or kills it after grace.
func (d *deployment) terminate(p *proc, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.sampleable = false
	p.epoch++
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = pauseProcess(cmd.Process, false) // a paused process must see it
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	p.client.close()
}

// running reports whether the process is up (started and not killed).
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// waitReady waits until the region's /readyz says 200, then makes it
// sampleable. It fails early if the process exits.
func (d *deployment) waitReady(ctx context.Context, p *proc) error {
	p.mu.Lock()
	done := p.done
	up := p.cmd != nil
	p.mu.Unlock()
	if !up {
		return fmt.Errorf("wait for %s: not running", p.view)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !p.client.ready(ctx) {
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting; log tail:\n%s", p.view, p.logTail(20))
		case <-ctx.Done():
			return fmt.Errorf("wait for %s to be ready: %w", p.view, ctx.Err())
		case <-t.C:
		}
	}
	p.setSampleable()
	return nil
}

func (p *proc) setSampleable() {
	p.mu.Lock()
	p.sampleable = true
	p.epoch++
	p.mu.Unlock()
}

// sampleState returns whether the process may be sampled and its epoch.
func (p *proc) sampleState() (bool, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sampleable, p.epoch
}

// logTail returns the last n lines of the region's log.
func (p *proc) logTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// healLinks brings every link up with no drop and no latency.
func (d *deployment) healLinks() error {
	var errs []error
	for i, a := range d.cfg.Regions {
		for _, b := range d.cfg.Regions[i+1:] {
			errs = append(errs, d.net.SetLink(a, b, true),
				d.net.SetDrop(a, b, false), d.net.SetDrop(b, a, false),
				d.net.SetLatency(a, b, 0), d.net.SetLatency(b, a, 0))
		}
	}
	return errors.Join(errs...)
}

// stop terminates every process and NATS. Idempotent.
func (d *deployment) stop() {
	var wg sync.WaitGroup
	for _, p := range d.procs {
		wg.Go(func() { d.terminate(p, 20*time.Second) })
	}
	wg.Wait()
	d.wg.Wait()
	if d.net != nil {
		_ = d.net.Close()
	}
}
