package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// ApproxConfig makes the counters under a prefix approximate (see
// region.ApproxRule): increments are counted in steps that grow with the
// counter, within a relative standard error.
type ApproxConfig struct {
	// Prefix is the key prefix the rule matches; "" is every counter. The
	// longest matching prefix wins.
	Prefix string `hcl:"prefix,label"`
	// Error is the relative standard error target, 0.001..0.5 (0.01: the
	// count's standard deviation is at most 1% of it).
	Error float64 `hcl:"error"`
}

// ParseApprox parses the flag form of a rule, "PREFIX=ERR", e.g.
// "views:=0.01" ("=0.05" for every counter).
func ParseApprox(s string) (ApproxConfig, error) {
	i := strings.LastIndex(s, "=")
	if i < 0 {
		return ApproxConfig{}, fmt.Errorf("approx %q: want PREFIX=ERROR, e.g. views:=0.01", s)
	}
	e, err := strconv.ParseFloat(s[i+1:], 64)
	if err != nil {
		return ApproxConfig{}, fmt.Errorf("approx %q: error %q is not a number such as 0.01", s, s[i+1:])
	}
	ac := ApproxConfig{Prefix: s[:i], Error: e}
	return ac, ac.validate()
}

// String is the rule in ParseApprox's form.
func (ac ApproxConfig) String() string {
	return ac.Prefix + "=" + strconv.FormatFloat(ac.Error, 'g', -1, 64)
}

func (ac ApproxConfig) validate() error {
	var errs []error
	if ac.Prefix != "" && !crdt.ValidID(ac.Prefix) {
		errs = append(errs, fmt.Errorf("approx %q: want a key prefix of [A-Za-z0-9_.:@-], at most 128, or \"\" for every counter", ac.Prefix))
	}
	if !(ac.Error >= region.MinApproxError && ac.Error <= region.MaxApproxError) {
		errs = append(errs, fmt.Errorf("approx %q: error %v: want %v..%v", ac.Prefix, ac.Error, region.MinApproxError, region.MaxApproxError))
	}
	return errors.Join(errs...)
}

// maxApproxRules bounds the rules: the writer checks each increment
// against them.
const maxApproxRules = 64

// validateApprox checks the rules, and that no numbered counter (a
// sequence counting increments) is approximate: its milestones promise
// the exact number of units.
func (c Config) validateApprox() error {
	var errs []error
	seen := map[string]bool{}
	for _, ac := range c.Approx {
		if err := ac.validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[ac.Prefix] {
			errs = append(errs, fmt.Errorf("approx %q is configured twice", ac.Prefix))
		}
		seen[ac.Prefix] = true
		for _, sc := range c.Sequences {
			if sc.Counts == CountsIncrements && approxOverlaps(ac.Prefix, sc.Match) {
				errs = append(errs, fmt.Errorf("sequence %s numbers increments of %q, some of which approx %q makes approximate: "+
					"a numbered counter must be exact", sc.Name, sc.Match, ac.Prefix))
			}
		}
	}
	if len(c.Approx) > maxApproxRules {
		errs = append(errs, fmt.Errorf("%d approx rules: at most %d", len(c.Approx), maxApproxRules))
	}
	return errors.Join(errs...)
}

// approxOverlaps reports whether some key a sequence's match accepts
// ("*", "p*" or a key) is under prefix.
func approxOverlaps(prefix, match string) bool {
	if p, ok := strings.CutSuffix(match, "*"); ok {
		return strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p)
	}
	return strings.HasPrefix(match, prefix)
}

// ApproxRules turns the approx settings into the replica's.
func (c *Config) ApproxRules() []region.ApproxRule {
	var out []region.ApproxRule
	for _, ac := range c.Approx {
		out = append(out, region.ApproxRule{Prefix: ac.Prefix, Error: ac.Error})
	}
	return out
}
