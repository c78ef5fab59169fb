package resp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/node"
)

// commits is the replica's count of group commits (tally_commit_seconds).
func commits(t *testing.T, n *node.Node) uint64 {
	t.Helper()
	res, err := http.Get("http://" + n.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "tally_commit_seconds_count "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no tally_commit_seconds_count in /metrics (%v)", sc.Err())
	return 0
}

// Pipelined writes on one connection share commits: 64 INCRs and SADDs
// sent at once take far fewer than 64 commits, and each answers what it
// would have alone.
func TestPipelinedWritesShareCommits(t *testing.T) {
	n := startNode(t, nil)
	ctx := context.Background()
	c := client(t, n, 2, "")
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := commits(t, n)
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 32 {
			p.IncrBy(ctx, "batched", 2)
			p.SAdd(ctx, "likes:batched", fmt.Sprint("u", i%16))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		if v := cmds[2*i].(*redis.IntCmd).Val(); v != int64(2*(i+1)) {
			t.Fatalf("INCRBY %d answered %d", i, v)
		}
		if v, want := cmds[2*i+1].(*redis.IntCmd).Val(), int64(1); i >= 16 && v != 0 || i < 16 && v != want {
			t.Fatalf("SADD %d answered %d", i, v)
		}
	}
	// redcon may read the pipeline in a few pieces; unbatched it would be
	// 64 commits.
	if d := commits(t, n) - before; d > 8 {
		t.Fatalf("64 pipelined writes took %d commits", d)
	}
}

// In a pipeline, a read ends a run of writes (it sees them), a refused
// write is answered with its error in its place, and nothing after QUIT
// runs.
func TestPipelineOrderAndErrors(t *testing.T) {
	limit, err := node.ParseLimit("write=user:0.001,user_burst:1")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, func(c *node.Config) { c.Limits = []node.LimitConfig{limit} })
	conn, err := net.Dial("tcp", n.RESPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	cmds := []string{
		"INCR k", "INCRBY k x", "SADD likes:p alice", "SADD post1 bob", "GET k",
		"SADD likes:q alice", // alice's second like: over her limit
		"PFADD v a", "PFADD v a", "SISMEMBER likes:p alice", "DECRBY k 3", "SREM likes:p alice",
		"QUIT", "INCR k",
	}
	if _, err := conn.Write([]byte(strings.Join(cmds, "\r\n") + "\r\n")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		":1", "-ERR value is not an integer or out of range (code bad_by)", ":1",
		`-ERR set key "post1" does not start with "likes:"`, "$1", "1",
		"-ERR over this replica's write limit per user", ":1", ":0", ":1", ":-2",
		"-ERR over this replica's write limit per user", // an unlike takes from it too
		"+OK",
	}
	rd := bufio.NewReader(conn)
	for i, w := range want {
		line, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, w) {
			t.Fatalf("reply line %d: %q %v, want %q...", i, line, err, w)
		}
	}
	if rest, err := rd.ReadString('\n'); err == nil {
		t.Fatalf("a reply after QUIT: %q", rest)
	}
	if v, err := client(t, n, 2, "").Get(context.Background(), "k").Int64(); err != nil || v != -2 {
		t.Fatalf("k after the pipeline: %d %v (the INCR after QUIT must not run)", v, err)
	}
}
