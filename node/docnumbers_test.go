package node

import (
	"strconv"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The defaults the docs quote that only this package sees; the rest are
// cmd/tallyd's TestDocNumbersAreTheDefaults.
func TestDocNumbersAreTheDefaults(t *testing.T) {
	testkit.CheckDocNumbers(t, "..", []testkit.DocNumber{
		{"docs/architecture.md", "Answers missing after (\\S+ s) leave their shards out", testkit.Human(gatherTimeout)},
		{"docs/operations.md", "tallyd checks the files every (\\S+ s) and reads them again", testkit.Human(certWatchInterval)},
		{"docs/operations.md", "a replica numbers up to (\\d+) configured sequences", strconv.Itoa(maxSequences)},
		{"docs/operations.md", "`missing_shards` when one did not answer within (\\S+ s);", testkit.Human(gatherTimeout)},
		{"docs/operations.md", "a replica reads them again within (\\S+ s), and on SIGHUP", testkit.Human(certWatchInterval)},
		{"docs/operations.md", "At start\\*\\* a replica reads the bucket \\(for at most (\\S+ s)\\)", testkit.Human(shardMapReadTimeout)},
	})
}
