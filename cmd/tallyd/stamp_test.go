package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A binary built as `make build` builds it (stamped with what
// scripts/version.sh says of this checkout: a tag, or <tag>-dev+<commit>
// between tags) reports that release in `tallyd --version` and in its
// replica's GET /v1/status, the same string in both.
func TestStampedBinaryReportsItsRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tallyd")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	t.Parallel()
	// The ldflags make uses, as `make -n build` prints them.
	out, err := exec.Command("make", "-s", "-n", "-C", "../..", "build").Output()
	if err != nil {
		t.Fatalf("make -n build: %v", err)
	}
	sh := exec.Command("bash", "scripts/version.sh")
	sh.Dir = "../.."
	script, err := sh.Output()
	if err != nil {
		t.Fatalf("scripts/version.sh: %v", err)
	}
	stamp, rev, ok := strings.Cut(strings.TrimSpace(string(script)), " ")
	if !ok || stamp == "" || rev == "" {
		t.Fatalf("scripts/version.sh says %q, want a release and a revision", script)
	}
	cmdline := strings.TrimSpace(string(out))
	_, ldflags, ok := strings.Cut(cmdline, "-ldflags '")
	if !ok {
		t.Fatalf("make build runs %q: no -ldflags", cmdline)
	}
	ldflags, _, _ = strings.Cut(ldflags, "'")
	if !strings.Contains(ldflags, ".stamped="+stamp) || !strings.Contains(ldflags, ".stampedRevision="+rev) {
		t.Fatalf("make build's ldflags %q do not stamp %s %s", ldflags, stamp, rev)
	}
	bin := filepath.Join(t.TempDir(), "tallyd")
	// Its compile is the other tests' (testkit.BuildTallyd), so only the
	// link, where -ldflags stamps, is this build's own.
	if err := testkit.BuildTallyd(bin, "-ldflags", ldflags); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(v), "tallyd "+stamp+" (revision "+rev) {
		t.Fatalf("tallyd --version: %q %v; want tallyd %s (revision %s...", v, err, stamp, rev)
	}
	_, url := startProcess(t, bin, t.TempDir())
	st, b, err := testkit.DoJSON("GET", url+"/v1/status", "")
	if err != nil || st != 200 || b["version"] != stamp {
		t.Fatalf("GET /v1/status: %d %v %v; want version %s", st, b["version"], err, stamp)
	}
}
