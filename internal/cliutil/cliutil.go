// Package cliutil holds what tallyd's commands share for flags and errors:
// a usage error (exit code 2), a quiet flag set and its usage text, and a
// NATS client's flags and connection. The commands live in cmd/tallyd and
// in tooling packages such as internal/bench, which is why this is a
// package of its own.
package cliutil

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// UsageError is a problem with how tallyd was invoked: exit code 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// NewFlagSet returns a flag set that reports errors by return value only,
// printing nothing (see PrintUsage for -h).
func NewFlagSet(name string, bind func(*flag.FlagSet)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on every error, too
	bind(fs)
	return fs
}

// PrintUsage prints a command's usage and flags to w.
func PrintUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: tallyd %s [flags]\n\nflags:\n", fs.Name())
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// OneLine is err's message on one line.
func OneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
