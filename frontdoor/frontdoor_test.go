package frontdoor_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// Every error of the replica a door may meet has one status and code,
// whichever door asks, wrapped or not; an unknown error is none (the
// caller logs it as internal).
func TestKnownErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
		retry  bool
	}{
		{region.ErrBudgetExhausted, http.StatusConflict, frontdoor.CodeBudgetExhausted, false},
		{region.ErrRightsElsewhere, http.StatusConflict, frontdoor.CodeRightsElsewhere, false},
		{region.ErrNotReady, http.StatusServiceUnavailable, frontdoor.CodeNotReady, true},
		{region.ErrNotHeld, http.StatusMisdirectedRequest, frontdoor.CodeShardNotHeld, false},
		{region.ErrBlocked, http.StatusForbidden, frontdoor.CodeUserBlocked, false},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, frontdoor.CodeTimeout, true},
		{frontdoor.CheckBy(1 << 62), http.StatusBadRequest, frontdoor.CodeBadBy, false},
		{frontdoor.CheckID("user", ""), http.StatusBadRequest, frontdoor.CodeBadID, false},
		{frontdoor.CheckID("user", strings.Repeat("x", 200)), http.StatusBadRequest, frontdoor.CodeBadID, false},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("at the holder: %w", tc.err)} {
			e := frontdoor.Known(err)
			if e == nil || e.Status != tc.status || e.Code != tc.code || (e.RetryAfter > 0) != tc.retry || e.Msg == "" {
				t.Errorf("Known(%v) = %+v; want %d %s, retry-after %v", err, e, tc.status, tc.code, tc.retry)
			}
			if code, msg, ok := frontdoor.Describe(err); !ok || code != tc.code || msg != e.Msg {
				t.Errorf("Describe(%v) = %s %q %v", err, code, msg, ok)
			}
		}
	}
	if e := frontdoor.Known(errors.New("disk on fire")); e != nil {
		t.Errorf("an unknown error is known: %+v", e)
	}
	if frontdoor.CheckID("user", "alice") != nil || frontdoor.CheckBy(5) != nil {
		t.Error("a valid id or amount refused")
	}
}

// The front doors stand alone: neither the HTTP API nor the Redis
// protocol imports the other, even through a third package; what they
// share is here. Nor does either import storage or replication itself:
// they name the state through region and ask replication through an
// interface of their own, so those packages reach them only through
// region's API.
func TestFrontDoorsStandAlone(t *testing.T) {
	const module = "github.com/tally-dev/tally/"
	for _, tc := range []struct {
		pkg, not string
		deps     bool // through any package, not only directly
	}{
		{"resp", "httpapi", true},
		{"httpapi", "resp", true},
		{"httpapi", "storage", false},
		{"httpapi", "replication", false},
		{"resp", "storage", false},
		{"resp", "replication", false},
	} {
		args := []string{"list", "-f", `{{join .Imports " "}}`, module + tc.pkg}
		if tc.deps {
			args = []string{"list", "-deps", module + tc.pkg}
		}
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+tc.not {
				t.Errorf("%s imports %s", tc.pkg, tc.not)
			}
		}
	}
}
