package testkit

import (
	"testing"

	"github.com/tally-dev/tally/internal/base/failpoint"
)

// Armed is a failpoint set arming names, for a test's Config (the test
// fails if one is not a failpoint).
func Armed(t testing.TB, names ...failpoint.Name) *failpoint.Set {
	t.Helper()
	s, err := failpoint.New(names...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
