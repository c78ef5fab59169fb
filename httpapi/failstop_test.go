package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// A storage failure stops the replica safely: the write whose WAL sync
// failed is not acknowledged, every later write is refused with
// storage_failed, and /healthz and /readyz answer 503, so the process is
// restarted instead of serving on a store that may have lost writes. The
// error comes from Pebble's own fault-injecting filesystem (errorfs) under
// a real Pebble directory.
func TestWALSyncFailureStopsWritesAndFailsHealth(t *testing.T) {
	var failing atomic.Bool
	inject := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && isSync(op.Kind) && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})
	_, _, ts := serveOnFaultyDisk(t, storage.Config{FS: errorfs.Wrap(vfs.Default, inject)})

	call := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var e struct{ Code string }
		_ = json.NewDecoder(res.Body).Decode(&e)
		return res.StatusCode, e.Code
	}

	if code, _ := call(http.MethodPut, "/v1/likes/post1/alice", ""); code != http.StatusOK {
		t.Fatalf("like before the fault: %d", code)
	}
	if code, _ := call(http.MethodGet, "/healthz", ""); code != http.StatusOK {
		t.Fatalf("healthz before the fault: %d", code)
	}
	stopped := func(want string) {
		t.Helper()
		res, err := ts.Client().Get(ts.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if line := `tally_replica_stopped{reason="storage_failed"} ` + want; !strings.Contains(string(body), line+"\n") {
			t.Fatalf("/metrics lacks %s", line)
		}
	}
	stopped("0")

	failing.Store(true)
	// The write whose sync fails is not acknowledged.
	if code, ecode := call(http.MethodPut, "/v1/likes/post1/bob", ""); code < 500 || ecode != frontdoor.CodeStorageFailed {
		t.Fatalf("like during the fault: %d %q, want 5xx storage_failed", code, ecode)
	}
	// Later writes are refused even once the disk is fine again: the store
	// may have lost what the failed sync held, so only a restart may go on.
	failing.Store(false)
	for _, w := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/likes/post1/carol", ""},
		{http.MethodPost, "/v1/counters/views/incr", `{"by":1}`},
	} {
		if code, ecode := call(w.method, w.path, w.body); code != http.StatusServiceUnavailable || ecode != frontdoor.CodeStorageFailed {
			t.Fatalf("%s %s after the fault: %d %q, want 503 storage_failed", w.method, w.path, code, ecode)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, ecode := call(http.MethodGet, p, ""); code != http.StatusServiceUnavailable || ecode != frontdoor.CodeStorageFailed {
			t.Fatalf("%s after the fault: %d %q, want 503 storage_failed", p, code, ecode)
		}
	}
	stopped("1")
	// Reads are refused too: Pebble may hold the failed write without its
	// WAL sync, so what a read would see is not known to be durable.
	for _, p := range []string{"/v1/likes/post1", "/v1/likes/post1/bob", "/v1/counters/views"} {
		if code, ecode := call(http.MethodGet, p, ""); code != http.StatusServiceUnavailable || ecode != frontdoor.CodeStorageFailed {
			t.Fatalf("GET %s after the fault: %d %q, want 503 storage_failed", p, code, ecode)
		}
	}
}

// isSync reports whether an operation makes a file's data durable.
func isSync(k errorfs.OpKind) bool {
	return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
}

// A memtable flush that fails (a disk that fills up under the sstables)
// stops the replica the same way: writes and reads refused with
// storage_failed and the health checks at 503, instead of writes piling up
// in memory until they stall with 503 timeout while /healthz says 200.
func TestFlushFailureStopsWritesAndFailsHealth(t *testing.T) {
	var full atomic.Bool
	inject := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return errorfs.ErrInjected
		}
		return nil
	})
	rep, _, ts := serveOnFaultyDisk(t, storage.Config{FS: errorfs.Wrap(vfs.Default, inject), MemTableBytes: 1 << 20})

	full.Store(true)
	// Likes by new users until a memtable fills and its flush fails: a few
	// MiB of records. Writes go on being acknowledged until then.
	ctx := context.Background()
	var stopped error
	for i := 0; i < 200 && stopped == nil; i++ {
		ops := make([]region.Op, 1000)
		for j := range ops {
			ops[j] = region.Op{Kind: region.OpLike, Item: "post1", User: fmt.Sprintf("user-%d-%d-padding-to-make-the-record-longer", i, j)}
		}
		_, stopped = rep.Do(ctx, ops)
		if stopped == nil {
			stopped = rep.Err()
		}
	}
	if !errors.Is(stopped, region.ErrFailed) {
		t.Fatalf("after 200,000 likes with the sstables' disk full: %v, want the replica failed", stopped)
	}
	checkStopped(t, ts)
}

// checkStopped checks that a failed replica refuses writes and reads with
// 503 storage_failed and fails both health checks.
func checkStopped(t *testing.T, ts *httptest.Server) {
	t.Helper()
	code := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, nil)
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var e struct{ Code string }
		_ = json.NewDecoder(res.Body).Decode(&e)
		return res.StatusCode, e.Code
	}
	for _, c := range []struct{ method, path string }{
		{http.MethodPut, "/v1/likes/post1/late"},
		{http.MethodGet, "/v1/likes/post1"},
		{http.MethodGet, "/healthz"},
		{http.MethodGet, "/readyz"},
	} {
		if status, ecode := code(c.method, c.path); status != http.StatusServiceUnavailable || ecode != frontdoor.CodeStorageFailed {
			t.Errorf("%s %s after the failure: %d %q, want 503 storage_failed", c.method, c.path, status, ecode)
		}
	}
}

// serveOnFaultyDisk serves a replica whose store is opened with cfg (its
// Dir, if empty, a fresh temporary directory).
func serveOnFaultyDisk(t *testing.T, cfg storage.Config) (*region.Replica, *storage.Store, *httptest.Server) {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	st, err := storage.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	rep, err := region.New(region.Config{Region: "us", Replica: "us-1", Store: st, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rep.Close() })
	srv, err := New(Config{Replica: rep, Registry: reg, Logger: hclog.NewNullLogger(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return rep, st, ts
}
