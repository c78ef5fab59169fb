package region

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The defaults the docs quote that only this package sees; the rest are
// cmd/tallyd's TestDocNumbersAreTheDefaults.
func TestDocNumbersAreTheDefaults(t *testing.T) {
	const arch, ops = "docs/architecture.md", "docs/operations.md"
	seconds := func(d time.Duration) string { return fmt.Sprintf("%d s", d/time.Second) }
	// keep spells a trending level's keep, in seconds, as the docs do:
	// "2 h", "31 days".
	keep := func(s int64) string {
		if s%86400 == 0 && s > 86400 {
			return fmt.Sprintf("%d days", s/86400)
		}
		return testkit.Human(time.Duration(s) * time.Second)
	}
	testkit.CheckDocNumbers(t, "..", []testkit.DocNumber{
		{arch, "records stamped more than (\\S+ s) ahead wait", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "A remote record stamped more than (\\S+ s) ahead of the local clock", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "merges once the local clock is within (\\S+ s) of it", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "If `m/hlc-max` is more than (\\S+ s) ahead of the wall clock", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "When the wall clock moves more than (\\S+ s) apart from the monotonic clock", testkit.Human(stepTolerance)},
		{arch, "fresh peers' clocks is more than (\\S+ s) from its own", testkit.Human(maxPeerSkew)},
		{arch, "one anti-entropy round moves the clock at most (\\S+ s) toward", testkit.Human(maxPeerStep)},
		{arch, "the peers keep the clock within (\\S+ s) of one of the replica's own", seconds(maxPeerCorrection)},
		{arch, "Without a step that means within (\\S+ s) of the wall clock", seconds(maxPeerCorrection)},
		{arch, "otherwise and for however long\\. (\\S+ s) is also how far ahead a remote stamp may be", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "Stamps > (\\S+ s) ahead are not followed", seconds(maxClockDriftMs * time.Millisecond)},
		{arch, "a sweeper deletes them every (\\S+ s), oldest first", testkit.Human(sweepWindowsEvery)},
		{arch, "own recent pages in memory \\((\\S+ MiB) at most", testkit.IEC(ownPageCacheBytes)},
		{ops, "sketch pages \\(at most (\\S+ MiB): about", testkit.IEC(ownPageCacheBytes)},
		{arch, "asks for one key go out at most every (\\d+) ms", strconv.Itoa(askIntervalMs)},
		{arch, "answers one asker's asks for one budget at most once every (\\d+) ms", strconv.Itoa(giveIntervalMs)},
		{arch, "at most one halving per (\\d+) ms per asker", strconv.Itoa(giveIntervalMs)},
		{arch, "in-memory cache \\((\\d+) shards, [\\d,]+ vectors in total", strconv.Itoa(cacheShards)},
		// Trending sketch levels: minute, hour, day.
		{arch, "Windows of up to (\\S+ h) use minute sketches", keep(trendLevels[0].keep)},
		{arch, "use minute sketches, up to (\\S+ h) \\(`day`\\) hourly ones", keep(trendLevels[1].keep)},
		{arch, "hourly ones, up to (\\S+ days) \\(`7d`", keep(trendLevels[2].keep)},
		{arch, "windows longer than (\\S+ days) are refused", keep(trendLevels[2].keep)},
		{arch, "1 min and 1 h slots of the last (\\S+ h) and \\S+ days", keep(trendLevels[0].keep)},
		{arch, "1 min and 1 h slots of the last \\S+ h and (\\S+) days", strconv.FormatInt(trendLevels[2].keep/86400+1, 10)},
		{ops, "per minute for (\\S+ h), per hour", keep(trendLevels[0].keep)},
		{ops, "per hour for (\\S+ h) and per UTC day", keep(trendLevels[1].keep)},
		{ops, "and per UTC day for (\\S+ days) \\|", keep(trendLevels[2].keep)},
		{ops, "still keeps \\((\\S+ h) of minutes,", keep(trendLevels[0].keep)},
		{ops, "of minutes, (\\S+ h) of hours,", keep(trendLevels[1].keep)},
		{ops, "of hours, (\\S+ days) of days", keep(trendLevels[2].keep)},
		{ops, "`future_stamp` \\(a record more than (\\S+ s) ahead", seconds(maxClockDriftMs * time.Millisecond)},
		{ops, "wall clock steps \\(more than (\\S+ s) apart from the monotonic clock\\)", testkit.Human(stepTolerance)},
		{ops, "slots deleted by the sweep \\(every (\\S+ s)\\)", testkit.Human(sweepWindowsEvery)},
		{ops, "at most one per budget per (\\d+) ms\\)", strconv.Itoa(askIntervalMs)},
	})
}
