package bench

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/node"
)

// The shared flags parse alike in every mode that has them, and the
// in-process ones are refused with --url rather than ignored.
func TestSharedFlags(t *testing.T) {
	env := func(string) string { return "" }
	args := []string{"--tls", "--limit", "write=client:1e9", "--limit", "read=client:5", "--limit", "write=client:7,user:3",
		"--keep-alive=false", "--timeout", "3s", "--durability", "none", "--log-level", "warn"}
	lc, err := parseLikesBench(args, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := parseEventsBench(args, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := parseBudgetBench(args, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []node.LimitConfig{{Class: "write", Client: 7, User: 3}, {Class: "read", Client: 5}}
	for _, got := range []sharedConfig{lc.sharedConfig, ec.sharedConfig, bc.sharedConfig} {
		if !got.TLS || got.KeepAlive || got.Timeout != 3*time.Second || got.Durability != "none" || got.LogLevel != "warn" ||
			len(got.Limits) != 2 || got.Limits[0] != want[0] || got.Limits[1] != want[1] {
			t.Errorf("parsed %+v, want TLS, no keep-alive, 3s, none, warn and limits %v", got, want)
		}
	}
	// Defaults as before the flags were shared.
	lc, _ = parseLikesBench(nil, env, nil)
	ec, _ = parseEventsBench(nil, env, nil)
	bc, _ = parseBudgetBench(nil, env, nil)
	if lc.Timeout != 10*time.Second || ec.Timeout != 30*time.Second || bc.Timeout != 10*time.Second {
		t.Errorf("default timeouts %s, %s, %s; want 10s, 30s, 10s", lc.Timeout, ec.Timeout, bc.Timeout)
	}
	for _, c := range []sharedConfig{lc.sharedConfig, ec.sharedConfig, bc.sharedConfig} {
		if c.TLS || !c.KeepAlive || c.Durability != "fsync" || c.LogLevel != "error" || len(c.Limits) != 0 {
			t.Errorf("defaults %+v", c)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "likes", "--limit", "write"}, `limit "write": want CLASS=KEY:N`},
		{[]string{"bench", "events", "--limit", "write=client:-1"}, "rates and bursts must be finite and >= 0"},
		{[]string{"bench", "budget", "--limit", "read=user:1"}, "per-user limits apply to the like routes"},
		{[]string{"bench", "likes", "--url", "http://a:1", "--tls"}, "--tls configures the in-process replicas: leave it out with --url"},
		{[]string{"bench", "events", "--url", "http://a:1", "--limit", "write=client:1"}, "--limit configures the in-process replicas"},
		{[]string{"bench", "budget", "--url", "http://a:1", "--tls"}, "--tls configures the in-process replicas"},
		{[]string{"bench", "budget", "--regions", "3", "--tls"}, "--tls serves one in-process replica: not with --regions 3"},
		{[]string{"bench", "likes", "--timeout", "0s"}, "--timeout 0s: want more than 0"},
		{[]string{"bench", "events", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"bench", "budget", "--durability", "maybe"}, `--durability "maybe"`},
	} {
		code, stdout, stderr := runArgs(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// Settings of the load client, not of the replica, go with --url.
	if _, err := parseLikesBench([]string{"--url", "https://a:1", "--keep-alive=false", "--timeout", "1s"}, env, nil); err != nil {
		t.Errorf("--url with --keep-alive and --timeout: %v", err)
	}
}

// With TLS the in-process replica serves HTTPS only, with a certificate
// its client config trusts, and applies the limits it was given; both
// directories go at the end.
func TestBenchReplicaTLSAndLimits(t *testing.T) {
	ctx := context.Background()
	s, err := startBenchReplica(ctx, benchReplica{Durability: "none", TLS: true,
		Limits: []node.LimitConfig{{Class: "write", Client: 1e9}}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.base, "https://127.0.0.1:") || s.tls == nil {
		t.Fatalf("base %q, tls %v: want https on loopback and a client config", s.base, s.tls)
	}
	if err := checkReady(ctx, s.base, s.tls); err != nil {
		t.Fatal(err)
	}
	if err := checkReady(ctx, s.base, nil); err == nil {
		t.Error("a client that does not trust the run's certificate got through")
	}
	if err := checkReady(ctx, "http://"+s.Addr().String(), nil); err == nil {
		t.Error("plain HTTP answered on the TLS listener")
	}
	client, closeIdle := newLoadClient(1, s.tls, true)
	defer closeIdle()
	get := func(method, path string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, s.base+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 {
			t.Fatalf("%s %s: %s over %s: %s", method, path, resp.Status, resp.Proto, body)
		}
		return string(body)
	}
	get(http.MethodPut, "/v1/likes/hot/u1")
	if m := get(http.MethodGet, "/metrics"); !regexp.MustCompile(`tally_http_limit_buckets\{by="client",class="write"\} 1\n`).MatchString(m) {
		t.Errorf("no write token bucket held after a like: the limit did not reach the replica")
	}
	if err := s.stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{s.dir, s.certDir} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind: %v", d, err)
		}
	}
}

// bench likes and bench events load an HTTPS replica end to end, with the
// limiter on every request, over kept and over fresh connections.
func TestBenchOverTLS(t *testing.T) {
	for _, keepAlive := range []bool{true, false} {
		lc := defaultLikesBenchConfig()
		lc.Concurrency, lc.Duration, lc.MaxRequests = []int{2}, 5*time.Second, 40
		lc.TLS, lc.KeepAlive, lc.Limits = true, keepAlive, []node.LimitConfig{{Class: "write", Client: 1e9, User: 1e9}}
		var out strings.Builder
		res, err := runLikesBench(context.Background(), lc, &out, &lockedBuilder{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Requests != 40 || res[0].Errors != 0 || res[0].Counted != 40 {
			t.Errorf("keep-alive %v: likes %+v\n%s", keepAlive, res, &out)
		}
		if !strings.Contains(out.String(), "https://") || !strings.Contains(out.String(), "TLS, limit write=client:1e+09,user:1e+09") {
			t.Errorf("the description does not say TLS and the limit:\n%s", &out)
		}
	}
	ec := defaultEventsBenchConfig()
	ec.Mixes, ec.Batch, ec.Concurrency, ec.Duration = []string{"incr"}, 50, 2, 200*time.Millisecond
	ec.TLS, ec.Limits = true, []node.LimitConfig{{Class: "write", Client: 1e9}}
	var out strings.Builder
	res, err := runEventsBench(context.Background(), ec, &out, &lockedBuilder{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Requests == 0 || res[0].Errors != 0 || res[0].Events != 50*res[0].Requests {
		t.Errorf("events %+v\n%s", res, &out)
	}
}
