// Package openapi turns a table of HTTP operations, whose bodies are Go
// structs, into an OpenAPI 3.1 document, reflecting each struct's JSON
// encoding into a JSON Schema; and it checks a JSON value against such a
// schema, so tests can hold a handler's answers to the document.
//
// The schema of a struct is what encoding/json makes of it: a property
// per exported field under its json name, required unless omitempty,
// embedded structs flattened, and no other property
// (additionalProperties false). A pointer is its element, or null if the
// field has no omitempty; a slice is an array and a map an object of its
// values (neither is null: a handler encodes an empty one as [] or {});
// time.Time is an RFC 3339 string; json.RawMessage is any JSON value.
// Interfaces are refused: a field typed any has no schema.
package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Doc is what Build needs: the API's title, version and description, its
// operations and its error codes.
type Doc struct {
	Title, Version, Description string
	Operations                  []Operation
	// Errors are the API's error codes, each answered with one status.
	Errors []ErrorCode
	// ErrorBody is the Go type of every error answer (its "code" property
	// is narrowed to each response's codes).
	ErrorBody any
}

// ErrorCode is one stable error code.
type ErrorCode struct {
	Code    string
	Status  int
	Meaning string
}

// Operation is one route and method.
type Operation struct {
	Method string
	// Path is the route's template with {name} variables (the router's
	// patterns taken off).
	Path        string
	Summary     string
	Description string
	Tag         string
	// Role names the bearer token the route needs when tokens are set:
	// "read", "write", "admin" or "" (always open).
	Role   string
	Params []Param
	// Request is a value of the body's type (nil: no body; a slice: a
	// JSON array of its elements, or NDJSON of them); Body says
	// whether a body is required; RequestRequired lists the body fields
	// a request must give.
	Request         any
	Body            bool
	RequestRequired []string
	// Response is a value of the 200 answer's type; ResponseText, if set
	// instead, is the media type of a non-JSON answer.
	Response     any
	ResponseText string
	// NoBody: every answer is headers only (HEAD); Response and Errors
	// then give only the statuses.
	NoBody bool
	// Errors are the codes the route may answer; Bodies maps a code whose
	// answer is not ErrorBody to a value of its body's type.
	Errors []string
	Bodies map[string]any
}

// Param is one query or path parameter.
type Param struct {
	Name, In    string // In: "query" or "path"
	Description string
	Schema      map[string]any
	Required    bool
}

// Build returns the OpenAPI 3.1 document, indented, ending in a newline.
func Build(d Doc) ([]byte, error) {
	b := &builder{schemas: map[string]any{}, named: map[string]reflect.Type{}}
	codes := map[string]ErrorCode{}
	for _, c := range d.Errors {
		if _, dup := codes[c.Code]; dup {
			return nil, fmt.Errorf("error code %s listed twice", c.Code)
		}
		codes[c.Code] = c
	}
	paths := map[string]map[string]any{}
	seen := map[string]bool{}
	for _, op := range d.Operations {
		key := op.Method + " " + op.Path
		if seen[key] {
			return nil, fmt.Errorf("operation %s listed twice", key)
		}
		seen[key] = true
		o, err := b.operation(op, codes, d.ErrorBody)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		if paths[op.Path] == nil {
			paths[op.Path] = map[string]any{}
		}
		paths[op.Path][strings.ToLower(op.Method)] = o
	}
	var codeList []map[string]any
	for _, c := range d.Errors {
		codeList = append(codeList, map[string]any{"code": c.Code, "status": c.Status, "meaning": c.Meaning})
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": d.Title, "version": d.Version, "description": d.Description},
		"paths":   paths,
		"components": map[string]any{
			"schemas": b.schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer",
					"description": "A token of the route's role (x-tally-role) or a higher one, when the replica sets tokens for that role."},
			},
		},
		"x-tally-error-codes": codeList,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pathVar matches a {name} variable of a path template.
var pathVar = regexp.MustCompile(`\{([^}]+)\}`)

