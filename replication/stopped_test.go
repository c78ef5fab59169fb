package replication

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
)

// lockedBuffer collects log output from concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A replica stopped by its storage (a full disk) refuses the merge of every
// delta its peers send: it logs that once, then at most once per
// ratelog interval, not once per delta (a line every few milliseconds
// under load).
func TestStoppedReplicaLogsFailedMergesAtABoundedRate(t *testing.T) {
	s := startNATS(t)
	ids := []string{"us-1", "eu-1"}
	var logs lockedBuffer
	us := startNode(t, s.ClientURL(), "us", "us-1", filepath.Join(t.TempDir(), "us-1"), ids)
	eu := startNode(t, s.ClientURL(), "eu", "eu-1", filepath.Join(t.TempDir(), "eu-1"), ids, func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	t.Cleanup(func() { us.close(); eu.close() })
	for _, n := range []*node{us, eu} {
		testkit.WaitFor(t, 10*time.Second, func() error {
			if !n.replica.Accepting() {
				return fmt.Errorf("%s not accepting writes", n.id)
			}
			return nil
		})
	}
	eu.replica.Stop(fmt.Errorf("%w: disk full (test)", region.ErrFailed))

	// Likes at us-1, one delta each (each waits for its commit, and the
	// flusher runs every 5 ms): eu-1 fails to merge every one.
	ctx := context.Background()
	const likes = 60
	for i := range likes {
		res, err := us.replica.Do(ctx, []region.Op{{Kind: region.OpLike, Item: "post", User: fmt.Sprintf("u%d", i)}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("like %d at us-1: %v %v", i, err, res)
		}
		time.Sleep(6 * time.Millisecond) // pace the likes into separate deltas
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if logged, held := eu.rep.mergeFailed.Counts(); logged+held < likes/2 {
			return fmt.Errorf("eu-1 failed %d merges so far", logged+held)
		}
		return nil
	})
	lines := strings.Count(logs.String(), "merge failed")
	logged, held := eu.rep.mergeFailed.Counts()
	t.Logf("eu-1 failed %d merges: %d lines", logged+held, lines)
	if lines != 1 {
		t.Fatalf("%d lines for %d failed merges within one interval, want 1:\n%s", lines, logged+held, logs.String())
	}
}
