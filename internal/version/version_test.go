package version

import (
	"os"
	"regexp"
	"testing"
)

// The VERSION file is one semantic version, the repository's top-level
// VERSION is the same file, an unstamped build reports it, and the
// CHANGELOG's newest entry is that release.
func TestVersionFileAndChangelog(t *testing.T) {
	v := FileVersion()
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION says %q: want a semantic version such as 0.1.0", file)
	}
	if stamped == "" && Version() != v {
		t.Fatalf("unstamped Version() = %q, want the VERSION file's %q", Version(), v)
	}
	top, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if string(top) != file {
		t.Fatalf("top-level VERSION %q differs from internal/version/VERSION %q", top, file)
	}
	log, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v\S+)`).FindSubmatch(log)
	if m == nil || string(m[1]) != v {
		t.Fatalf("CHANGELOG.md's newest entry is %q, want ## %s", m, v)
	}
}

// A build stamped at link time reports the stamp, not the file.
func TestStampedVersion(t *testing.T) {
	old, oldRev := stamped, stampedRevision
	t.Cleanup(func() { stamped, stampedRevision = old, oldRev })
	stamped, stampedRevision = "v9.8.7-3-gabc-dirty", "abc-dirty"
	if Version() != "v9.8.7-3-gabc-dirty" || Revision() != "abc-dirty" {
		t.Fatalf("Version() %q, Revision() %q", Version(), Revision())
	}
}
