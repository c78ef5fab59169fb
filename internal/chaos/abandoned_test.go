package chaos

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/shard"
)

// The attack a sharded chaos run found: a like goes to a replica that
// does not hold the item, which forwards it to a holder that is stopped
// (SIGSTOP) with the request in hand. The client gives up, sends the like
// straight to the other holder, where it is acknowledged, then unlikes
// there. When the stopped holder continues, the like it holds is older
// than its client's deadline, which the client said (api.TimeoutHeader):
// it must not be applied, or it would come after the unlike and win.
// Every replica reads the user unliked and the item at 0.
func TestAbandonedForwardedLikeIsNotApplied(t *testing.T) {
	realProcesses(t, "runs a sharded region on real processes")
	cfg := DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies = []string{"us", "eu"}, 3, 2
	cfg.Binary = chaosBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := startDeployment(ctx, cfg, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	api := map[string]*tallyclient.Client{}
	for _, p := range d.procs {
		if api[p.replica], err = tallyclient.New(tallyclient.Config{BaseURL: "http://" + p.addr, HTTP: &http.Client{}}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := api["us-1"].Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.FromAPI(j)
	if err != nil {
		t.Fatal(err)
	}
	// An item us-1 does not hold, held by us-2 and us-3, which us-1 tries
	// first: us-1 forwards its likes to us-3.
	item := ""
	for i := 0; item == ""; i++ {
		name := fmt.Sprintf("item-%03d", i)
		if p := m.Preferred(shard.Of(name)); slices.Equal(p, []string{"us-3", "us-2"}) {
			item = name
		}
	}
	paused := d.target(Episode{Replica: "us-3"})
	if err := d.pause(paused, true); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = d.pause(paused, false)
		}
	}()
	// Likes through us-1 until one times out: it went to us-3.
	user, before := "", 0
	for i := 0; user == "" && i < 50; i++ {
		u := fmt.Sprintf("user-%03d", i)
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := api["us-1"].Like(actx, item, u)
		acancel()
		switch {
		case err == nil:
			before++
		case tallyclient.StatusCode(err) == 0 || tallyclient.StatusCode(err) >= 500:
			user = u // no answer in time (here or at us-1): in us-3's hands
		default:
			t.Fatalf("like %s by %s: %v", item, u, err)
		}
	}
	if user == "" {
		t.Fatal("no like of 50 was forwarded to the stopped holder")
	}
	// The client sends the like again, and then the unlike, to us-2.
	if _, err := api["us-2"].Like(ctx, item, user); err != nil {
		t.Fatalf("like again at us-2: %v", err)
	}
	if _, err := api["us-2"].Unlike(ctx, item, user); err != nil {
		t.Fatalf("unlike at us-2: %v", err)
	}
	if err := d.pause(paused, false); err != nil {
		t.Fatal(err)
	}
	resumed = true
	time.Sleep(3 * time.Second) // us-3 takes the requests it holds
	// Every replica of both regions reads the user unliked, and the item
	// liked by the users whose likes went through before.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range d.procs {
		for {
			l, lerr := api[p.replica].Liked(ctx, item, user)
			n, nerr := api[p.replica].Likes(ctx, item)
			if lerr == nil && nerr == nil && !l.Liked && n.Count == int64(before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s reads %s liked=%v (%v) and the item at %d (%v), want unliked and %d: the abandoned like was applied after the unlike",
					p.replica, user, l.Liked, lerr, n.Count, nerr, before)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
