// Package ratelog bounds how often a repeating log line is written: the
// first occurrence is logged at once, then at most one line per interval,
// carrying how many occurrences were held back since the last line. A
// failure that repeats many times a second (a full disk, every merge
// refused by a stopped replica) then costs a few lines a minute, and the
// log still says it is going on and how often.
package ratelog

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultEvery is the interval used when Config.Every is zero.
const DefaultEvery = 10 * time.Second

// Config configures a Limiter.
type Config struct {
	// Logger receives the lines. Default: a null logger.
	Logger hclog.Logger
	// Level of the lines. Default hclog.Error (hclog.NoLevel is its zero).
	Level hclog.Level
	// Every is the least time between two lines. Default DefaultEvery.
	Every time.Duration
	// Now is the clock. Default time.Now; tests step their own.
	Now func() time.Time
}

// Limiter writes one kind of repeating line at a bounded rate. It is safe
// for concurrent use. It owns no goroutine: held-back occurrences are
// reported by the next line let through, so a failure that stops repeating
// leaves at most the count of its last interval unreported.
type Limiter struct {
	cfg Config

	mu     sync.Mutex
	last   time.Time // when a line was last written; zero: never
	held   int64     // occurrences held back since then
	logged int64     // lines written, for tests
}

// New returns a Limiter.
func New(cfg Config) *Limiter {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Level == hclog.NoLevel {
		cfg.Level = hclog.Error
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Limiter{cfg: cfg}
}

// Log writes msg with its key/value pairs if the last line is at least
// Every old (or there was none), adding "suppressed" (the occurrences held
// back since the last line) when that is not zero; otherwise it only counts
// the occurrence. It reports whether it wrote the line.
func (l *Limiter) Log(msg string, kv ...any) bool {
	now := l.cfg.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.cfg.Every {
		l.held++
		l.mu.Unlock()
		return false
	}
	held := l.held
	l.last, l.held = now, 0
	l.logged++
	l.mu.Unlock()
	if held > 0 {
		kv = append(kv[:len(kv):len(kv)], "suppressed", held)
	}
	l.cfg.Logger.Log(l.cfg.Level, msg, kv...)
	return true
}

// Counts reports the lines written and the occurrences held back since the
// last one.
func (l *Limiter) Counts() (logged, held int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.logged, l.held
}
