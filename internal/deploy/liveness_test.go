package deploy_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/replication"
)

// Two sharded regions of three replicas, one copy: a replica follows the
// heartbeats of its own region and of the replicas sharing its shards,
// and knows the others live from their region's liveness summary, so
// every replica still sees every peer live and converges on real NATS.
// With us-1's credentials, an attacker cannot publish another replica's
// summary, of its own region or of another.
func TestLivenessSummaryCannotBeForged(t *testing.T) {
	startsShardedRegions(t, "starts six replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us", "eu"}, 3, 1, ""
	d := startConfig(t, cfg)
	urls := d.URLs()
	waitReady(t, urls)
	testkit.WaitFor(t, 60*time.Second, func() error {
		for _, u := range urls {
			_, b, err := testkit.DoJSON("GET", u+"/v1/convergence", "")
			if err != nil {
				return err
			}
			if b["converged"] != true {
				return fmt.Errorf("%s not converged: %v", u, b)
			}
			peers, _ := b["peers"].([]any)
			if len(peers) != 5 {
				return fmt.Errorf("%s knows %d peers, want 5: %v", u, len(peers), b)
			}
			for _, p := range peers {
				if p, _ := p.(map[string]any); p["stale"] == true {
					return fmt.Errorf("%s sees %v stale", u, p["replica"])
				}
			}
		}
		return nil
	})

	nc, violations := connectAsReplica(t, d, "us", "us-1")
	// One summary per region, from its lowest-id replica.
	senders := map[string]bool{}
	sub, err := nc.SubscribeSync("tally.delta.*.*.live")
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if msg, err := sub.NextMsg(time.Until(end)); err == nil {
			senders[msg.Subject] = true
		}
	}
	_ = sub.Unsubscribe()
	if want := map[string]bool{replication.LiveSubject("us", "us-1"): true, replication.LiveSubject("eu", "eu-1"): true}; !maps.Equal(senders, want) {
		t.Fatalf("liveness summaries on %v, want %v", senders, want)
	}
	for _, subject := range []string{replication.LiveSubject("us", "us-2"), replication.LiveSubject("eu", "eu-1"), replication.LiveSubject("eu", "us-1")} {
		if err := nc.Publish(subject, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("us-1's user publishing on %s: %v", subject, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("us-1's user published on %s", subject)
		}
	}
	// Its own summary subject is its to publish on: no violation.
	if err := nc.Publish(replication.LiveSubject("us", "us-1"), []byte("own")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-violations:
		t.Fatalf("us-1's user publishing its own summary: %v", err)
	case <-time.After(time.Second):
	}
}
