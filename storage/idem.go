package storage

import (
	"encoding/binary"
	"fmt"

	"github.com/tally-dev/tally/crdt"
)

// IdemValue is what an applied idempotent increment left behind: the
// counter's value right after it, and when it was applied (Unix ms), so a
// retry returns the same answer.
type IdemValue struct {
	Value int64
	AtMs  int64
}

// AppendIdemValue encodes v: version | zigzag Value | zigzag AtMs.
func AppendIdemValue(dst []byte, v IdemValue) []byte {
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, v.Value)
	return binary.AppendVarint(dst, v.AtMs)
}

// DecodeIdemValue decodes an AppendIdemValue encoding.
func DecodeIdemValue(b []byte) (IdemValue, error) {
	if len(b) == 0 || b[0] != 1 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad version", crdt.ErrCorrupt)
	}
	b = b[1:]
	var v IdemValue
	var n int
	if v.Value, n = varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad value", crdt.ErrCorrupt)
	}
	b = b[n:]
	if v.AtMs, n = varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad time", crdt.ErrCorrupt)
	}
	if n != len(b) {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: trailing bytes", crdt.ErrCorrupt)
	}
	return v, nil
}

// varint is binary.Varint, but it also rejects a padded (non-minimal)
// encoding, whose last byte is 0x00: every value has exactly one encoding.
func varint(b []byte) (int64, int) {
	x, n := binary.Varint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, 0
	}
	return x, n
}
