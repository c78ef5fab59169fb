// Package version says which release a build of tally is: what `make
// build`, `make dist` and the Docker build stamp in at link time
// (scripts/version.sh: the git tag, with -dev+<revision> after it), else
// the VERSION file embedded here (the repository's top-level VERSION links
// to it) with -dev, so a plain `go build ./cmd/tallyd` never claims to be
// a release.
package version

import (
	_ "embed"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var file string

// stamped and stampedRevision are set at link time by the Makefile and
// scripts/image-rootfs.sh, from scripts/version.sh:
//
//	go build -ldflags "-X github.com/tally-dev/tally/internal/base/version.stamped=v0.2.0-dev+abcdef012345"
//
// They stay empty in a plain go build.
var (
	stamped         string
	stampedRevision string
)

// Version is the release of this build: the stamped one (v0.1.0 at a
// tag, v0.1.0-dev+abcdef012345 after it), else the VERSION file's release
// with -dev+<revision> (-dev alone where the revision is unknown): an
// unstamped build is never a release.
func Version() string {
	if stamped != "" {
		return stamped
	}
	return devVersion(FileVersion(), Revision())
}

// devVersion is a build of rev after release v (semantic versioning: a
// pre-release with the commit as build metadata).
func devVersion(v, rev string) string {
	if rev == "" || rev == "unknown" {
		return v + "-dev"
	}
	return v + "-dev+" + rev
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
