package deploy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/natsperm"
)

// TestLocalRunsWithReplicaUsers: a local deployment (`tallyd local`) runs
// with the shipped permission model (issue #27, item 8): a client without
// credentials, or with one replica's, cannot speak as another replica
// (forged heartbeats, hellos, deltas) nor write the allocator's bucket,
// and the replicas, each with its own user, still replicate and fire
// milestones through the lease authority.
func TestLocalRunsWithReplicaUsers(t *testing.T) {
	startsThreeRegions(t, "starts three regions")
	d := startDeployment(t, "every:5")
	urls := d.URLs()
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if code, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || code != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, code, err)
			}
			return nil
		})
	}
	url := d.Cluster().ClientURL("us")
	for who, opts := range map[string][]nats.Option{
		"a client without credentials": nil,
		"us-1's user": {nats.UserInfo(natsperm.ReplicaUser("us-1"), d.NATSPassword(natsperm.ReplicaUser("us-1"))),
			nats.CustomInboxPrefix("_INBOX_us-1")},
	} {
		violations := make(chan error, 16)
		nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))...)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		// tally.route.eu.to.eu-1: a request forged into another region's replica.
		for _, subject := range []string{"tally.id.eu-1", "tally.delta.eu.eu-1", "tally.delta.eu.eu-1.7", "$KV.tally_alloc.seq.likes", "tally.milestone.likes.1000", "tally.route.eu.to.eu-1"} {
			if err := nc.Publish(subject, []byte("forged")); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-violations:
				if !strings.Contains(err.Error(), "Permissions Violation") {
					t.Errorf("%s publishing on %s: %v", who, subject, err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s published on %s", who, subject)
			}
		}
		nc.Close()
	}
	for i := range 12 {
		if code, _, err := testkit.DoJSON("PUT", fmt.Sprintf("%s/v1/likes/post/u%d", urls[i%3], i), ""); err != nil || code != 200 {
			t.Fatalf("like: %d %v", code, err)
		}
	}
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			code, body, err := testkit.DoJSON("GET", u+"/v1/milestones", "")
			if ms, _ := body["milestones"].([]any); err != nil || code != 200 || len(ms) < 2 {
				return fmt.Errorf("%s: milestones %d %v: %v", u, code, body, err)
			}
			return nil
		})
	}
}
