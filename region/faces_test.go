package region

import (
	"reflect"
	"testing"
)

// maxReplicaMethods bounds Replica's own exported methods: a method of a
// data type belongs on that type's face (doc.go, "Faces"), not on Replica.
const maxReplicaMethods = 30

func TestReplicaMethodsStayFew(t *testing.T) {
	typ := reflect.TypeOf(&Replica{})
	if n := typ.NumMethod(); n > maxReplicaMethods {
		names := make([]string, 0, n)
		for i := range n {
			names = append(names, typ.Method(i).Name)
		}
		t.Fatalf("*Replica has %d exported methods, want at most %d: move data-type methods to their face: %v",
			n, maxReplicaMethods, names)
	}
}

// A face is a value over the replica it was taken from: taking one does
// not allocate.
func TestFacesDoNotAllocate(t *testing.T) {
	r := &Replica{}
	var sink any
	allocs := testing.AllocsPerRun(100, func() {
		l, c, u, b := r.Likes(), r.Counters(), r.Uniques(), r.Budgets()
		w, s, n, a := r.Windows(), r.Lists(), r.Numbers(), r.Admin()
		if l.r != r || c.r != r || u.r != r || b.r != r || w.r != r || s.r != r || n.r != r || a.r != r {
			sink = r
		}
	})
	if allocs != 0 || sink != nil {
		t.Fatalf("taking the faces: %v allocations, sink %v; want 0 and every face over r", allocs, sink)
	}
}
