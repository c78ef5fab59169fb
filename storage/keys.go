package storage

// Kind selects which family of vectors a key belongs to.
type Kind byte

const (
	// Likes vectors count liked users per item.
	Likes Kind = 'l'
	// Counters vectors are generic PN-counters.
	Counters Kind = 'c'
)

func (k Kind) String() string {
	switch k {
	case Likes:
		return "likes"
	case Counters:
		return "counters"
	}
	return "unknown"
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return k == Likes || k == Counters }

const (
	prefixVector = 'v'
	prefixRecord = 'r'
	prefixMarker = 'x'
	prefixIdem   = 'i'
	prefixMeta   = 'm'
)

func appendKey(dst []byte, prefix byte, parts ...string) []byte {
	dst = append(dst, prefix)
	for _, p := range parts {
		dst = append(dst, '/')
		dst = append(dst, p...)
	}
	return dst
}

func vectorEntryKey(k Kind, item, replica string) []byte {
	return appendKey(make([]byte, 0, 5+len(item)+len(replica)), prefixVector, string(k), item, replica)
}

// vectorPrefix is "v/<k>/<item>/": all replicas' entries of one vector.
func vectorPrefix(k Kind, item string) []byte {
	return append(appendKey(nil, prefixVector, string(k), item), '/')
}

func recordKey(item, user string) []byte {
	return appendKey(make([]byte, 0, 3+len(item)+len(user)), prefixRecord, item, user)
}

func markerKey(item, user string) []byte {
	return appendKey(make([]byte, 0, 3+len(item)+len(user)), prefixMarker, item, user)
}

func idemKey(key, idem string) []byte {
	return appendKey(make([]byte, 0, 3+len(key)+len(idem)), prefixIdem, key, idem)
}

func metaKey(name string) []byte { return appendKey(nil, prefixMeta, name) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
