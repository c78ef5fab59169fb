package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/storage"
)

// What the rate limiter costs a request. No thresholds: compare the
// sub-benchmarks (e.g. with -count 6 and benchstat); docs/benchmarks.md
// records a run.
//
//	go test -run='^$' -bench='ServeWithLimits|TokenBucketsTake' -benchtime=2s ./httpapi/

// never is a rate no benchmark reaches: the limiter runs on every
// request and refuses none.
const never = 1e9

// BenchmarkServeWithLimits sends single likes (PUT /v1/likes/hot/{new
// user}) through Server.ServeHTTP on a real replica without fsync (so
// that the request's own cost, not the disk, is what is measured), with
// no limits, with a write limit per client, and with one per client and
// per user. Every request comes from the same address, so it is one
// client's token bucket; every like is by a new user, so the per-user table
// gains a token bucket a request (and sweeps them once it is full).
func BenchmarkServeWithLimits(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits []Limit
	}{
		{"none", nil},
		{"client", []Limit{{Class: frontdoor.ClassWrite, Client: never}}},
		{"client+user", []Limit{{Class: frontdoor.ClassWrite, Client: never, User: never}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, envOpts{durability: storage.DurabilityNone, api: func(cfg *Config) { cfg.Limits = c.limits }})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				req := httptest.NewRequest(http.MethodPut, "/v1/likes/hot/u"+strconv.Itoa(i), nil)
				w := httptest.NewRecorder()
				e.srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkTokenBucketsTake is the token-bucket table alone: one token for one hot
// key (one client sending everything), for keys drawn in turn from
// 100,000 (many clients or users: a map of that size, each token bucket cold
// in the cache), and for one key from every core at once (the table's
// lock contended).
func BenchmarkTokenBucketsTake(b *testing.B) {
	newTable := func() *tokenBuckets {
		return newTokenBuckets(never, 0, prometheus.NewGauge(prometheus.GaugeOpts{Name: "bench_buckets"}))
	}
	take := func(b *testing.B, bs *tokenBuckets, key string) {
		if wait := bs.take(key, 1, time.Now()); wait > 0 {
			b.Fatalf("refused for %s", wait)
		}
	}
	b.Run("keys=1", func(b *testing.B) {
		bs := newTable()
		b.ReportAllocs()
		for b.Loop() {
			take(b, bs, "t client")
		}
	})
	b.Run("keys=100k", func(b *testing.B) {
		bs := newTable()
		keys := make([]string, 100_000)
		for i := range keys {
			keys[i] = "t client-" + strconv.Itoa(i)
			take(b, bs, keys[i])
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			take(b, bs, keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("keys=1/parallel", func(b *testing.B) {
		bs := newTable()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if wait := bs.take("t client", 1, time.Now()); wait > 0 {
					b.Errorf("refused for %s", wait)
					return
				}
			}
		})
	})
}
