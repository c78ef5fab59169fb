package crdt

// MaxIDLen is the longest id (item, user, counter key, region, replica) in
// bytes.
const MaxIDLen = 128

// ValidID reports whether s is 1..MaxIDLen bytes of [A-Za-z0-9_.:@-]. The
// set excludes '/', which storage uses as its key separator.
func ValidID(s string) bool { return validID(s) }

// ValidIDBytes is ValidID for an id not yet copied into a string.
func ValidIDBytes(b []byte) bool { return validID(b) }

func validID[T string | []byte](s T) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '.', c == ':', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}
