package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"strings"
	"testing"
	"time"
)

// POST /v1/admin/import: admin only; the walkthrough's like payload
// imports as it is, at its 2023 time; increments days old are booked in
// their slots; a re-run of the same body changes nothing, while two
// identical increment lines count twice; budgets are refused line by
// line; ImportKey is the identity the route derives.
func TestImportRoute(t *testing.T) {
	e := newEnv(t, envOpts{api: func(c *Config) { c.WriteToken, c.AdminToken = "w-secret", "a-secret" }})
	admin := []string{"Authorization", "Bearer a-secret", "Content-Type", "application/x-ndjson"}
	write := []string{"Authorization", "Bearer w-secret", "Content-Type", "application/x-ndjson"}
	twoDays := time.Now().Add(-48 * time.Hour).UnixMilli()
	incr := fmt.Sprintf(`{"type":"incr","key":"views:v123","by":3,"at":%d}`, twoDays)
	body := `{"videoId":"v123","userId":"u456","timestamp":1698765432}
` + incr + "\n" + incr + `
{"type":"unique","key":"viewers","id":"u456","at":1698765432000}
{"type":"grant","key":"b","by":5}
`
	e.do(http.MethodPost, "/v1/admin/import", body, write...).isError(t, http.StatusUnauthorized, frontdoor.CodeUnauthorized)
	live := e.do(http.MethodPost, "/v1/events", `{"videoId":"v123","userId":"u456","timestamp":1698765432}`, write...)
	if live.status != http.StatusOK || !strings.Contains(live.raw, `"code":"missing_field"`) { // live: a like needs its type
		t.Fatalf("the walkthrough's payload live: %d %s", live.status, live.raw)
	}
	for run := range 2 {
		r := e.do(http.MethodPost, "/v1/admin/import", body, admin...)
		if r.status != http.StatusOK || num(t, r.body, "applied") != 4 || num(t, r.body, "rejected") != 1 || !strings.Contains(r.raw, "are not imported") {
			t.Fatalf("run %d: %d %s", run, r.status, r.raw)
		}
		if e.likes("v123") != 1 || e.counter("views:v123") != 6 {
			t.Fatalf("run %d: likes %d, views %d; want 1 and 6", run, e.likes("v123"), e.counter("views:v123"))
		}
	}
	if st := e.do(http.MethodGet, "/v1/uniques/viewers", "", write...).ok(t); num(t, st, "estimate") != 1 {
		t.Fatalf("uniques: %v", st)
	}
	from, to := twoDays-30*60_000, twoDays+30*60_000
	w := e.do(http.MethodGet, fmt.Sprintf("/v1/counters/views:v123/window?from=%d&to=%d", from, to), "", write...).ok(t)
	if num(t, w, "value") != 6 {
		t.Fatalf("window two days ago: %v", w)
	}
	// The key tallyd import sends is the one the route derives: a
	// duplicate.
	explicit := fmt.Sprintf(`{"type":"incr","key":"views:v123","by":3,"at":%d,"idempotency_key":%q}`, twoDays, ImportKey([]byte(incr), 1))
	r := e.do(http.MethodPost, "/v1/admin/import", explicit, admin...)
	if r.status != http.StatusOK || !strings.Contains(r.raw, `"duplicate":true`) || e.counter("views:v123") != 6 {
		t.Fatalf("explicit derived key: %d %s, views %d", r.status, r.raw, e.counter("views:v123"))
	}
	// From the future, as live events.
	r = e.do(http.MethodPost, "/v1/admin/import", fmt.Sprintf(`{"type":"incr","key":"k","at":%d}`, time.Now().Add(time.Hour).UnixMilli()), admin...)
	if r.status != http.StatusOK || !strings.Contains(r.raw, `"code":"bad_time"`) {
		t.Fatalf("an import from the future: %d %s", r.status, r.raw)
	}
}
