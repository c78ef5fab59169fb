package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// scanAll decodes every event of body with the scanner.
func scanAll(body []byte) ([]rawEvent, error) {
	var sc eventScanner
	if err := sc.start(body); err != nil {
		return nil, err
	}
	var out []rawEvent
	for {
		var e rawEvent
		ok, err := sc.next(&e)
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, e)
	}
}

// refEvent and refDecode are the encoding/json decoder the scanner
// replaced, kept as the reference the fuzz test compares against.
type refEvent struct {
	Type           string `json:"type"`
	Item           string `json:"item,omitempty"`
	VideoID        string `json:"videoId,omitempty"`
	User           string `json:"user,omitempty"`
	UserID         string `json:"userId,omitempty"`
	Key            string `json:"key,omitempty"`
	By             *int64 `json:"by,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

func refDecode(body []byte) ([]refEvent, error) {
	br := bytes.NewReader(body)
	for {
		c, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			_ = br.UnreadByte()
			break
		}
	}
	first, _ := br.ReadByte()
	_ = br.UnreadByte()
	dec := json.NewDecoder(br)
	dec.DisallowUnknownFields()
	array := first == '['
	if array {
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
	}
	var events []refEvent
	for {
		if array && !dec.More() {
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return nil, errors.New("trailing data")
			}
			return events, nil
		}
		var e refEvent
		err := dec.Decode(&e)
		if !array && errors.Is(err, io.EOF) {
			return events, nil
		}
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
}

// jsonText is what encoding/json makes of raw string bytes: each byte of
// invalid UTF-8 becomes U+FFFD.
func jsonText(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

func sameEvent(got rawEvent, want refEvent) bool {
	by := func() (int64, bool) {
		if want.By == nil {
			return 0, false
		}
		return *want.By, true
	}
	wb, wh := by()
	return jsonText(got.typ) == want.Type && jsonText(got.item) == want.Item &&
		jsonText(got.videoID) == want.VideoID && jsonText(got.user) == want.User &&
		jsonText(got.userID) == want.UserID && jsonText(got.key) == want.Key &&
		jsonText(got.idem) == want.IdempotencyKey && got.hasBy == wh && got.by == wb
}

// stricterOnPurpose reports whether err is one of the scanner's deliberate
// refusals of input encoding/json accepts: a field given twice, or a field
// name that matches only case-insensitively.
func stricterOnPurpose(err error) bool {
	var ae *apiError
	if !errors.As(err, &ae) {
		return false
	}
	if strings.Contains(ae.Msg, "appears twice") {
		return true
	}
	_, quoted, ok := strings.Cut(ae.Msg, "unknown field ")
	name, err := strconv.Unquote(quoted)
	if ae.Code != frontdoor.CodeUnknownField || !ok || err != nil {
		return false
	}
	for _, f := range []string{"type", "item", "videoId", "user", "userId", "key", "by", "idempotency_key"} {
		if name != f && strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

var eventSeeds = []string{
	`[{"type":"like","item":"v1","user":"a"},{"type":"incr","key":"views","by":5,"idempotency_key":"k1"}]`,
	"{\"type\":\"like\",\"item\":\"v1\",\"user\":\"c\"}\n{\"type\":\"incr\",\"key\":\"views\",\"by\":-1}\n",
	`{"type":"like","videoId":"v1","userId":"b"}{"type":"unlike","item":"v1","user":"b"}`,
	`[{"type":"incr","key":"c","by":99999999999999999}, null, {}]`,
	`[{"type":"lik\u0065","item":"\u0068ot","user":"\ud83d\ude00"}]`,
	`{"type":"incr","key":"c","by":null,"idempotency_key":null}`,
	`{"type":"incr","key":"c","by":1.5}`,
	`{"type":"incr","key":"c","by":"five"}`,
	`{"type":"like","item":"v","user":"u","colour":"red"}`,
	`{"Type":"like","item":"v","user":"u"}`,
	`{"type":"like","item":"v","item":"w","user":"u"}`,
	`[{"type":"like","item":"v","user":"u"}] x`,
	`[{"type":"like","item":"v","user":"u"}`,
	`[]`, ``, `  `, `[1]`, `5`, `"x"`, `[true]`, `{"type":tru}`, `{"by":-}`, `{"by":01}`,
	`{"type":"a\"b\\c\/d\b\f\n\r\t"}`, `{"type":"\ud800\u0041"}`, "{\"type\":\"\xff\"}",
	`{"by":-9223372036854775808}`, `{"by":9223372036854775808}`, `{"by":1e3}`,
	`[{"type":"grant","key":"b","by":10},{"type":"spend","key":"b","by":3,"idempotency_key":"k"},{"type":"spend","key":"b"}]`,
	`{"type":"grant","key":"b"}{"type":"spend","key":"b","by":0}`,
	`{"type":"spend","key":"b","by":-1}{"type":"grant","key":"b","by":2,"idempotency_key":"g"}`,
}

// Every event the scanner takes validates into an operation the replica
// accepts as well formed, or into a 4xx apiError; never a panic.
func FuzzEventOps(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	// Event times, which the reference decoder of FuzzDecodeEvents
	// predates.
	f.Add([]byte(`{"type":"spend","key":"b","at":1}{"type":"incr","key":"c","at":"2026-11-26T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		events, err := scanAll(body)
		if err != nil {
			return // FuzzDecodeEvents covers the scanner's refusals
		}
		b := &eventsBatch{intern: map[string]int32{}}
		for i := range events {
			op, bad := b.op(&events[i])
			if bad != nil {
				if bad.Status/100 != 4 || bad.Code == "" || bad.Msg == "" {
					t.Fatalf("event %+v: refusal %#v is not a 4xx apiError", events[i], bad)
				}
				continue
			}
			if !crdt.ValidID(op.Item) || op.By > region.MaxBy || op.By < -region.MaxBy {
				t.Fatalf("event %+v took as %+v", events[i], op)
			}
			if (op.Kind == region.OpGrant || op.Kind == region.OpSpend) && op.By < 1 {
				t.Fatalf("budget event %+v took with by %d", events[i], op.By)
			}
		}
	})
}

