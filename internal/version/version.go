// Package version says which release a build of tally is: the git tag
// `make build` and `make release` stamp in at link time, else the VERSION
// file embedded here (the repository's top-level VERSION links to it), so
// a plain `go build ./cmd/tallyd` reports a real version too.
package version

import (
	_ "embed"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// stamped and stampedRevision are set at link time by the Makefile:
//
//	go build -ldflags "-X github.com/tally-dev/tally/internal/version.stamped=$(git describe --tags --always --dirty)"
//
// They stay empty in a plain go build, and in a checkout without tags.
var (
	stamped         string
	stampedRevision string
)

// Version is the release of this build: the stamped git description
// (v0.1.0, or v0.1.0-3-gabcdef012345-dirty between tags), else "v" and
// the VERSION file.
func Version() string {
	if stamped != "" {
		return stamped
	}
	return FileVersion()
}

// FileVersion is the VERSION file's release, with a leading "v".
func FileVersion() string {
	v := strings.TrimSpace(file)
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// Revision is the commit the build came from: the stamped one, else the
// one the Go toolchain recorded (with "-dirty" for uncommitted changes),
// else "unknown" (a build outside a git checkout).
func Revision() string {
	if stampedRevision != "" {
		return stampedRevision
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// GoVersion is the Go release the binary was built with.
func GoVersion() string { return runtime.Version() }