func (b *builder) operation(op Operation, codes map[string]ErrorCode, errBody any) (map[string]any, error) {
	o := map[string]any{
		"operationId": operationID(op.Method, op.Path),
		"summary":     op.Summary,
	}
	if op.Description != "" {
		o["description"] = op.Description
	}
	if op.Tag != "" {
		o["tags"] = []string{op.Tag}
	}
	if op.Role != "" {
		o["x-tally-role"] = op.Role
		// Open while the replica sets no token for the role.
		o["security"] = []any{map[string]any{}, map[string]any{"bearer": []string{}}}
	} else {
		// Public: said outright, so no reader takes a missing
		// requirement for a forgotten one.
		o["security"] = []any{}
	}
	var params []any
	given := map[string]bool{}
	for _, p := range op.Params {
		given[p.In+" "+p.Name] = true
	}
	for _, m := range pathVar.FindAllStringSubmatch(op.Path, -1) {
		if !given["path "+m[1]] {
			return nil, fmt.Errorf("path variable %s has no Param", m[1])
		}
	}
	for _, p := range op.Params {
		if p.In == "path" && !strings.Contains(op.Path, "{"+p.Name+"}") {
			return nil, fmt.Errorf("path Param %s is not in the path", p.Name)
		}
		q := map[string]any{"name": p.Name, "in": p.In, "schema": p.Schema}
		if p.Description != "" {
			q["description"] = p.Description
		}
		if p.Required || p.In == "path" {
			q["required"] = true
		}
		params = append(params, q)
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	if op.Request != nil {
		t := reflect.TypeOf(op.Request)
		content := map[string]any{}
		if t.Kind() == reflect.Slice {
			// A batch: a JSON array, or NDJSON of its elements.
			s, err := b.request(t.Elem(), op.RequestRequired)
			if err != nil {
				return nil, err
			}
			content["application/json"] = map[string]any{"schema": map[string]any{"type": "array", "items": s}}
			content["application/x-ndjson"] = map[string]any{"schema": s}
		} else {
			s, err := b.request(t, op.RequestRequired)
			if err != nil {
				return nil, err
			}
			content["application/json"] = map[string]any{"schema": s}
		}
		o["requestBody"] = map[string]any{"required": op.Body, "content": content}
	}
	responses := map[string]any{}
	switch {
	case op.NoBody:
		responses["200"] = map[string]any{"description": "OK, no body"}
	case op.Response != nil:
		s, err := b.schema(reflect.TypeOf(op.Response), false)
		if err != nil {
			return nil, err
		}
		responses["200"] = map[string]any{"description": "OK",
			"content": map[string]any{"application/json": map[string]any{"schema": s}}}
	case op.ResponseText != "":
		responses["200"] = map[string]any{"description": "OK",
			"content": map[string]any{op.ResponseText: map[string]any{"schema": map[string]any{"type": "string"}}}}
	default:
		return nil, fmt.Errorf("no response type")
	}
	byStatus := map[int][]string{}
	for _, c := range op.Errors {
		ec, ok := codes[c]
		if !ok {
			return nil, fmt.Errorf("unknown error code %s", c)
		}
		if slices.Contains(byStatus[ec.Status], c) {
			return nil, fmt.Errorf("error code %s listed twice", c)
		}
		byStatus[ec.Status] = append(byStatus[ec.Status], c)
	}
	for status, cs := range byStatus {
		sort.Strings(cs)
		// One alternative per body type, its code narrowed to those
		// answered with it.
		var (
			bodies []reflect.Type
			byBody = map[reflect.Type][]string{}
		)
		for _, c := range cs {
			t := reflect.TypeOf(errBody)
			if body, ok := op.Bodies[c]; ok {
				t = reflect.TypeOf(body)
			}
			if byBody[t] == nil {
				bodies = append(bodies, t)
			}
			byBody[t] = append(byBody[t], c)
		}
		var alts []any
		for _, t := range bodies {
			s, err := b.schema(t, false)
			if err != nil {
				return nil, err
			}
			alts = append(alts, map[string]any{"allOf": []any{s, codeIs(byBody[t])}})
		}
		s := alts[0]
		if len(alts) > 1 {
			s = map[string]any{"anyOf": alts}
		}
		var desc []string
		for _, c := range cs {
			desc = append(desc, c+": "+codes[c].Meaning)
		}
		r := map[string]any{
			"description": http.StatusText(status) + ". " + strings.Join(desc, "; "),
			"content":     map[string]any{"application/json": map[string]any{"schema": s}},
		}
		if op.NoBody {
			delete(r, "content")
		}
		responses[strconv.Itoa(status)] = r
	}
	for c := range op.Bodies {
		if !slices.Contains(op.Errors, c) {
			return nil, fmt.Errorf("a body for error code %s the route does not list", c)
		}
	}
	o["responses"] = responses
	return o, nil
}

// codeIs narrows an error body's code to codes.
func codeIs(codes []string) map[string]any {
	return map[string]any{"properties": map[string]any{"code": map[string]any{"enum": codes}}}
}

// operationID is e.g. "getV1LikesItemUser" for GET /v1/likes/{item}/{user}.
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// builder collects the named schemas of the structs it meets.
type builder struct {
	schemas map[string]any
	named   map[string]reflect.Type // schema name -> the type it was made from
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// request is the schema of a request body of type t, inline: properties
// as in an answer, but none required except those listed (a handler
// decides what a request must give, not the struct's tags), and a
// pointer field may be null (it reads as absent).
func (b *builder) request(t reflect.Type, required []string) (map[string]any, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("request body %s: want a struct", t)
	}
	props := map[string]any{}
	if err := b.fields(t, props, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	for _, r := range required {
		if _, ok := props[r]; !ok {
			return nil, fmt.Errorf("required field %s is not in %s", r, t)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s, nil
}

// schema is t's schema; nullable adds null for a pointer field that
// encodes as null when nil.
func (b *builder) schema(t reflect.Type, nullable bool) (map[string]any, error) {
	if t.Kind() == reflect.Pointer {
		s, err := b.schema(t.Elem(), false)
		if err != nil || !nullable {
			return s, err
		}
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}, nil
	}
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case rawType:
		return map[string]any{}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := b.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %s: want string keys", t.Key())
		}
		vals, err := b.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": vals}, nil
	case reflect.Struct:
		return b.ref(t)
	}
	return nil, fmt.Errorf("%s has no JSON Schema (kind %s): give it a concrete type", t, t.Kind())
}

// ref returns a $ref to t's schema, building it the first time.
func (b *builder) ref(t reflect.Type) (map[string]any, error) {
	name := t.Name()
	if name == "" {
		return nil, fmt.Errorf("anonymous struct %s: give it a name", t)
	}
	name = strings.ToUpper(name[:1]) + name[1:]
	ref := map[string]any{"$ref": "#/components/schemas/" + name}
	if prev, ok := b.named[name]; ok {
		if prev != t {
			return nil, fmt.Errorf("two types named %s: %s and %s", name, prev, t)
		}
		return ref, nil
	}
	b.named[name] = t
	props := map[string]any{}
	var required []string
	if err := b.fields(t, props, &required); err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	b.schemas[name] = s
	return ref, nil
}

// fields adds t's JSON properties to props, as encoding/json encodes them,
// and to required those without omitempty (required nil: a request's).
func (b *builder) fields(t reflect.Type, props map[string]any, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if err := b.fields(et, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := false
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty", "omitzero":
				omit = true
			case "", "-":
			default:
				return fmt.Errorf("field %s: json option %q is not supported", f.Name, o)
			}
		}
		if _, dup := props[name]; dup {
			return fmt.Errorf("field %s: JSON name %q twice", f.Name, name)
		}
		s, err := b.schema(f.Type, !omit)
		if err != nil {
			return fmt.Errorf("field %s: %w", f.Name, err)
		}
		props[name] = s
		if !omit && required != nil {
			*required = append(*required, name)
		}
	}
	return nil
}
