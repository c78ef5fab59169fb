package openapi

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	N uint64 `json:"n"`
}

type embedded struct {
	E string `json:"e"`
}

type answer struct {
	embedded
	Name  string           `json:"name"`
	Opt   string           `json:"opt,omitempty"`
	At    time.Time        `json:"at"`
	When  *time.Time       `json:"when,omitempty"`
	Ptr   *int64           `json:"ptr"`
	List  []inner          `json:"list"`
	ByKey map[string]inner `json:"by_key"`
	Skip  string           `json:"-"`
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

type withAny struct {
	V any `json:"v"`
}

func build(t *testing.T, op Operation) *Document {
	t.Helper()
	raw, err := Build(Doc{Title: "t", Version: "1", Operations: []Operation{op},
		Errors: []ErrorCode{{Code: "bad", Status: 400, Meaning: "bad"}}, ErrorBody: errorBody{}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The schema of a struct is its JSON encoding, and Check holds values to
// it: each case breaks one rule.
func TestSchemaOfStruct(t *testing.T) {
	d := build(t, Operation{Method: "GET", Path: "/a", Response: answer{}})
	ok := `{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":null,"list":[{"n":1}],"by_key":{"k":{"n":2}}}`
	if err := d.CheckResponse("GET", "/a", 200, []byte(ok)); err != nil {
		t.Fatalf("a valid answer: %v", err)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"e":"x","at":"2026-01-02T03:04:05Z","ptr":1,"list":[],"by_key":{}}`, `required property "name"`},
		{`{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":1,"list":[],"by_key":{},"extra":1}`, `property "extra" is not in the schema`},
		{`{"e":"x","name":1,"at":"2026-01-02T03:04:05Z","ptr":1,"list":[],"by_key":{}}`, `$.name: integer, want string`},
		{`{"e":"x","name":"n","at":"yesterday","ptr":1,"list":[],"by_key":{}}`, `not an RFC 3339 time`},
		{`{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":1,"list":null,"by_key":{}}`, `$.list: null, want array`},
		{`{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":1,"list":[{"n":-1}],"by_key":{}}`, `below the minimum`},
		{`{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":1,"list":[],"by_key":{"k":{}}}`, `$.by_key.k: required property "n"`},
		{`{"e":"x","name":"n","at":"2026-01-02T03:04:05Z","ptr":"1","list":[],"by_key":{}}`, `matches no alternative`},
		{`{"name":"n","at":"2026-01-02T03:04:05Z","ptr":1,"list":[],"by_key":{}}`, `required property "e"`},
	} {
		err := d.CheckResponse("GET", "/a", 200, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.body, err, tc.want)
		}
	}
	if err := d.CheckResponse("GET", "/a", 400, []byte(`{"error":"e","code":"bad"}`)); err == nil {
		t.Error("an undocumented status passed")
	}
}

func TestErrorsNarrowTheCode(t *testing.T) {
	d := build(t, Operation{Method: "GET", Path: "/a", Response: inner{}, Errors: []string{"bad"}})
	if err := d.CheckResponse("GET", "/a", 400, []byte(`{"error":"e","code":"bad"}`)); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckResponse("GET", "/a", 400, []byte(`{"error":"e","code":"other"}`)); err == nil {
		t.Fatal("a code the route does not list passed")
	}
}

func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		op   Operation
		want string
	}{
		{Operation{Method: "GET", Path: "/a", Response: withAny{}}, "has no JSON Schema"},
		{Operation{Method: "GET", Path: "/a/{id}", Response: inner{}}, "path variable id has no Param"},
		{Operation{Method: "GET", Path: "/a", Response: inner{}, Errors: []string{"nope"}}, "unknown error code nope"},
		{Operation{Method: "GET", Path: "/a"}, "no response type"},
	} {
		_, err := Build(Doc{Operations: []Operation{tc.op}, ErrorBody: inner{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.op, err, tc.want)
		}
	}
}