// The scanner accepts exactly what encoding/json accepted, with the same
// events, except where it is stricter on purpose; it never panics, and
// every refusal is a 4xx apiError.
func FuzzDecodeEvents(f *testing.F) {
	for _, s := range eventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, gerr := scanAll(body)
		want, werr := refDecode(body)
		if gerr != nil {
			var ae *apiError
			if !errors.As(gerr, &ae) || ae.Status/100 != 4 || ae.Code == "" || ae.Msg == "" {
				t.Fatalf("error %#v is not a 4xx apiError", gerr)
			}
			if werr == nil && len(want) > 0 && !stricterOnPurpose(gerr) {
				t.Fatalf("scanner refused %q (%v); encoding/json took %+v", body, gerr, want)
			}
			return
		}
		if werr != nil {
			t.Fatalf("scanner took %q as %d events; encoding/json refused it: %v", body, len(got), werr)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d events, encoding/json %d", body, len(got), len(want))
		}
		for i := range got {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("%q: event %d = %+v, encoding/json %+v", body, i, got[i], want[i])
			}
		}
	})
}

// The route's answers to malformed batches: status, code and a message
// that says what is wrong and where.
func TestEventsDecoderErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	cases := []struct {
		body    string
		status  int
		code    string
		message string
	}{
		{``, 400, frontdoor.CodeMissingField, "no events"},
		{`[ ]`, 400, frontdoor.CodeMissingField, "no events in the batch"},
		{`[{"type":"like","item":"v","user":"u"}`, 400, frontdoor.CodeBadJSON, "truncated JSON"},
		{`[{"type":"like","item":"v","user":"u`, 400, frontdoor.CodeBadJSON, "event 0: truncated JSON"},
		{`[{"type":"like","item":"v","user":"u"},]`, 400, frontdoor.CodeBadJSON, "event 1: malformed JSON at byte 39: invalid character ']'"},
		{`[{"type":"like","item":"v","user":"u"} {}]`, 400, frontdoor.CodeBadJSON, "invalid character '{' after array element"},
		{"{}\n{oops}\n", 400, frontdoor.CodeBadJSON, "event 1: malformed JSON at byte 4: invalid character 'o' looking for beginning of object key"},
		{`{"type":"like","item":"v","user":"u","colour":"red"}`, 400, frontdoor.CodeUnknownField, `event 0: unknown field "colour"`},
		{`{"TYPE":"like","item":"v","user":"u"}`, 400, frontdoor.CodeUnknownField, `unknown field "TYPE"`},
		{`{"type":"like","item":"v","item":"w","user":"u"}`, 400, frontdoor.CodeBadJSON, `field "item" appears twice`},
		{`{"type":"incr","key":"c","by":"five"}`, 400, frontdoor.CodeBadJSON, `field "by" must be an integer, not string`},
		{`{"type":"incr","key":"c","by":1.5}`, 400, frontdoor.CodeBadJSON, `field "by" must be an integer, not number "1.5"`},
		{`{"type":"incr","key":"c","by":9223372036854775808}`, 400, frontdoor.CodeBadJSON, "must be an integer"},
		{`{"type":5}`, 400, frontdoor.CodeBadJSON, `field "type" must be a string, not number`},
		{`{"type":"like","item":["v"]}`, 400, frontdoor.CodeBadJSON, `field "item" must be a string, not array`},
		{`[7]`, 400, frontdoor.CodeBadJSON, "event 0: an event must be a JSON object, not number"},
		{`{"type":"like"} trailing`, 400, frontdoor.CodeBadJSON, "event 1: malformed JSON"},
		{`[{"type":"like"}] trailing`, 400, frontdoor.CodeBadJSON, "trailing data after the events array"},
		{"{\"type\":\"li\nke\"}", 400, frontdoor.CodeBadJSON, "in string literal"},
		{`{"type":"\x"}`, 400, frontdoor.CodeBadJSON, "in string escape code"},
		{`{"type":nul}`, 400, frontdoor.CodeBadJSON, "in literal null"},
	}
	for _, c := range cases {
		r := e.do("POST", "/v1/events", c.body)
		r.isError(t, c.status, c.code)
		var body api.Error
		if err := json.Unmarshal([]byte(r.raw), &body); err != nil || !strings.Contains(body.Error, c.message) {
			t.Errorf("%q: error %q, want it to contain %q", c.body, body.Error, c.message)
		}
	}
	if e.likes("v") != 0 {
		t.Fatal("a rejected batch changed state")
	}
}

