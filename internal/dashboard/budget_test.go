package dashboard

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// budgetRoutes answers a region's budget routes: a read of gift-cards, a
// grant, and spends scripted as a budget whose rights arrive after the
// first refusal and which runs out after two spends.
func (f *fakeRegion) budgetRoutes(mux *http.ServeMux, record func(http.ResponseWriter, *http.Request) string) {
	mux.HandleFunc("GET /v1/budgets/gift-cards", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"key": "gift-cards", "remaining": 90, "granted": 100, "spent": 10,
			"rights": map[string]int{f.name + "-1": 90}, "local_rights": 90, "approx": false})
	})
	mux.HandleFunc("POST /v1/budgets/{key}/grant", func(w http.ResponseWriter, r *http.Request) {
		record(w, r)
		_ = json.NewEncoder(w).Encode(map[string]any{"key": r.PathValue("key"), "granted": 100, "remaining": 190, "rights": 190})
	})
	mux.HandleFunc("POST /v1/budgets/{key}/spend", func(w http.ResponseWriter, r *http.Request) {
		record(w, r)
		f.mu.Lock()
		n := f.spends
		f.spends++
		f.mu.Unlock()
		switch {
		case n == 0:
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "elsewhere", "code": "rights_elsewhere", "remaining": 2, "rights": 0})
		case n <= 2:
			_ = json.NewEncoder(w).Encode(map[string]any{"key": r.PathValue("key"), "spent": 1, "remaining": 2 - (n - 1), "rights": 2 - (n - 1)})
		default:
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": "exhausted", "code": "budget_exhausted", "remaining": 0, "rights": 0})
		}
	})
}

func TestDashboardBudget(t *testing.T) {
	d, fakes := fakeDashboard(t)
	st, out := dashDo(t, d, "GET", "/api/overview?budget=gift-cards")
	var ov Overview
	raw, _ := json.Marshal(out)
	if err := json.Unmarshal(raw, &ov); err != nil || st != http.StatusOK || ov.Budget != "gift-cards" {
		t.Fatalf("overview: %d %s %v", st, raw, err)
	}
	if b := ov.Regions[0].Budget; b == nil || b.Remaining != 90 || b.LocalRights != 90 {
		t.Fatalf("us budget: %+v", b)
	}

	// Four spends: the first is refused rights_elsewhere and retried, two
	// are made, the rest are refused as exhausted.
	st, out = dashDo(t, d, "POST", "/api/budget?region=us&key=gift-cards&op=spend&n=4")
	if st != http.StatusOK || out["ok"] != 2.0 || out["retries"] != 1.0 || out["failed"] != 0.0 ||
		out["refused"].(map[string]any)["budget_exhausted"] != 2.0 || out["remaining"] != 0.0 {
		t.Fatalf("spends: %d %v", st, out)
	}
	st, out = dashDo(t, d, "POST", "/api/budget?region=eu&key=gift-cards&op=grant&by=100")
	if st != http.StatusOK || out["ok"] != 1.0 || out["rights"] != 190.0 {
		t.Fatalf("grant: %d %v", st, out)
	}
	wantUS := []string{"POST /v1/budgets/gift-cards/spend Bearer writetok {\"by\":1}"}
	if got := fakes[0].recorded(); len(got) != 5 || slices.ContainsFunc(got, func(s string) bool { return s != wantUS[0] }) {
		t.Fatalf("us got %q", got)
	}
	if got := fakes[1].recorded(); !slices.Equal(got, []string{"POST /v1/budgets/gift-cards/grant Bearer writetok {\"by\":100}"}) {
		t.Fatalf("eu got %q", got)
	}

	for _, bad := range []struct {
		q    string
		want int
	}{
		{"region=us&key=gift-cards&op=burn", http.StatusBadRequest},
		{"region=us&op=spend", http.StatusBadRequest},
		{"region=us&key=k&op=spend&n=0", http.StatusBadRequest},
		{"region=us&key=k&op=spend&n=1001", http.StatusBadRequest},
		{"region=us&key=k&op=grant&n=2", http.StatusBadRequest},
		{"region=us&key=k&op=grant&by=-3", http.StatusBadRequest},
		{"region=mars&key=k&op=spend", http.StatusNotFound},
	} {
		if st, out := dashDo(t, d, "POST", "/api/budget?"+bad.q); st != bad.want {
			t.Errorf("%s: %d %v, want %d", bad.q, st, out, bad.want)
		}
	}
	if st, out := dashDo(t, d, "POST", "/api/budget?region=ap&key=k&op=spend"); st != http.StatusBadGateway || out["failed"] != 1.0 {
		t.Errorf("spend at a region that is down: %d %v", st, out)
	}
}
