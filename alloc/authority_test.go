package alloc

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
)

// startAuthority serves writes to kv over nc for the test's life.
func startAuthority(t *testing.T, kv KV, cfg AuthorityConfig) {
	t.Helper()
	a, err := NewAuthority(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
}

// TestAuthorityNumbersExactly: leaseholders that write only through the lease
// authority number as they do writing the bucket themselves: every number
// taken once, every lease given back, every used number ranked.
func TestAuthorityNumbersExactly(t *testing.T) {
	kv, nc := startKV(t)
	startAuthority(t, kv, AuthorityConfig{NC: nc, KV: kv, MaxBlock: 64})
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]string{}
	var total uint64
	for _, id := range []string{"us-1", "eu.1"} {
		cfg := testConfig(nil, id)
		cfg.KV = &RemoteKV{NC: nc, Bucket: kv, Replica: id}
		h, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		h.Start()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n uint64
			// A bound on a stuck run, not on speed: a loaded CI machine
			// once took more than 30 s for these 600 numbers.
			deadline := time.Now().Add(2 * time.Minute)
			for n < 300 && time.Now().Before(deadline) {
				sp, ok := h.Take(7)
				if !ok {
					time.Sleep(5 * time.Millisecond) // a writer waiting for a lease
					continue
				}
				mu.Lock()
				for p := sp.Start; p < sp.End; p++ {
					if other, dup := seen[p]; dup {
						t.Errorf("number %d taken by %s and %s", p, other, id)
					}
					seen[p] = id
				}
				mu.Unlock()
				n += sp.Len()
				h.Durable()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.Close(ctx); err != nil {
				t.Errorf("%s: close: %v", id, err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	st, err := Read(context.Background(), kv, "likes")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Leases) != 0 || st.Dense.Rank != total || total < 600 {
		t.Fatalf("after %d numbers taken: %d leases open, rank %d", total, len(st.Leases), st.Dense.Rank)
	}
}

// TestAuthorityRefusesForgeries: a forged state written through the
// authority, in the writer's own name or through another's subject, is
// refused and never stored.
func TestAuthorityRefusesForgeries(t *testing.T) {
	kv, nc := startKV(t)
	startAuthority(t, kv, AuthorityConfig{NC: nc, KV: kv, MaxBlock: 64})
	ctx := context.Background()
	eu := &RemoteKV{NC: nc, Bucket: kv, Replica: "eu-1"}
	us := &RemoteKV{NC: nc, Bucket: kv, Replica: "us-1"}
	s := &seqKV{kv: eu, key: "seq.likes", leaseholder: "eu-1", opTimeout: time.Second}
	if _, err := s.apply(ctx, func(st *State, _ string) error { st.Acquire("eu-1", 32); return nil }); err != nil {
		t.Fatalf("eu-1's honest acquire: %v", err)
	}
	e, err := kv.Get(ctx, "seq.likes")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := DecodeState(e.Value())
	for what, forge := range map[string]func(*State){
		"eu-1's lease reported used":    func(s *State) { _ = s.Renew("eu-1", 1, 33) },
		"a dense rank ahead":            func(s *State) { s.Dense.Rank, s.Dense.Pos = 32, 33; s.Leases = nil; s.HWM = 33 },
		"a block of a million numbers":  func(s *State) { s.Acquire("us-1", 1<<20) },
		"eu-1's nonce replaced":         func(s *State) { s.Applied["eu-1"] = "forged" },
		"the sequence restarted from 1": func(s *State) { *s = *NewState() },
	} {
		next := st.Clone()
		forge(next)
		if _, err := us.Update(ctx, "seq.likes", next.Encode(), e.Revision()); !errors.Is(err, ErrRefused) {
			t.Errorf("us-1 wrote %s: %v", what, err)
		}
	}
	for what, req := range map[string]writeRequest{
		"a junk key":             {Key: "junk", Value: []byte("x")},
		"a claim for eu-1":       {Key: "ms.likes.10", Value: []byte(`{"sequence":"likes","number":10,"item":"i","replica":"eu-1"}`)},
		"a sequence of bad name": {Key: "seq.a.b", Value: NewState().Encode()},
		"a state that is not":    {Key: "seq.other", Value: []byte("{")},
	} {
		b, _ := json.Marshal(req)
		m, err := nc.Request(AuthoritySubject("us-1"), b, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep writeReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Code != "refused" {
			t.Errorf("us-1 wrote %s: %+v %v", what, rep, err)
		}
	}
	if after, err := kv.Get(ctx, "seq.likes"); err != nil || after.Revision() != e.Revision() {
		t.Fatalf("the sequence changed: %v", err)
	}
}

// memEntry is a KV entry of memKV.
type memEntry struct {
	key string
	val []byte
	rev uint64
}

func (e memEntry) Bucket() string                  { return "mem" }
func (e memEntry) Key() string                     { return e.key }
func (e memEntry) Value() []byte                   { return e.val }
func (e memEntry) Revision() uint64                { return e.rev }
func (e memEntry) Created() time.Time              { return time.Time{} }
func (e memEntry) Delta() uint64                   { return 0 }
func (e memEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// memKV is a KV in memory with the bucket's compare-and-swap.
type memKV struct {
	mu   sync.Mutex
	rev  uint64
	keys map[string]memEntry
}

func (m *memKV) Get(_ context.Context, key string) (jetstream.KeyValueEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

func (m *memKV) Create(ctx context.Context, key string, value []byte, _ ...jetstream.KVCreateOpt) (uint64, error) {
	return m.Update(ctx, key, value, 0)
}

func (m *memKV) Update(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	switch {
	case rev == 0 && ok:
		return 0, jetstream.ErrKeyExists
	case rev != 0 && (!ok || e.rev != rev):
		return 0, jetstream.ErrKeyRevisionMismatch
	}
	m.rev++
	m.keys[key] = memEntry{key, append([]byte(nil), value...), m.rev}
	return m.rev, nil
}

// FuzzAuthorityServe: whatever a replica sends, the authority answers
// without panicking, and every state it lets through is well-formed.
func FuzzAuthorityServe(f *testing.F) {
	st := NewState()
	st.Acquire("eu-1", 16)
	st.Acquire("us-1", 16)
	base := st.Encode()
	next := st.Clone()
	_ = next.Renew("us-1", 2, 20)
	good, _ := json.Marshal(writeRequest{Key: "seq.likes", Rev: 1, Value: next.Encode()})
	f.Add("us-1", good)
	f.Add("eu-1", good)
	f.Add("us-1", []byte(`{"key":"seq.likes","rev":1,"value":"e30="}`))
	f.Add("us-1", []byte(`{"key":"ms.likes.3","value":"e30="}`))
	f.Add("x", []byte(`not json`))
	f.Fuzz(func(t *testing.T, writer string, data []byte) {
		kv := &memKV{keys: map[string]memEntry{}}
		if _, err := kv.Update(context.Background(), "seq.likes", base, 0); err != nil {
			t.Fatal(err)
		}
		a := &Authority{cfg: AuthorityConfig{KV: kv, MaxBlock: 64, OpTimeout: time.Second}, log: hclog.NewNullLogger()}
		rep := a.serve(context.Background(), writer, data)
		e, err := kv.Get(context.Background(), "seq.likes")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Code == "" && e.Revision() > 1 {
			if _, err := DecodeState(e.Value()); err != nil {
				t.Fatalf("stored a bad state: %v", err)
			}
		}
		if rep.Code != "" && e.Revision() != 1 {
			t.Fatalf("answered %q and wrote", rep.Code)
		}
	})
}
