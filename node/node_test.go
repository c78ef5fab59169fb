package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/base/version"
)

func standalone(dir string) Config {
	c := DefaultConfig()
	c.Region, c.DataDir, c.Listen = "eu", dir, "127.0.0.1:0"
	c.Derive()
	return c
}

func startT(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg, Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

// A standalone node serves its API on the bound address, keeps an
// acknowledged like across Close and a restart, and stops serving on Close.
func TestStartServeCloseRestart(t *testing.T) {
	cfg := standalone(t.TempDir())
	n := startT(t, cfg)
	base := "http://" + n.Addr().String()
	if code, b := testkit.CallJSON(t, "PUT", base+"/v1/likes/post1/alice"); code != 200 || b["count"] != 1.0 {
		t.Fatalf("like: %d %v", code, b)
	}
	if code, b := testkit.CallJSON(t, "GET", base+"/v1/status"); code != 200 || b["replica"] != "eu-1" || b["version"] != "test" {
		t.Fatalf("status: %d %v", code, b)
	}
	if _, err := n.MemoryUse(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if n.Err() != nil {
		t.Fatalf("Err after a clean Close: %v", n.Err())
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("still serving after Close")
	}

	n = startT(t, cfg)
	if code, b := testkit.CallJSON(t, "GET", "http://"+n.Addr().String()+"/v1/likes/post1"); code != 200 || b["count"] != 1.0 {
		t.Fatalf("after restart: %d %v", code, b)
	}
}

// When the listener cannot bind, Start fails and releases the store it had
// opened (Pebble's lock would otherwise keep the next start out).
func TestStartFailureCleansUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := standalone(t.TempDir())
	bad := cfg
	bad.Listen = ln.Addr().String()
	if _, err := Start(context.Background(), bad, Options{}); err == nil || !strings.Contains(err.Error(), "listen on "+bad.Listen) {
		t.Fatalf("start on a taken port: %v", err)
	}
	startT(t, cfg)
}

func TestStartRejectsInvalidConfig(t *testing.T) {
	cfg := standalone(t.TempDir())
	cfg.Durability = "fast"
	if _, err := Start(context.Background(), cfg, Options{}); err == nil || !strings.Contains(err.Error(), `durability "fast"`) {
		t.Fatalf("err %v", err)
	}
}

// Close gives in-flight requests until its context ends, then cuts them
// off; it still closes the store.
func TestCloseWithExpiredContext(t *testing.T) {
	cfg := standalone(t.TempDir())
	n := startT(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_ = n.Close(ctx)
	startT(t, cfg) // the store's lock is free again
}

// The HTTP server cuts off a client that stops reading (WriteTimeout), but
// never before a write has had its whole request timeout to commit.
func TestHTTPWriteTimeoutCoversTheRequestTimeout(t *testing.T) {
	cfg := standalone(t.TempDir())
	cfg.RequestTimeout = "3s"
	n := startT(t, cfg)
	if wt := n.srv.WriteTimeout; wt <= 3*time.Second+httpReadTimeout || wt > time.Minute {
		t.Fatalf("WriteTimeout %s: want more than the 3s request timeout plus reading, and bounded", wt)
	}
}

// A budget handoff recorded in the data directory is resumed after a
// restart only if its target is still a configured peer; otherwise it is
// cancelled, so no right is handed to a replica nobody runs any more.
func TestRestartCancelsAHandoffToAReplicaNoLongerAPeer(t *testing.T) {
	cfg := standalone(t.TempDir())
	n := startT(t, cfg)
	if _, err := n.Replica().Budgets().HandOffRights(context.Background(), "gone-1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n = startT(t, cfg) // no peers: gone-1 is not one
	if to := n.Replica().Budgets().HandoffTarget(); to != "" {
		t.Fatalf("after a restart without gone-1 as a peer, the handoff goes to %q", to)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	n = startT(t, cfg)
	if to := n.Replica().Budgets().HandoffTarget(); to != "" {
		t.Fatalf("the cancelled handoff came back: %q", to)
	}
}

// /v1/status and /metrics say which build runs: the release the node was
// given, the commit and the Go release.
func TestBuildInfo(t *testing.T) {
	n := startT(t, standalone(t.TempDir()))
	base := "http://" + n.Addr().String()
	code, b := testkit.CallJSON(t, "GET", base+"/v1/status")
	if code != 200 || b["version"] != "test" || b["go_version"] != runtime.Version() || b["revision"] != version.Revision() {
		t.Fatalf("status: %d version %v go_version %v revision %v", code, b["version"], b["go_version"], b["revision"])
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`tally_build_info{go_version=%q,revision=%q,version="test"} 1`, runtime.Version(), version.Revision())
	if !strings.Contains(string(body), want+"\n") {
		t.Fatalf("/metrics lacks %s", want)
	}
}
