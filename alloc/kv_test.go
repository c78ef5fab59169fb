package alloc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A sequence's key is created once, by whichever leaseholder gets there first;
// once deleted (by a stray operator command or stolen credentials) it is
// never silently created again, which would restart numbering at 1.
func TestDeletedSequenceIsNotRecreated(t *testing.T) {
	kv, _ := startKV(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &seqKV{kv: kv, key: "seq.likes", leaseholder: "h", opTimeout: time.Second}
			_, _, errs[i] = s.read(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent creator %d: %v", i, err)
		}
	}
	if err := kv.Delete(ctx, "seq.likes"); err != nil {
		t.Fatal(err)
	}
	s := &seqKV{kv: kv, key: "seq.likes", leaseholder: "h", opTimeout: time.Second}
	if _, _, err := s.read(ctx); !errors.Is(err, ErrSequenceDeleted) {
		t.Fatalf("read after delete: %v, want ErrSequenceDeleted", err)
	}
	if err := kv.Purge(ctx, "seq.likes"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.read(ctx); !errors.Is(err, ErrSequenceDeleted) {
		t.Fatalf("read after purge: %v, want ErrSequenceDeleted", err)
	}
}
