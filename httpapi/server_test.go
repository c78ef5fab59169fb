package httpapi

import (
	"slices"
	"testing"
	"time"
)

// Routes lists the router's routes with their variables' patterns
// dropped, each method on its own, and the chaos build's route only when
// a chaos clock is set.
func TestRoutesListsTheRouter(t *testing.T) {
	has := func(rs []Route, method, path string) bool {
		return slices.Contains(rs, Route{Method: method, Path: path})
	}
	plain, err := newEnv(t, envOpts{}).srv.Routes()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Route{{"PUT", "/v1/likes/{item}/{user}"}, {"DELETE", "/v1/likes/{item}/{user}"},
		{"GET", "/v1/feed"}, {"POST", "/v1/feed"}, {"PUT", "/v1/admin/links/{a}/{b}"}, {"GET", "/metrics"}} {
		if !has(plain, r.Method, r.Path) {
			t.Errorf("%s %s not listed", r.Method, r.Path)
		}
	}
	if has(plain, "PUT", "/v1/admin/chaos/clock") {
		t.Error("the chaos clock is listed without a chaos clock")
	}
	chaos, err := newEnv(t, envOpts{api: func(c *Config) { c.ChaosClock = func(time.Duration) {} }}).srv.Routes()
	if err != nil {
		t.Fatal(err)
	}
	if !has(chaos, "PUT", "/v1/admin/chaos/clock") || len(chaos) != len(plain)+1 {
		t.Errorf("with a chaos clock: %d routes, %d without", len(chaos), len(plain))
	}
}
