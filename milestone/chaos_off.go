//go:build !chaos

package milestone

// chaosBeforeClaim is a hook of the chaos build (chaos_on.go).
func chaosBeforeClaim(uint64) {}
