package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/gorilla/mux"

	"github.com/tally-dev/tally/frontdoor"
)

// checkID validates an id and names the field in the error
// (frontdoor.CheckID).
func checkID(field, v string) error { return frontdoor.CheckID(field, v) }

// quoteShort is frontdoor.QuoteShort.
func quoteShort(v string) string { return frontdoor.QuoteShort(v) }

// pathID returns the unescaped, validated path variable name. The router
// matches on the escaped path, so "%2F" arrives here as part of one id and
// is rejected as a '/' in it.
func pathID(r *http.Request, name string) (string, error) {
	raw := mux.Vars(r)[name]
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", newError(http.StatusBadRequest, frontdoor.CodeBadID, "%s %s is not a valid path segment", name, quoteShort(raw))
	}
	return v, checkID(name, v)
}

// pathIDs returns several path ids, stopping at the first invalid one.
func pathIDs(r *http.Request, names ...string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		v, err := pathID(r, n)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// errEmptyBody reports a request without a body where one is required.
var errEmptyBody = errors.New("empty body")

// decodeBody reads exactly one JSON value from the body into dst, refusing
// unknown fields, trailing data and bodies over the limit. An empty body
// returns errEmptyBody (callers decide whether that is allowed); every other
// failure is an *apiError.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	limit := s.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return tooLarge(limit)
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		// No body (most single likes and increments): no decoder, whose
		// buffer was a tenth of what a like allocated.
		return errEmptyBody
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			return errEmptyBody
		}
		return jsonError(err, limit)
	}
	// Exactly one value: only whitespace may follow.
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return jsonError(err, limit)
	default:
		return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "trailing data after the JSON object")
	}
}

func tooLarge(limit int64) error {
	return newError(http.StatusRequestEntityTooLarge, frontdoor.CodeBodyTooLarge, "request body exceeds %d bytes", limit)
}

// jsonError turns a decoding error into a client error that says what was
// wrong without echoing the body.
func jsonError(err error, limit int64) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return tooLarge(limit)
	case errors.As(err, &syntaxErr):
		return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "body must be a JSON object, not %s", typeErr.Value)
		}
		return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "field %q must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type.String()), typeErr.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "truncated JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return newError(http.StatusBadRequest, frontdoor.CodeUnknownField, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return newError(http.StatusBadRequest, frontdoor.CodeBadJSON, "cannot decode JSON body")
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(goType string) string {
	switch strings.TrimPrefix(goType, "*") {
	case "string":
		return "a string"
	case "int64", "int":
		return "an integer"
	}
	return "of type " + goType
}
