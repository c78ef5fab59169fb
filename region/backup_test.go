package region

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A backup holds the replica's state at the time, counts as fresh (a
// replica started on it recovers from every peer before acknowledging),
// logs its events under a new log id from the copy's last seq with none
// left to publish, and has forgotten the numbering the replica went on to
// do: its queues and its leases. The replica goes on serving meanwhile.
func TestBackupIsFreshAndForgetsTheRun(t *testing.T) {
	seq := &fakeSeq{next: 1, avail: 2}
	claimed := make(chan struct{}, 1)
	withLog := func(c *Config) { numberingConfig(seq, claimed)(c); c.EventLog = true }
	r, _ := openReplica(t, t.TempDir(), "a", withLog)
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		if _, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r.AcceptWrites()
	if _, accepted, _ := r.store.Meta(metaAccepted); !accepted || r.Numbers().Unnumbered("likes") != 4 || r.Numbers().Numbered("likes") != 2 {
		t.Fatalf("before the backup: accepted %v, unnumbered %d, numbered %d", accepted, r.Numbers().Unnumbered("likes"), r.Numbers().Numbered("likes"))
	}
	if snap, _ := NumberingSnapshot(r.store, "likes"); snap == nil {
		t.Fatal("no numbering snapshot stored before the backup")
	}
	logID, logLast := r.store.LogID(), r.store.LogLast()
	if logLast == 0 {
		t.Fatal("nothing logged")
	}

	dir := filepath.Join(t.TempDir(), "backup")
	b, err := r.Admin().Backup(dir)
	if err != nil || b.Files == 0 || b.Bytes == 0 || b.Dir != dir {
		t.Fatalf("backup: %+v %v", b, err)
	}
	if _, err := r.Admin().Backup(dir); !errors.Is(err, os.ErrExist) {
		t.Fatalf("a second backup into %s: %v, want os.ErrExist", dir, err)
	}
	if _, err := r.Likes().Like(ctx, "post", "after"); err != nil {
		t.Fatalf("a like after the backup: %v", err)
	}

	c, _ := openReplica(t, dir, "a", func(c *Config) {
		numberingConfig(&fakeSeq{}, make(chan struct{}, 1))(c)
		c.HoldWrites = true // as replication starts it: writes held until recovered
	})
	if !c.Fresh() {
		t.Fatal("the restored copy is not fresh: it would time out of recovery into its old state")
	}
	if got := mustLikes(t, c, "post").Value; got != 6 {
		t.Fatalf("the copy counts %d likes, want the 6 before the backup", got)
	}
	if c.Numbers().Unnumbered("likes") != 0 {
		t.Fatalf("the copy has %d queued likes: the replica numbered them after the backup", c.Numbers().Unnumbered("likes"))
	}
	if snap, _ := NumberingSnapshot(c.store, "likes"); snap != nil {
		t.Fatalf("the copy kept the numbering snapshot %q: its leases were used on after the backup", snap)
	}
	if _, _, ok, err := c.store.Numbered("likes", 1); ok || err != nil {
		t.Fatalf("the copy still records the like that took number 1 (%v)", err)
	}
	pub, err := c.store.LogPublished()
	if c.store.LogID() == logID || c.store.LogLast() != logLast || pub != logLast || err != nil {
		t.Fatalf("copy's log: id %s (was %s), last %d, published %d (%v); want a new id, last and published %d",
			c.store.LogID(), logID, c.store.LogLast(), pub, err, logLast)
	}
	if at, ok := c.restoredFrom(); !ok || at == "" {
		t.Fatal("the copy does not say it is a backup")
	}
	c.AcceptWrites()
	if _, ok := c.restoredFrom(); ok {
		t.Fatal("still marked a backup after accepting writes")
	}
}
