package deploy_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// likeLoad likes items post0..post<items-1>, each time by a new user, from
// two workers at random replicas of its targets, until stop. A like
// without an answer (its replica stopping) or refused may have been
// applied, so it is sent again, elsewhere, until acknowledged: a like of
// one user counts once, and liked is exactly what was acknowledged.
type likeLoad struct {
	mu      sync.Mutex
	targets []string
	liked   map[string]map[string]bool // item -> users acknowledged
	resent  int
	seq     int
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// startLikeLoad starts the workers; finish stops them, and so does the
// end of the test if it fails first.
func startLikeLoad(t *testing.T, targets []string, items int, seed uint64) *likeLoad {
	l := &likeLoad{targets: slices.Clone(targets), liked: map[string]map[string]bool{}, stop: make(chan struct{})}
	t.Cleanup(l.halt)
	for w := range 2 { // two keep likes concurrent; four only cost CPU the moves wait on
		l.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), seed))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				l.seq++
				user := fmt.Sprintf("w%d-%d", w, l.seq)
				l.mu.Unlock()
				l.like(rng, fmt.Sprintf("post%d", rng.IntN(items)), user)
			}
		})
	}
	return l
}

// like sends one like until a target acknowledges it.
func (l *likeLoad) like(rng *rand.Rand, item, user string) {
	for {
		l.mu.Lock()
		at := l.targets[rng.IntN(len(l.targets))]
		l.mu.Unlock()
		st, _, err := testkit.DoJSON("PUT", at+"/v1/likes/"+item+"/"+user, "")
		l.mu.Lock()
		if err == nil && st == 200 {
			if l.liked[item] == nil {
				l.liked[item] = map[string]bool{}
			}
			l.liked[item][user] = true
			l.mu.Unlock()
			return
		}
		l.resent++
		l.mu.Unlock()
	}
}

// halt stops the workers and waits for them.
func (l *likeLoad) halt() {
	l.stopped.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// setTargets changes where the likes go from now on.
func (l *likeLoad) setTargets(targets []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.targets = slices.Clone(targets)
}

// finish stops the workers and returns the likes acknowledged, how many
// in all, and how many sends were repeated.
func (l *likeLoad) finish() (liked map[string]map[string]bool, total, resent int) {
	l.halt()
	for _, users := range l.liked {
		total += len(users)
	}
	return l.liked, total, l.resent
}