// Escapes, nulls and both id spellings decode as JSON says; the answer is
// the documented shape, byte for byte.
func TestEventsDecodingAndAnswer(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := `[{"type":"lik\u0065","item":"\u0068ot","user":"a"},` +
		`{"type":"like","videoId":"hot","userId":"b","by":null},` +
		`{"type":"like","item":"hot","videoId":"hot","user":"a"},` +
		`null,` +
		`{"type":"incr","key":"views","by":-2,"idempotency_key":"k.1"},` +
		`{"type":"incr","key":"views","by":-2,"idempotency_key":"k.1"},` +
		`{"type":"like","item":"hot","user":"\u00e9"}]`
	r := e.do("POST", "/v1/events", body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.raw)
	}
	want := `{"applied":5,"rejected":2,"results":[` +
		`{"ok":true,"value":1,"changed":true},` +
		`{"ok":true,"value":2,"changed":true},` +
		`{"ok":true,"value":2},` +
		`{"ok":false,"value":0,"error":"event needs \"type\": like, unlike, toggle, incr, unique, grant or spend","code":"missing_field"},` +
		`{"ok":true,"value":-2},` +
		`{"ok":true,"value":-2,"duplicate":true},` +
		`{"ok":false,"value":0,"error":"user \"é\" is not valid; want 1..128 bytes of [A-Za-z0-9_.:@-]","code":"bad_id"}]}` + "\n"
	if r.raw != want {
		t.Errorf("answer\n%s\nwant\n%s", r.raw, want)
	}
	if e.likes("hot") != 2 || e.counter("views") != -2 {
		t.Errorf("likes %d, views %d", e.likes("hot"), e.counter("views"))
	}
}
