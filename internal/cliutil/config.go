package cliutil

// Helpers for reading a command's configuration: list-valued flags and
// HCL configuration files.

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// SplitList is s's comma-separated elements, trimmed, empty ones left
// out (nil if none).
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// CommaList is a flag's Set for a comma-separated list: it replaces
// *dst with SplitList of the flag's value.
func CommaList(dst *[]string) func(string) error {
	return func(s string) error {
		*dst = SplitList(s)
		return nil
	}
}

// Upsert replaces the first element of list that same matches with v, or
// appends v: a repeatable flag overriding a file's entry with its key.
func Upsert[T any](list []T, v T, same func(T) bool) []T {
	if i := slices.IndexFunc(list, same); i >= 0 {
		list[i] = v
		return list
	}
	return append(list, v)
}

// ListFlag is a repeatable flag of values Parse reads: the first one given
// replaces the defaults in List, and "" leaves none.
type ListFlag[T fmt.Stringer] struct {
	List  []T
	Parse func(string) (T, error)
	set   bool
}

// String implements flag.Value: the values, space-separated.
func (f *ListFlag[T]) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, v := range f.List {
		parts = append(parts, v.String())
	}
	return strings.Join(parts, " ")
}

// Set implements flag.Value.
func (f *ListFlag[T]) Set(s string) error {
	if !f.set {
		f.List, f.set = nil, true
	}
	if s == "" {
		return nil
	}
	v, err := f.Parse(s)
	if err != nil {
		return err
	}
	f.List = append(f.List, v)
	return nil
}

// DecodeHCLFile reads an HCL (or, by its .json extension, HCL JSON) file
// into v, a pointer to a struct with hcl tags. Attributes the file does
// not set keep v's values. Errors come on one line (see formatDiags).
func DecodeHCLFile(path string, v any) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	p := hclparse.NewParser()
	var (
		f     *hcl.File
		diags hcl.Diagnostics
	)
	if strings.HasSuffix(path, ".json") {
		f, diags = p.ParseJSONFile(path)
	} else {
		f, diags = p.ParseHCLFile(path)
	}
	if !diags.HasErrors() {
		diags = gohcl.DecodeBody(f.Body, nil, v)
	}
	if diags.HasErrors() {
		var src []byte
		if f != nil {
			src = f.Bytes
		}
		return fmt.Errorf("config file %s: %s", path, formatDiags(diags, src))
	}
	return nil
}

// formatDiags renders every error diagnostic on one line, "; "-separated:
// "line 3 (colour = 1): Unsupported argument: An argument named ...".
//
// The offending source line is quoted, since some diagnostics (a value of
// the wrong type) do not name the attribute.
func formatDiags(diags hcl.Diagnostics, src []byte) string {
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		if d.Subject != nil {
			n := d.Subject.Start.Line
			if lines := strings.Split(string(src), "\n"); n >= 1 && n <= len(lines) {
				s = fmt.Sprintf("line %d (%s): %s", n, strings.TrimSpace(lines[n-1]), s)
			} else {
				s = fmt.Sprintf("line %d: %s", n, s)
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
