package httpapi

import (
	"fmt"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"testing"
)

func TestBudgetRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	// A spend from a budget never granted is refused as exhausted, with
	// the state it was refused on.
	r := e.do("POST", "/v1/budgets/gifts/spend", `{"by":1}`)
	if r.status != http.StatusConflict || r.body["code"] != frontdoor.CodeBudgetExhausted || num(t, r.body, "remaining") != 0 {
		t.Fatalf("spend from nothing: %d %s", r.status, r.raw)
	}
	b := e.do("POST", "/v1/budgets/gifts/grant", `{"by":10}`).ok(t)
	if num(t, b, "granted") != 10 || num(t, b, "remaining") != 10 || num(t, b, "rights") != 10 {
		t.Fatalf("grant: %v", b)
	}
	b = e.do("POST", "/v1/budgets/gifts/spend", `{"by":4,"idempotency_key":"order-1"}`).ok(t)
	if num(t, b, "spent") != 4 || num(t, b, "remaining") != 6 || b["duplicate"] != false {
		t.Fatalf("spend: %v", b)
	}
	b = e.do("POST", "/v1/budgets/gifts/spend", `{"by":4}`, "Idempotency-Key", "order-1").ok(t)
	if b["duplicate"] != true || num(t, b, "remaining") != 6 {
		t.Fatalf("retry: %v", b)
	}
	e.do("POST", "/v1/budgets/gifts/spend", `{"by":5,"idempotency_key":"order-1"}`).isError(t, http.StatusConflict, frontdoor.CodeIdempotencyMismatch)
	e.do("POST", "/v1/budgets/gifts/spend", "").ok(t) // by defaults to 1
	r = e.do("POST", "/v1/budgets/gifts/spend", `{"by":6}`)
	if r.status != http.StatusConflict || r.body["code"] != frontdoor.CodeBudgetExhausted || num(t, r.body, "remaining") != 5 || r.body["error"] == "" {
		t.Fatalf("overspend: %d %s", r.status, r.raw)
	}
	b = e.do("GET", "/v1/budgets/gifts", "").ok(t)
	if num(t, b, "remaining") != 5 || num(t, b, "granted") != 10 || num(t, b, "spent") != 5 || num(t, b, "local_rights") != 5 || b["approx"] != false {
		t.Fatalf("read: %v", b)
	}
	if rights, _ := b["rights"].(map[string]any); len(rights) != 1 || fmt.Sprint(rights["us-1"]) != "5" {
		t.Fatalf("rights: %v", b["rights"])
	}

	// Cashback: all or nothing, conserved, once per key, and the
	// merchant's balance is a budget: never overdrawn. The case:
	// a merchant holding 1 asked for a cashback of 5.
	e.do("POST", "/v1/budgets/pool/grant", `{"by":7}`).ok(t)
	e.do("POST", "/v1/budgets/shop/grant", `{"by":1}`).ok(t)
	cb := `{"budget":"pool","merchant":"shop","user":"ann","amount":5,"idempotency_key":"p1"}`
	r = e.do("POST", "/v1/cashback", cb)
	if r.status != http.StatusConflict || r.body["code"] != frontdoor.CodeBudgetExhausted || r.body["key"] != "shop" || num(t, r.body, "remaining") != 1 {
		t.Fatalf("cashback past the merchant's balance: %d %s", r.status, r.raw)
	}
	if e.counter("ann") != 0 {
		t.Fatalf("user credited %d by a refused cashback", e.counter("ann"))
	}
	e.do("POST", "/v1/budgets/shop/grant", `{"by":5}`).ok(t)
	b = e.do("POST", "/v1/cashback", cb).ok(t)
	if b["duplicate"] != false || fmt.Sprint(b["budget"], b["merchant"], b["user"]) != "map[key:pool value:2] map[key:shop value:1] map[key:ann value:5]" {
		t.Fatalf("cashback: %v", b)
	}
	if b = e.do("POST", "/v1/cashback", cb).ok(t); b["duplicate"] != true {
		t.Fatalf("cashback retry: %v", b)
	}
	r = e.do("POST", "/v1/cashback", `{"budget":"pool","merchant":"shop","user":"ann","amount":5,"idempotency_key":"p2"}`)
	if r.status != http.StatusConflict || r.body["code"] != frontdoor.CodeBudgetExhausted || r.body["key"] != "pool" {
		t.Fatalf("cashback past the pool: %d %s", r.status, r.raw)
	}
	if b := e.do("GET", "/v1/budgets/shop", "").ok(t); num(t, b, "remaining") != 1 || e.counter("ann") != 5 {
		t.Fatalf("balances %v %d after a refused cashback", b, e.counter("ann"))
	}

	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/budgets/g/grant", ``, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/budgets/g/grant", `{"by":0}`, http.StatusBadRequest, frontdoor.CodeBadBy},
		{"POST", "/v1/budgets/g/grant", `{"by":-3}`, http.StatusBadRequest, frontdoor.CodeBadBy},
		{"POST", "/v1/budgets/g/grant", `{"by":1099511627777}`, http.StatusBadRequest, frontdoor.CodeBadBy},
		{"POST", "/v1/budgets/g/grant", `{"by":1,"idempotency_key":"bad key"}`, http.StatusBadRequest, frontdoor.CodeBadID},
		{"POST", "/v1/budgets/g/grant", `{"by":"1"}`, http.StatusBadRequest, frontdoor.CodeBadJSON},
		{"POST", "/v1/budgets/g/spend", `{"by":0}`, http.StatusBadRequest, frontdoor.CodeBadBy},
		{"POST", "/v1/budgets/g/spend", `{"by":1,"idempotency_key":"a b"}`, http.StatusBadRequest, frontdoor.CodeBadID},
		{"POST", "/v1/budgets/g~x/spend", `{"by":1}`, http.StatusBadRequest, frontdoor.CodeBadID},
		{"GET", "/v1/budgets/g~x", ``, http.StatusBadRequest, frontdoor.CodeBadID},
		{"POST", "/v1/cashback", ``, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","user":"u","amount":1}`, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","amount":1,"idempotency_key":"k"}`, http.StatusBadRequest, frontdoor.CodeMissingField},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","user":"m","amount":1,"idempotency_key":"k"}`, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"p","user":"u","amount":1,"idempotency_key":"k"}`, http.StatusBadRequest, frontdoor.CodeBadRequest},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","user":"u","amount":1,"idempotency_key":"k","at":"yesterday"}`, http.StatusBadRequest, frontdoor.CodeBadTime},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","user":"u","amount":1,"idempotency_key":"k","at":1}`, http.StatusBadRequest, frontdoor.CodeBadTime},
		{"POST", "/v1/cashback", `{"budget":"p","merchant":"m","user":"u","amount":0,"idempotency_key":"k"}`, http.StatusBadRequest, frontdoor.CodeBadBy},
		{"POST", "/v1/cashback", `{"budget":"p/q","merchant":"m","user":"u","amount":1,"idempotency_key":"k"}`, http.StatusBadRequest, frontdoor.CodeBadID},
		{"GET", "/v1/budgets/g/spend", ``, http.StatusMethodNotAllowed, frontdoor.CodeMethodNotAllowed},
	} {
		e.do(c.method, c.path, c.body).isError(t, c.status, c.code)
	}
}

