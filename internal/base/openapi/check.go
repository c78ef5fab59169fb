package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Document is a built document, read back to check answers against it.
type Document struct {
	Paths      map[string]map[string]operationJSON `json:"paths"`
	Components struct {
		Schemas map[string]any `json:"schemas"`
	} `json:"components"`
}

type operationJSON struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema any `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// Parse reads a document Build made.
func Parse(doc []byte) (*Document, error) {
	var d Document
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	return &d, nil
}

// Operations lists the document's operations as "METHOD /path", sorted.
func (d *Document) Operations() []string {
	var out []string
	for path, ops := range d.Paths {
		for m := range ops {
			out = append(out, strings.ToUpper(m)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// CheckResponse checks a JSON answer body against the schema the document
// gives the operation's status.
func (d *Document) CheckResponse(method, path string, status int, body []byte) error {
	op, ok := d.Paths[path][strings.ToLower(method)]
	if !ok {
		return fmt.Errorf("no operation %s %s in the document", method, path)
	}
	r, ok := op.Responses[strconv.Itoa(status)]
	if !ok {
		return fmt.Errorf("%s %s: status %d is not documented", method, path, status)
	}
	c, ok := r.Content["application/json"]
	if !ok {
		return fmt.Errorf("%s %s: status %d has no JSON body documented", method, path, status)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s %s: body is not JSON: %w", method, path, err)
	}
	if err := d.Check(c.Schema, v, "$"); err != nil {
		return fmt.Errorf("%s %s %d: %w", method, path, status, err)
	}
	return nil
}

// Check checks v (decoded with json.Decoder.UseNumber) against schema s,
// which may use only the keywords Build emits; at names v in errors.
func (d *Document) Check(s any, v any, at string) error {
	sm, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: schema %v is not an object", at, s)
	}
	keys := make([]string, 0, len(sm))
	for k := range sm {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same error first every run
	for _, k := range keys {
		if err := d.keyword(sm, k, v, at); err != nil {
			return err
		}
	}
	return nil
}

func (d *Document) keyword(s map[string]any, k string, v any, at string) error {
	switch k {
	case "description", "format":
		if k == "format" && s[k] == "date-time" {
			if str, ok := v.(string); ok {
				if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
					return fmt.Errorf("%s: %q is not an RFC 3339 time", at, str)
				}
			}
		}
		return nil
	case "$ref":
		ref, _ := s[k].(string)
		name, ok := strings.CutPrefix(ref, "#/components/schemas/")
		target, found := d.Components.Schemas[name]
		if !ok || !found {
			return fmt.Errorf("%s: unresolved $ref %q", at, ref)
		}
		return d.Check(target, v, at)
	case "type":
		var types []string
		switch t := s[k].(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				str, _ := x.(string)
				types = append(types, str)
			}
		}
		if !slices.Contains(types, jsonType(v)) && !(jsonType(v) == "integer" && slices.Contains(types, "number")) {
			return fmt.Errorf("%s: %s, want %s", at, jsonType(v), strings.Join(types, " or "))
		}
		return nil
	case "enum":
		for _, e := range s[k].([]any) {
			if e == v {
				return nil
			}
		}
		return fmt.Errorf("%s: %v is not one of %v", at, v, s[k])
	case "minimum":
		n, ok := v.(json.Number)
		if !ok {
			return nil
		}
		f, err := n.Float64()
		if min, _ := s[k].(float64); err != nil || f < min {
			return fmt.Errorf("%s: %s is below the minimum %v", at, n, s[k])
		}
		return nil
	case "properties":
		obj, ok := v.(map[string]any)
		if !ok {
			return nil // "type" says what v must be
		}
		props := s[k].(map[string]any)
		for name, val := range obj {
			if ps, ok := props[name]; ok {
				if err := d.Check(ps, val, at+"."+name); err != nil {
					return err
				}
			}
		}
		return nil
	case "additionalProperties":
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(obj))
		for name := range obj {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if _, ok := props[name]; ok {
				continue
			}
			if s[k] == false {
				return fmt.Errorf("%s: property %q is not in the schema", at, name)
			}
			if err := d.Check(s[k], obj[name], at+"."+name); err != nil {
				return err
			}
		}
		return nil
	case "required":
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for _, r := range s[k].([]any) {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s: required property %q is missing", at, r)
			}
		}
		return nil
	case "items":
		arr, ok := v.([]any)
		if !ok {
			return nil
		}
		for i, x := range arr {
			if err := d.Check(s[k], x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
		return nil
	case "allOf":
		for _, sub := range s[k].([]any) {
			if err := d.Check(sub, v, at); err != nil {
				return err
			}
		}
		return nil
	case "anyOf":
		var errs []string
		for _, sub := range s[k].([]any) {
			err := d.Check(sub, v, at)
			if err == nil {
				return nil
			}
			errs = append(errs, err.Error())
		}
		return fmt.Errorf("%s: matches no alternative: %s", at, strings.Join(errs, " | "))
	}
	return fmt.Errorf("%s: schema keyword %q is not supported by this checker", at, k)
}

// jsonType names v's JSON Schema type.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		if _, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}
