// Package authguard slows the guessing of tokens: each failed attempt to
// authenticate from an address takes a token from that address's bucket,
// and once the bucket is empty the next attempt from the address waits
// until one has refilled before it is even checked. An address that keeps
// failing owes more and more: past MaxWait, its attempts are refused
// outright. A correct token from an address with tokens left costs
// nothing, so clients that authenticate many connections at once are not
// slowed.
//
// One Guard may be shared by several front doors (RESP's AUTH, the HTTP
// API's bearer tokens), so an address cannot guess twice as fast by using
// both. It remembers at most MaxAddrs addresses, forgetting the least
// recently failed first, so its memory stays bounded whoever knocks.
package authguard

import (
	"container/list"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults for Config fields left zero.
const (
	DefaultRate     = rate.Limit(1) // failures per second, refilled
	DefaultBurst    = 10            // failures free of any wait
	DefaultMaxWait  = 10 * time.Second
	DefaultMaxAddrs = 16384
)

// Config configures a Guard.
type Config struct {
	// Rate is how many failures per second an address is given back;
	// Burst how many it may spend at once before waiting.
	Rate  rate.Limit
	Burst int
	// MaxWait bounds an attempt's wait: an address owing more is refused.
	MaxWait time.Duration
	// MaxAddrs bounds the addresses remembered.
	MaxAddrs int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Guard holds each recently failing address's bucket. Safe for
// concurrent use.
type Guard struct {
	cfg Config

	mu  sync.Mutex
	m   map[string]*list.Element // of *entry
	lru list.List                // most recently failed first
}

type entry struct {
	addr string
	lim  *rate.Limiter
}

// New returns a Guard with cfg's zero fields defaulted.
func New(cfg Config) *Guard {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.MaxAddrs <= 0 {
		cfg.MaxAddrs = DefaultMaxAddrs
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Guard{cfg: cfg, m: map[string]*list.Element{}}
}

// Host is the address part of a "host:port" remote address (the port
// changes with every connection), or addr itself if it has no port.
func Host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Wait is how long an attempt from addr must wait before it is checked:
// 0 unless the address's failures emptied its bucket. ok is false if the
// wait would pass MaxWait: refuse the attempt unchecked. A nil Guard
// never waits.
func (g *Guard) Wait(addr string) (wait time.Duration, ok bool) {
	if g == nil {
		return 0, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e, found := g.m[addr]
	if !found {
		return 0, true
	}
	lim := e.Value.(*entry).lim
	tokens := lim.TokensAt(g.cfg.Now())
	if tokens >= 1 {
		return 0, true
	}
	wait = time.Duration((1 - tokens) / float64(g.cfg.Rate) * float64(time.Second))
	return wait, wait <= g.cfg.MaxWait
}

// Fail records a failed attempt from addr: it takes a token from the
// address's bucket, into debt if it is empty, so that concurrent
// failures push the next attempt's wait further out.
func (g *Guard) Fail(addr string) {
	if g == nil {
		return
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.m[addr]; ok {
		g.lru.MoveToFront(e)
		e.Value.(*entry).lim.ReserveN(now, 1)
		return
	}
	lim := rate.NewLimiter(g.cfg.Rate, g.cfg.Burst)
	lim.ReserveN(now, 1)
	g.m[addr] = g.lru.PushFront(&entry{addr: addr, lim: lim})
	for len(g.m) > g.cfg.MaxAddrs {
		delete(g.m, g.lru.Remove(g.lru.Back()).(*entry).addr)
	}
}

// Len is how many addresses the Guard remembers.
func (g *Guard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}
