//go:build !chaos

package failpoint

// enabled is false outside a chaos build: no point is ever on.
const enabled = false

// On is false outside a chaos build, whatever s arms: a constant the
// compiler folds into its callers, removing the bug's code behind it.
func (s *Set) On(Name) bool { return false }
