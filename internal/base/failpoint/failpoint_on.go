//go:build chaos

package failpoint

// enabled is true in a chaos build: armed points are on.
const enabled = true

// On reports whether the point n is armed in s.
func (s *Set) On(n Name) bool { return s != nil && s.armed[n] }
