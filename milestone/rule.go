package milestone

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Rule says which numbers of a sequence are milestones.
type Rule struct {
	at     []uint64 // sorted
	powers bool     // every power of ten from 10
	every  uint64   // every multiple, 0 for none
}

// ParseRule parses a comma-separated list of milestones: plain numbers
// ("1000,1000000"), "10^k" for every power of ten from 10 on, and
// "every:N" for every multiple of N. Underscores in numbers are ignored
// ("1_000_000"). The empty string is the empty rule: no milestones.
func ParseRule(s string) (Rule, error) {
	var r Rule
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
		case f == "10^k":
			r.powers = true
		case strings.HasPrefix(f, "every:"):
			n, err := parseNumber(strings.TrimPrefix(f, "every:"))
			if err != nil {
				return Rule{}, fmt.Errorf("milestones %q: %w", f, err)
			}
			r.every = n
		default:
			n, err := parseNumber(f)
			if err != nil {
				return Rule{}, fmt.Errorf("milestones %q: %w (want a number, 10^k or every:N)", f, err)
			}
			r.at = append(r.at, n)
		}
	}
	slices.Sort(r.at)
	r.at = slices.Compact(r.at)
	return r, nil
}

func parseNumber(s string) (uint64, error) {
	n, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), 10, 64)
	if err != nil || n == 0 || n > 1<<62 {
		return 0, fmt.Errorf("%q is not a number in 1..2^62", s)
	}
	return n, nil
}

// Empty reports whether the rule has no milestones.
func (r Rule) Empty() bool { return len(r.at) == 0 && !r.powers && r.every == 0 }

// Hit reports whether n is a milestone.
func (r Rule) Hit(n uint64) bool {
	if r.every != 0 && n%r.every == 0 {
		return true
	}
	if r.powers && n >= 10 {
		m := n
		for m%10 == 0 {
			m /= 10
		}
		if m == 1 {
			return true
		}
	}
	_, ok := slices.BinarySearch(r.at, n)
	return ok
}

// Next returns the smallest milestone at or above n, if there is one
// below 2^64.
func (r Rule) Next(n uint64) (uint64, bool) {
	best, ok := uint64(0), false
	take := func(m uint64) {
		if !ok || m < best {
			best, ok = m, true
		}
	}
	if i, _ := slices.BinarySearch(r.at, n); i < len(r.at) {
		take(r.at[i])
	}
	if r.powers {
		for p := uint64(10); ; p *= 10 {
			if p >= n {
				take(p)
				break
			}
			if p > (1<<64-1)/10 {
				break
			}
		}
	}
	if r.every != 0 {
		q := max(n/r.every, 1)
		if q*r.every < n {
			q++
		}
		if q <= (1<<64-1)/r.every {
			take(q * r.every)
		}
	}
	return best, ok
}

// String is the rule in ParseRule's syntax.
func (r Rule) String() string {
	var parts []string
	for _, n := range r.at {
		parts = append(parts, strconv.FormatUint(n, 10))
	}
	if r.powers {
		parts = append(parts, "10^k")
	}
	if r.every != 0 {
		parts = append(parts, "every:"+strconv.FormatUint(r.every, 10))
	}
	return strings.Join(parts, ",")
}

// Upto lists the milestones in [1, n], for checkers.
func (r Rule) Upto(n uint64) []uint64 {
	var out []uint64
	for _, m := range r.at {
		if m <= n {
			out = append(out, m)
		}
	}
	if r.powers {
		for p := uint64(10); p <= n; p *= 10 {
			out = append(out, p)
			if p > (1<<63)/10 {
				break
			}
		}
	}
	if r.every != 0 {
		for m := r.every; m <= n; m += r.every {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
