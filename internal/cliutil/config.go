package cliutil

// Helpers for reading a command's configuration: list-valued flags and
// HCL configuration files.

import (
	"cmp"
	"errors"
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

// ErrUnparsed marks a DecodeHCLFile error after which nothing of the file
// was decoded: it is missing, unreadable, or not HCL. After any other
// error, v holds every attribute that did decode.
var ErrUnparsed = errors.New("config file not parsed")

// DecodeHCLFile reads an HCL (or, by its .json extension, HCL JSON) file
// into v, a pointer to a struct with hcl tags. Attributes the file does
// not set keep v's values. It reports every problem the HCL library finds
// at once (unknown attributes and blocks, wrong types, syntax), one per
// line of the error, in file order, each as "path:line (source line):
// summary: detail".
func DecodeHCLFile(path string, v any) error {
	if _, err := os.Stat(path); err != nil {
		return unparsed{fmt.Errorf("config file: %w", err)}
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
	parsed := !diags.HasErrors()
	if parsed {
		diags = gohcl.DecodeBody(f.Body, nil, v)
	}
	if !diags.HasErrors() {
		return nil
	}
	var src []byte
	if f != nil {
		src = f.Bytes
	}
	err := errors.New(formatDiags(path, diags, src))
	if !parsed {
		return unparsed{err}
	}
	return err
}

// unparsed is an error of a file DecodeHCLFile could not decode at all.
type unparsed struct{ error }

func (u unparsed) Unwrap() []error { return []error{u.error, ErrUnparsed} }

// formatDiags renders every error diagnostic on a line of its own, in
// file order: "c.hcl:3 (colour = 1): Unsupported argument: An argument
// named ...".
//
// The offending source line is quoted, since some diagnostics (a value of
// the wrong type) do not name the attribute.
func formatDiags(path string, diags hcl.Diagnostics, src []byte) string {
	diags = slices.Clone(diags)
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		return cmp.Compare(diagLine(a), diagLine(b))
	})
	lines := strings.Split(string(src), "\n")
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Detail != "" {
			s += ": " + d.Detail
		}
		if n := diagLine(d); n >= 1 && n <= len(lines) {
			s = fmt.Sprintf("%s:%d (%s): %s", path, n, strings.TrimSpace(lines[n-1]), s)
		} else if n >= 1 {
			s = fmt.Sprintf("%s:%d: %s", path, n, s)
		} else {
			s = path + ": " + s
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "\n")
}

// diagLine is the line a diagnostic points at, 0 if none.
func diagLine(d *hcl.Diagnostic) int {
	if d.Subject == nil {
		return 0
	}
	return d.Subject.Start.Line
}
