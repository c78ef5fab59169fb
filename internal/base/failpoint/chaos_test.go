package failpoint

import (
	"os"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/buildtags"
)

// An armed point is on only in a chaos build; an unarmed one never; a nil
// Set arms nothing.
func TestArmedOnlyInChaosBuild(t *testing.T) {
	s, err := New(NoReconcile, CashbackStep("fence"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.On(NoReconcile); got != buildtags.Chaos {
		t.Errorf("armed %s: On = %t, want %t (chaos build %t)", NoReconcile, got, buildtags.Chaos, buildtags.Chaos)
	}
	if got := s.On(CashbackStep("fence")); got != buildtags.Chaos {
		t.Errorf("armed cashback:fence: On = %t (chaos build %t)", got, buildtags.Chaos)
	}
	if s.On(AckBeforeCommit) || s.On(CashbackStep("pool")) {
		t.Errorf("unarmed points are on")
	}
	var none *Set
	if none.On(NoReconcile) || none.Any() {
		t.Errorf("a nil Set arms something")
	}
	if s.Any() != buildtags.Chaos {
		t.Errorf("Any = %t (chaos build %t)", s.Any(), buildtags.Chaos)
	}
	if got := s.String(); got != "cashback:fence,no-reconcile" {
		t.Errorf("String = %q", got)
	}
	s.Crash(AckBeforeCommit) // not armed: returns
}

// A name that is no failpoint is refused, by New and FromEnv alike.
func TestUnknownNameRefused(t *testing.T) {
	for _, n := range []Name{"", "no-reconcil", "cashback:", "cashback:refund", "assign-overwrites"} {
		if s, err := New(n); err == nil {
			t.Errorf("New(%q) = %v, want an error", n, s)
		}
	}
	for _, n := range append(Bugs(), CrashBeforeClaim, CashbackStep("journaled"), CashbackStep("done")) {
		if !Known(n) {
			t.Errorf("%q is not known", n)
		}
	}
	bad := []map[string]string{
		{EnvBug: "no-such-bug"},
		{EnvBug: string(CrashBeforeClaim)}, // a crash, not a bug
		{EnvCrashBeforeClaim: "yes"},
		{EnvFailpoint: "cashback:nowhere"},
		{EnvFailpoint: string(NoReconcile)},
	}
	for _, env := range bad {
		_, err := FromEnv(func(k string) string { return env[k] })
		if buildtags.Chaos == (err == nil) {
			t.Errorf("chaos build %t: FromEnv(%v) err = %v", buildtags.Chaos, env, err)
		}
	}
}

// FromEnv arms what the variables name in a chaos build and reads nothing
// in another.
func TestFromEnv(t *testing.T) {
	env := map[string]string{EnvBug: string(SlotsAtArrival), EnvCrashBeforeClaim: "1", EnvFailpoint: "cashback:call_off"}
	read := 0
	s, err := FromEnv(func(k string) string { read++; return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !buildtags.Chaos {
		if s != nil || read != 0 {
			t.Fatalf("outside a chaos build FromEnv read %d variables and gave %v", read, s)
		}
		return
	}
	for _, n := range []Name{SlotsAtArrival, CrashBeforeClaim, CashbackStep("call_off")} {
		if !s.On(n) {
			t.Errorf("%s not armed by %v", n, env)
		}
	}
	if s.On(NoReconcile) {
		t.Errorf("%s armed by %v", NoReconcile, env)
	}
	if s, err := FromEnv(func(string) string { return "" }); err != nil || s.Any() {
		t.Errorf("empty environment: %v, %v", s, err)
	}
}

// Every point is in the package comment's table, which documents it.
func TestEveryPointDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	docTable := string(doc)
	// doc.go's table rows start with a tab and the name.
	for _, n := range append(Bugs(), CrashBeforeClaim) {
		if !strings.Contains(docTable, "\n//\t"+string(n)+" ") {
			t.Errorf("%s is not in the package comment's table", n)
		}
	}
}
