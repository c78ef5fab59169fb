package ratelog

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A failure repeating 20 times a second for a minute gives its first line
// at once, then one line per interval, each counting what it held back;
// together they account for every occurrence.
func TestLimiterLogsOnceThenAtABoundedRate(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := New(Config{
		Logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Trace, DisableTime: true}),
		Every:  10 * time.Second,
		Now:    func() time.Time { return now },
	})
	const rate, secs = 20, 60
	var wrote []int
	for i := range rate * secs {
		if l.Log("disk full", "error", "ENOSPC") {
			wrote = append(wrote, i)
		}
		now = now.Add(time.Second / rate)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(wrote) || len(lines) != secs/10 {
		t.Fatalf("%d lines written (%d reported) for %d s of a repeating failure, want %d:\n%s", len(lines), len(wrote), secs, secs/10, buf.String())
	}
	if wrote[0] != 0 {
		t.Errorf("the first occurrence was not logged at once: first line at occurrence %d", wrote[0])
	}
	if lines[0] != "[ERROR] disk full: error=ENOSPC" {
		t.Errorf("first line %q", lines[0])
	}
	for i, line := range lines[1:] {
		if want := "[ERROR] disk full: error=ENOSPC suppressed=199"; line != want {
			t.Errorf("line %d = %q, want %q", i+1, line, want)
		}
	}
	logged, held := l.Counts()
	if logged != int64(len(lines)) {
		t.Errorf("Counts = %d logged, %d lines written", logged, len(lines))
	}
	if got := logged + 199*(logged-1) + held; got != rate*secs {
		t.Errorf("lines and counts account for %d occurrences, want %d", got, rate*secs)
	}
}

// Property: for any arrival times, no two lines are closer than Every, the
// first occurrence is always written, and lines plus suppressed counts plus
// what is still held add up to the occurrences.
func TestLimiterProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		every := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		now := time.Unix(0, 0)
		var lineTimes []time.Time
		capture := &captureLogger{Logger: hclog.NewNullLogger()}
		l := New(Config{Logger: capture, Every: every, Now: func() time.Time { return now }})
		n := 1 + rng.IntN(500)
		for i := range n {
			if l.Log("x") {
				lineTimes = append(lineTimes, now)
			}
			if i == 0 && len(lineTimes) != 1 {
				t.Fatal("first occurrence not written")
			}
			now = now.Add(time.Duration(rng.Int64N(int64(2 * every / 3))))
		}
		for i := 1; i < len(lineTimes); i++ {
			if d := lineTimes[i].Sub(lineTimes[i-1]); d < every {
				t.Fatalf("two lines %s apart, Every %s", d, every)
			}
		}
		_, held := l.Counts()
		if got := int64(len(lineTimes)) + capture.suppressed + held; got != int64(n) {
			t.Fatalf("%d lines + %d suppressed + %d held = %d, want %d occurrences", len(lineTimes), capture.suppressed, held, got, n)
		}
	}
}

// captureLogger sums the suppressed counts of the lines it is given.
type captureLogger struct {
	hclog.Logger
	suppressed int64
}

func (c *captureLogger) Log(level hclog.Level, msg string, kv ...any) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "suppressed" {
			c.suppressed += kv[i+1].(int64)
		}
	}
}

// Concurrent callers: the limiter is one line per interval whoever calls.
func TestLimiterConcurrent(t *testing.T) {
	l := New(Config{Every: time.Hour})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				l.Log("x")
			}
		}()
	}
	wg.Wait()
	if logged, held := l.Counts(); logged != 1 || held != 7999 {
		t.Fatalf("Counts = %d logged, %d held; want 1, 7999", logged, held)
	}
}
