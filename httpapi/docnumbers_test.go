package httpapi

import (
	"strconv"
	"testing"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
)

// The defaults and limits the docs quote that only this package sees,
// and the API's limits docs/api.md quotes; the rest are cmd/tallyd's
// TestDocNumbersAreTheDefaults.
func TestDocNumbersAreTheDefaults(t *testing.T) {
	const ops, api = "docs/operations.md", "docs/api.md"
	testkit.CheckDocNumbers(t, "..", []testkit.DocNumber{
		{ops, "A replica holds at most ([\\d,]+) token buckets per table", testkit.Commas(maxTokenBuckets)},
		{api, "in id order: `\\{\"item\",\"users\":\\[\\{\"id\",\"at\"\\}\\],\"next\"\\}`; `\\?limit=` \\(1\\.\\.\\d+, default (\\d+)\\)", strconv.Itoa(defaultListLimit)},
		{api, "in id order: `\\{\"item\",\"users\":\\[\\{\"id\",\"at\"\\}\\],\"next\"\\}`; `\\?limit=` \\(1\\.\\.(\\d+), default", strconv.Itoa(region.MaxListLimit)},
		{api, "`&n=10` \\(1\\.\\.(\\d+)\\)", strconv.Itoa(region.MaxTrendingN)},
		{api, "body `\\{\"ids\":\\[\"alice\",\"bob\"\\]\\}` \\(1 to ([\\d,]+)\\)", testkit.Commas(region.MaxUniqueIDs)},
		{api, "an item with more than ([\\d,]+) likers is refused", testkit.Commas(region.MaxAllLikers)},
		{api, "\\(NDJSON or an array, up to ([\\d,]+) events\\)", testkit.Commas(MaxBatchEvents)},
		{api, "`\\?limit=N` \\(1\\.\\.(\\d+), default \\d+\\) per replica", strconv.Itoa(region.MaxHistory)},
		{api, "`owner` up to (\\d+) bytes", strconv.Itoa(crdt.MaxTypeOwner)},
		{api, "`description` up to (\\d+)", strconv.Itoa(crdt.MaxTypeDescription)},
	})
}
