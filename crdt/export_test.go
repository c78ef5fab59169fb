package crdt

// What only the tests use.

import "strings"

// IsBucketName reports whether name is a time bucket's name rather than an
// id: it contains '#'.
func IsBucketName(name string) bool { return strings.IndexByte(name, '#') >= 0 }

// ApplyKeyed is ApplyKeyedCounted for an exact counter: it counts the
// amount asked.
func (r *LikeRecord) ApplyKeyed(self string, amount int64, hlc HLC) (delta int64) {
	return r.ApplyKeyedCounted(self, amount, amount, hlc)
}
