package replication

// The messages of repair below a segment (antientropy.go, pull.go): a
// segment's part digests, and the entries of some parts but those the
// asker holds.

import (
	"encoding/binary"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/tally-dev/tally/storage"
)

// PartsRequest asks for the digests of the parts of one segment.
type PartsRequest struct {
	Segment int
}

// Parts answers a PartsRequest: the digest of each part of the segment
// (storage.SubSegments of them, XOR of the part's entry hashes).
type Parts struct {
	Segment int
	Sums    [storage.SubSegments]uint64
}

// DiffRequest asks for the entries of some parts of a segment, after a
// cursor, but those whose entry hash is in Have: the asker holds them
// identically. Have may leave out some of the asker's entries (it is
// bounded); the peer then sends them too, which costs bytes, not
// correctness.
//
// With For set (the asker's replica id), the peer sends only what the
// asker may take from it (replication/authority.go): its own entries and
// parts of records, the asker's, and those of replicas that write the
// segment's shard no more. Everything else the asker would refuse, and
// gets from its writer. Without For (typeDiffReq, all there was before),
// it sends every entry.
type DiffRequest struct {
	Segment int
	For     string   // the asker; "" for every entry
	Parts   uint64   // bit p: part p of the segment differs
	Have    []uint64 // entry hashes the asker holds in those parts
	After   []byte   // resume after this storage key; nil from the start
}

// maxPageBytes bounds a compressed page's decoded size (a page is about
// half of MaxMessageBytes; this is far above any configured one).
const maxPageBytes = 64 << 20

// compressMin is the size below which a diff page is sent as is:
// compressing a few entries saves less than it costs.
const compressMin = 256

// AppendPartsRequest encodes q.
func AppendPartsRequest(b []byte, q *PartsRequest) []byte {
	b = append(b, wireV1, typePartsReq)
	return binary.AppendUvarint(b, uint64(q.Segment))
}

// DecodePartsRequest decodes an AppendPartsRequest encoding.
func DecodePartsRequest(p []byte) (*PartsRequest, error) {
	r := reader{b: p}
	r.header(typePartsReq)
	q := &PartsRequest{Segment: r.segment()}
	return q, r.finish("parts request")
}

// AppendParts encodes ps sparsely: a part with no entries has digest 0,
// and most parts of a small segment have none, so a mask of the nonzero
// parts (8 bytes) comes first, then their digests only.
func AppendParts(b []byte, ps *Parts) []byte {
	b = append(b, wireV1, typeParts)
	b = binary.AppendUvarint(b, uint64(ps.Segment))
	var mask uint64
	for i, x := range ps.Sums {
		if x != 0 {
			mask |= 1 << i
		}
	}
	b = binary.LittleEndian.AppendUint64(b, mask)
	for _, x := range ps.Sums {
		if x != 0 {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	}
	return b
}

// DecodeParts decodes an AppendParts encoding.
func DecodeParts(p []byte) (*Parts, error) {
	r := reader{b: p}
	r.header(typeParts)
	ps := &Parts{Segment: r.segment()}
	mask := r.u64()
	for i := range ps.Sums {
		if mask&(1<<i) == 0 {
			continue
		}
		if ps.Sums[i] = r.u64(); r.err == nil && ps.Sums[i] == 0 {
			r.fail("part %d: zero digest marked nonzero", i)
		}
	}
	return ps, r.finish("parts")
}

// AppendDiffRequest encodes q: the segment, the asker if For is set
// (typeOwnDiffReq), the parts as 8 bytes, the hashes (a count, then 8
// bytes each) and the cursor.
func AppendDiffRequest(b []byte, q *DiffRequest) []byte {
	if q.For == "" {
		b = append(b, wireV1, typeDiffReq)
		b = binary.AppendUvarint(b, uint64(q.Segment))
	} else {
		b = append(b, wireV1, typeOwnDiffReq)
		b = binary.AppendUvarint(b, uint64(q.Segment))
		b = appendStr(b, q.For)
	}
	b = binary.LittleEndian.AppendUint64(b, q.Parts)
	b = binary.AppendUvarint(b, uint64(len(q.Have)))
	for _, h := range q.Have {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return appendBlob(b, q.After)
}

// DecodeDiffRequest decodes an AppendDiffRequest encoding.
func DecodeDiffRequest(p []byte) (*DiffRequest, error) {
	r := reader{b: p}
	typ := byte(typeDiffReq)
	if len(p) >= 2 && p[1] == typeOwnDiffReq {
		typ = typeOwnDiffReq
	}
	r.header(typ)
	q := &DiffRequest{Segment: r.segment()}
	if typ == typeOwnDiffReq {
		q.For = r.id()
	}
	q.Parts = r.u64()
	n := r.count()
	if r.err == nil && n*8 > len(r.b) {
		r.fail("truncated hashes")
	}
	if r.err == nil && n > 0 {
		q.Have = make([]uint64, n)
		for i := range q.Have {
			q.Have[i] = r.u64()
		}
	}
	q.After = r.blob()
	return q, r.finish("diff request")
}

// AppendDiffPage encodes pg as a DiffRequest's answer: a codec byte, then
// pg's AppendPage encoding, as is (0) or as one S2 block (1) if that is
// smaller.
func AppendDiffPage(b []byte, pg *Page) []byte {
	raw := AppendPage(nil, pg)
	b = append(b, wireV1, typeDiffPage)
	if len(raw) >= compressMin {
		if z := s2.EncodeBetter(nil, raw); len(z) < len(raw) {
			return append(append(b, 1), z...)
		}
	}
	return append(append(b, 0), raw...)
}

// DecodeDiffPage decodes an AppendDiffPage encoding.
func DecodeDiffPage(p []byte) (*Page, error) {
	r := reader{b: p}
	r.header(typeDiffPage)
	codec := r.byte()
	if r.err != nil {
		return nil, fmt.Errorf("decode diff page: %w", r.err)
	}
	raw := r.b
	switch codec {
	case 0:
	case 1:
		n, err := s2.DecodedLen(raw)
		if err != nil || n > maxPageBytes {
			return nil, fmt.Errorf("decode diff page: %w: compressed length %d (%v)", ErrBadMessage, n, err)
		}
		if raw, err = s2.Decode(nil, raw); err != nil {
			return nil, fmt.Errorf("decode diff page: %w: %v", ErrBadMessage, err)
		}
	default:
		return nil, fmt.Errorf("decode diff page: %w: codec %d", ErrBadMessage, codec)
	}
	pg, err := DecodePage(raw)
	if err != nil {
		return nil, fmt.Errorf("decode diff page: %w", err)
	}
	return pg, nil
}
