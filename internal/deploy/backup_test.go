package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/node"
)

// acked counts the writes each replica acknowledged: likes of one item by
// distinct users, and increments by 1 of one counter, each retried with
// the same user or idempotency key until acknowledged, so each counts
// exactly once.
type acked struct {
	mu    sync.Mutex
	likes map[string]int // by replica URL
	incrs map[string]int
	seq   int
}

func (a *acked) total() (likes, incrs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.likes {
		likes += n
	}
	for _, n := range a.incrs {
		incrs += n
	}
	return likes, incrs
}

func (a *acked) at(u string) (likes, incrs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.likes[u], a.incrs[u]
}

// write likes item "post" as a new user and increments counter "views"
// with a new idempotency key at u, retrying each until it is acknowledged.
func (a *acked) write(u string) error {
	a.mu.Lock()
	a.seq++
	n := a.seq
	a.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for _, op := range []struct{ method, path, body string }{
		{"PUT", fmt.Sprintf("/v1/likes/post/u%d", n), ""},
		{"POST", "/v1/counters/views/incr", fmt.Sprintf(`{"by":1,"idempotency_key":"k%d"}`, n)},
	} {
		for {
			st, b, err := testkit.DoJSON(op.method, u+op.path, op.body)
			if err == nil && st == 200 {
				if op.method == "POST" && b["duplicate"] != false {
					return fmt.Errorf("%s: a first increment with key k%d answered %v", u, n, b)
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s %s%s: %d %v %v", op.method, u, op.path, st, b, err)
			}
		}
	}
	a.mu.Lock()
	a.likes[u]++
	a.incrs[u]++
	a.mu.Unlock()
	return nil
}

// exact checks every replica reads the acknowledged counts, and that the
// vector entry of each replica is what that replica acknowledged: a
// restored replica that counted on from its backup's older entries (its
// increments swallowed by max-merge) or counted anything twice is off.
func (a *acked) exact(urls []string) func() error {
	return func() error {
		likes, incrs := a.total()
		for _, u := range urls {
			for _, c := range []struct {
				path, field string
				want        int
			}{{"/v1/likes/post", "count", likes}, {"/v1/counters/views", "value", incrs}} {
				_, b, err := testkit.DoJSON("GET", u+c.path, "")
				if err != nil {
					return err
				}
				if b[c.field] != float64(c.want) {
					return fmt.Errorf("%s%s: %s %v, want %d", u, c.path, c.field, b[c.field], c.want)
				}
				reps, _ := b["replicas"].(map[string]any)
				for i, id := range []string{"us-1", "eu-1", "ap-1"} {
					own, _ := a.at(urls[i])
					if c.path == "/v1/counters/views" {
						_, own = a.at(urls[i])
					}
					e, _ := reps[id].(map[string]any)
					if e["p"] != float64(own) {
						return fmt.Errorf("%s%s: entry of %s %v, want p %d acknowledged there", u, c.path, id, e, own)
					}
				}
			}
		}
		return nil
	}
}

// A backup taken under load restores safely: us-1 acknowledges writes
// after its backup, its data directory is then replaced by the backup
// while it is cut off from every peer, and it holds writes, past its
// recovery_timeout, until the links heal and it has synced from every
// peer; then it takes writes again, and every replica reads exact counts,
// each replica's own entry being exactly what it acknowledged.
func TestBackupRestoresUnderLoadWithoutDoubleCounting(t *testing.T) {
	startsRegions(t, "starts three regions")
	const recoveryTimeout = 2 * time.Second
	cfg := deploy.DefaultConfig()
	cfg.Node = func(c *node.Config) { c.RecoveryTimeout = recoveryTimeout.String() }
	d := startConfig(t, cfg)
	urls := d.URLs()
	waitReady(t, urls)
	us := urls[0]
	a := &acked{likes: map[string]int{}, incrs: map[string]int{}}

	// Load on every replica; the backup is taken in the middle of it.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(urls))
	for _, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := a.write(u); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		if l, _ := a.at(us); l < 50 {
			return fmt.Errorf("%d likes acknowledged at us-1", l)
		}
		return nil
	})
	backup := filepath.Join(t.TempDir(), "us-1-backup")
	st, b, err := testkit.DoJSON("POST", us+"/v1/admin/backup", fmt.Sprintf(`{"dir":%q}`, backup))
	if err != nil || st != 200 || b["replica"] != "us-1" || b["dir"] != backup || b["files"].(float64) < 1 {
		t.Fatalf("backup: %d %v %v", st, b, err)
	}
	if st, b, _ := testkit.DoJSON("POST", us+"/v1/admin/backup", fmt.Sprintf(`{"dir":%q}`, backup)); st != 409 || b["code"] != "exists" {
		t.Fatalf("a second backup into the same directory: %d %v", st, b)
	}
	// Not into a data directory: this replica's own, nor another
	// replica's under the deployment's root.
	for _, dir := range []string{filepath.Join(d.Configs()[0].DataDir, "b"), filepath.Join(d.Configs()[1].DataDir, "b")} {
		if st, b, _ := testkit.DoJSON("POST", us+"/v1/admin/backup", fmt.Sprintf(`{"dir":%q}`, dir)); st != 400 || b["code"] != "bad_request" {
			t.Fatalf("a backup into %s: %d %v, want 400 bad_request", dir, st, b)
		}
	}
	atBackup, _ := a.at(us)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if l, _ := a.at(us); l < atBackup+50 {
			return fmt.Errorf("%d likes acknowledged at us-1 since the backup", l-atBackup)
		}
		return nil
	})
	stop()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, a.exact(urls))

	// Cut us off, stop us-1, restore its backup, start it again.
	for _, peer := range []string{"eu", "ap"} {
		if st, _, err := testkit.DoJSON("PUT", urls[1]+"/v1/admin/links/us/"+peer, `{"up":false}`); err != nil || st != 200 {
			t.Fatalf("cut us-%s: %d %v", peer, st, err)
		}
	}
	setUp := func(up bool, want string) {
		t.Helper()
		if _, err := d.SetReplicaUp("us-1", up); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 60*time.Second, func() error {
			for _, s := range d.ReplicaStates() {
				if s.Replica == "us-1" && s.State != want {
					return fmt.Errorf("us-1 is %s (%s)", s.State, s.Error)
				}
			}
			return nil
		})
	}
	setUp(false, "down")
	dataDir := d.Configs()[0].DataDir
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, dataDir); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	setUp(true, "up")
	us = d.URLs()[0]
	urls[0] = us
	// Writes elsewhere meanwhile reach us-1 after the heal.
	for range 20 {
		if err := a.write(urls[1]); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, s, err := testkit.DoJSON("GET", us+"/v1/status", "")
		if err != nil {
			return err
		}
		if s["accepting"] != false || s["fresh"] != true {
			t.Fatalf("us-1 restored from a backup, cut off from its peers: %v", s)
		}
		if st, _, _ := testkit.DoJSON("PUT", us+"/v1/likes/post/cut-off", ""); st != 503 {
			t.Fatalf("a like at the restored us-1 before it synced: %d, want 503", st)
		}
		if time.Since(restarted) < 3*recoveryTimeout {
			return fmt.Errorf("holding writes %s since the restart", time.Since(restarted).Round(time.Second))
		}
		return nil
	})
	for _, peer := range []string{"eu", "ap"} {
		if st, _, err := testkit.DoJSON("PUT", urls[1]+"/v1/admin/links/us/"+peer, `{"up":true}`); err != nil || st != 200 {
			t.Fatalf("heal us-%s: %d %v", peer, st, err)
		}
	}
	waitReady(t, urls)
	for range 30 {
		for _, u := range urls {
			if err := a.write(u); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitFor(t, 30*time.Second, a.exact(urls))
	if _, s, err := testkit.DoJSON("GET", us+"/v1/status", ""); err != nil || s["fresh"] != true || s["accepting"] != true {
		t.Fatalf("status of the restored us-1: %v %v", s, err)
	}
}
