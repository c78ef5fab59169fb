package node

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// WindowConfig turns the windows settings into the replica's.
func (c *Config) WindowConfig() (*region.WindowConfig, error) {
	wc := &region.WindowConfig{TrendingCapacity: c.TrendingCapacity}
	var err error
	if wc.Past, err = parseSpan(c.EventTimePast); err != nil || wc.Past <= 0 {
		return nil, fmt.Errorf("event_time_past %q: want a positive duration such as 5m", c.EventTimePast)
	}
	if wc.Future, err = parseSpan(c.EventTimeFuture); err != nil || wc.Future <= 0 {
		return nil, fmt.Errorf("event_time_future %q: want a positive duration such as 1m", c.EventTimeFuture)
	}
	if c.TrendingCapacity < 1 || c.TrendingCapacity > 100_000 {
		return nil, fmt.Errorf("trending_capacity %d: want 1..100000", c.TrendingCapacity)
	}
	levels, err := ParseWindowLevels(c.Windows)
	if err != nil {
		return nil, fmt.Errorf("windows %q: %w", c.Windows, err)
	}
	wc.Rules = append(wc.Rules, region.WindowRule{Levels: levels})
	for _, r := range c.WindowRules {
		rule := region.WindowRule{Prefix: r.Prefix}
		switch r.Kind {
		case "":
		case "likes":
			rule.Kind = storage.Likes
		case "counters":
			rule.Kind = storage.Counters
		default:
			return nil, fmt.Errorf("window %q: kind %q: want likes, counters or nothing (both)", r.Prefix, r.Kind)
		}
		if rule.Levels, err = ParseWindowLevels(r.Levels); err != nil {
			return nil, fmt.Errorf("window %q: levels %q: %w", r.Prefix, r.Levels, err)
		}
		wc.Rules = append(wc.Rules, rule)
	}
	if wc.Uniques, err = ParseWindowLevels(c.UniquesWindows); err != nil {
		return nil, fmt.Errorf("uniques_windows %q: %w", c.UniquesWindows, err)
	}
	if wc.Uniques == nil {
		wc.Uniques = []region.WindowLevel{} // "": none, rather than the default
	}
	if err := wc.Validate(); err != nil {
		return nil, err
	}
	return wc, nil
}

// ParseWindowLevels reads "1s:3h,1m:15d,1h:forever": width:keep pairs.
func ParseWindowLevels(s string) ([]region.WindowLevel, error) {
	var out []region.WindowLevel
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		w, k, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("level %q: want width:keep, e.g. 1m:15d", part)
		}
		width, err := parseSpan(w)
		if err != nil || width <= 0 {
			return nil, fmt.Errorf("level %q: bad width", part)
		}
		var keep time.Duration
		if k != "forever" {
			if keep, err = parseSpan(k); err != nil || keep <= 0 {
				return nil, fmt.Errorf("level %q: bad keep (a duration, or forever)", part)
			}
		}
		out = append(out, region.WindowLevel{Width: width, Keep: keep})
	}
	return out, nil
}

// parseSpan reads a Go duration, or whole days ("15d") or years of 365
// days ("3y").
func parseSpan(s string) (time.Duration, error) {
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "y": 365 * 24 * time.Hour} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 0 || v > 200*365 {
				return 0, fmt.Errorf("bad duration %q", s)
			}
			return time.Duration(v) * unit, nil
		}
	}
	return time.ParseDuration(s)
}
