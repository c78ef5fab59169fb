package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/storage"
)

// What a read of a like count costs the replica's HTTP handler: GET
// /v1/likes/{item} through Server.ServeHTTP (routing, middleware, the
// read, the JSON answer) on a real replica, over 1,000 items liked once
// each, so every read is of a count the writer cached. No thresholds:
// compare runs (e.g. with -count 6 and benchstat); docs/benchmarks.md
// records one.
//
//	go test -run='^$' -bench=ServeReadLikes -benchtime=2s ./httpapi/
func BenchmarkServeReadLikes(b *testing.B) {
	const items = 1000
	e := newEnv(b, envOpts{durability: storage.DurabilityNone, api: func(cfg *Config) {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Warn}) // as served: no debug line a request
	}})
	paths := make([]string, items)
	for i := range paths {
		paths[i] = "/v1/likes/item-" + strconv.Itoa(i)
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, httptest.NewRequest(http.MethodPut, paths[i]+"/seed", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("seeding %s: status %d: %s", paths[i], w.Code, w.Body)
		}
	}
	reqs := make([]*http.Request, items)
	for i, p := range paths {
		reqs[i] = httptest.NewRequest(http.MethodGet, p, nil)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, reqs[i%items])
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
		i++
	}
}
