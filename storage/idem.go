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
	if v.Value, n = binary.Varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad value", crdt.ErrCorrupt)
	}
	b = b[n:]
	if v.AtMs, n = binary.Varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad time", crdt.ErrCorrupt)
	}
	if n != len(b) {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: trailing bytes", crdt.ErrCorrupt)
	}
	return v, nil
}
