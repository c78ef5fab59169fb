package httpapi

import (
	"bytes"
	"strings"
	"testing"
	"testing/iotest"
)

// A Content-Length alone does not buy memory: a client that claims a
// large body and sends nothing gets at most maxUpfrontBody allocated, and
// a body that does arrive is read whole however it is split.
func TestReadBodyGrowsAsBytesArrive(t *testing.T) {
	claimed := int64(8 << 20)
	buf, err := readBody(strings.NewReader(""), nil, claimed)
	if err != nil {
		t.Fatal(err)
	}
	if cap(buf) > maxUpfrontBody {
		t.Fatalf("a %d-byte claim with no body allocated %d bytes, want at most %d", claimed, cap(buf), maxUpfrontBody)
	}
	want := bytes.Repeat([]byte(`{"type":"incr","key":"k"}`+"\n"), 20000) // ~500 KB
	got, err := readBody(iotest.HalfReader(bytes.NewReader(want)), buf, int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d of %d bytes, err %v", len(got), len(want), err)
	}
	small, err := readBody(strings.NewReader("[]"), nil, 2)
	if err != nil || string(small) != "[]" {
		t.Fatalf("small body: %q %v", small, err)
	}
}