// Without peers there is nobody to hand rights to: the handoff is refused
// and changes nothing. Bad bodies are 400s.
func TestBudgetHandoffRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.do("POST", "/v1/budgets/gifts/grant", `{"by":10}`).ok(t)
	e.do("PUT", "/v1/admin/budgets/handoff", `{"to":"eu-1"}`).isError(t, http.StatusConflict, frontdoor.CodeUnknownReplica)
	e.do("PUT", "/v1/admin/budgets/handoff", `{}`).isError(t, http.StatusBadRequest, frontdoor.CodeMissingField)
	e.do("PUT", "/v1/admin/budgets/handoff", `{"to":"us-1"}`).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
	e.do("PUT", "/v1/admin/budgets/handoff", `{"to":7}`).isError(t, http.StatusBadRequest, frontdoor.CodeBadJSON)
	e.do("PUT", "/v1/admin/budgets/handoff", "").isError(t, http.StatusBadRequest, frontdoor.CodeBadJSON)
	b := e.do("GET", "/v1/admin/budgets/handoff", "").ok(t)
	if b["to"] != "" || num(t, b, "held") != 10 || num(t, b, "budgets") != 1 {
		t.Fatalf("status: %v", b)
	}
	if b = e.do("DELETE", "/v1/admin/budgets/handoff", "").ok(t); b["to"] != "" || num(t, b, "held") != 10 {
		t.Fatalf("cancel: %v", b)
	}
}
