package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The VERSION file is one semantic version, the repository's top-level
// VERSION is the same file, an unstamped build reports it as a
// development build after it, and the CHANGELOG's newest entry is that
// release.
func TestVersionFileAndChangelog(t *testing.T) {
	v := FileVersion()
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION says %q: want a semantic version such as 0.1.0", file)
	}
	if want := v + "-dev"; stamped == "" && !strings.HasPrefix(Version(), want) {
		t.Fatalf("unstamped Version() = %q, want the VERSION file's %q, then -dev", Version(), v)
	}
	top, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if string(top) != file {
		t.Fatalf("top-level VERSION %q differs from internal/base/version/VERSION %q", top, file)
	}
	log, err := os.ReadFile("../../../CHANGELOG.md")
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

// An unstamped build says it is a development build after the VERSION
// file's release, with its commit when the toolchain recorded one.
func TestDevVersion(t *testing.T) {
	for rev, want := range map[string]string{
		"abcdef012345":       "v1.2.3-dev+abcdef012345",
		"abcdef012345-dirty": "v1.2.3-dev+abcdef012345-dirty",
		"unknown":            "v1.2.3-dev",
		"":                   "v1.2.3-dev",
	} {
		if got := devVersion("v1.2.3", rev); got != want {
			t.Errorf("devVersion(v1.2.3, %q) = %q, want %q", rev, got, want)
		}
	}
}

// scripts/version.sh, in a scratch repository: the VERSION file with
// -dev+<rev> before any tag, the tag at it, the tag with -dev+<rev>
// after it, and -dirty for uncommitted changes.
func TestVersionScript(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed (apt-get install git)")
	}
	script, err := filepath.Abs("../../../scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		t.Helper()
		run("git", "add", "-A")
		run("git", "commit", "-q", "-m", msg)
		return run("git", "rev-parse", "--short=12", "HEAD")
	}
	check := func(want string) {
		t.Helper()
		if got := run("bash", script); got != want {
			t.Fatalf("scripts/version.sh: %q, want %q", got, want)
		}
	}

	write("VERSION", "0.3.0\n")
	if got := run("bash", script); got != "v0.3.0-dev unknown" {
		t.Fatalf("outside a checkout: %q", got)
	}
	run("git", "init", "-q")
	rev := commit("first")
	check("v0.3.0-dev+" + rev + " " + rev)
	run("git", "tag", "-a", "-m", "v0.4.0", "v0.4.0")
	check("v0.4.0 " + rev)
	write("VERSION", "0.4.0\n")
	check("v0.4.0-dev+" + rev + "-dirty " + rev + "-dirty")
	rev = commit("after")
	check("v0.4.0-dev+" + rev + " " + rev)
}

// scripts/release-notes.sh on copies of the real CHANGELOG.md and
// VERSION: the Unreleased entries move under the new version's heading,
// an empty Unreleased stays above it, VERSION follows, and what
// TestVersionFileAndChangelog checks holds for the result. A release
// that is not newer, already there, not semantic, or has nothing to
// release changes nothing.
func TestReleaseNotesScript(t *testing.T) {
	script, err := filepath.Abs("../../../scripts/release-notes.sh")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile("../../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log, vfile := filepath.Join(dir, "CHANGELOG.md"), filepath.Join(dir, "VERSION")
	reset := func(changelog string) {
		t.Helper()
		if err := os.WriteFile(log, []byte(changelog), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vfile, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	release := func(v string) (string, error) {
		cmd := exec.Command("bash", script, v, log, vfile)
		cmd.Env = append(os.Environ(), "RELEASE_DATE=2026-01-02")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	section := func(text, heading string) string { // the lines under heading, up to the next "## "
		_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
		if !ok {
			t.Fatalf("no %q in:\n%.400s", heading, text)
		}
		if i := strings.Index(rest, "\n## "); i >= 0 {
			rest = rest[:i]
		}
		return strings.TrimSpace(rest)
	}

	reset(string(orig))
	unreleased := section(string(orig), "## Unreleased")
	cur := strings.TrimPrefix(FileVersion(), "v")
	parts := strings.SplitN(cur, ".", 3)
	next := parts[0] + "." + parts[1] + ".99"
	if out, err := release(next); err != nil {
		t.Fatalf("release %s: %v: %s", next, err, out)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if s := section(string(got), "## Unreleased"); s != "" {
		t.Errorf("Unreleased after the release: %.200q, want empty", s)
	}
	if unreleased != "" {
		if s := section(string(got), "## v"+next+" (2026-01-02)"); s != unreleased {
			t.Errorf("## v%s holds %.200q, want what was unreleased %.200q", next, s, unreleased)
		}
	}
	if !strings.Contains(string(got), "\n## "+FileVersion()+"\n") || len(got) <= len(orig) {
		t.Errorf("the older releases are not kept")
	}
	v, _ := os.ReadFile(vfile)
	m := regexp.MustCompile(`(?m)^## (v\S+)`).FindSubmatch(got)
	if strings.TrimSpace(string(v)) != next || m == nil || string(m[1]) != "v"+next {
		t.Errorf("VERSION %q, newest entry %q: want %s and v%s", v, m, next, next)
	}
	if st, err := os.Stat(log); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("CHANGELOG's mode after the release: %v %v, want 0644 kept", st.Mode(), err)
	}

	// Refused, changing nothing.
	minimal := "# Changelog\n\n## Unreleased\n\n- one change\n\n## " + FileVersion() + "\n\nThe first.\n"
	empty := "# Changelog\n\n## Unreleased\n\n## " + FileVersion() + "\n\nThe first.\n"
	for _, c := range []struct{ name, changelog, version string }{
		{"not newer", minimal, cur},
		{"older", minimal, "0.0.1"},
		{"not semantic", minimal, "1.2"},
		{"already there", minimal + "\n## v" + next + "\n", next},
		{"nothing unreleased", empty, next},
	} {
		reset(c.changelog)
		if out, err := release(c.version); err == nil {
			t.Errorf("%s (%s): released: %s", c.name, c.version, out)
		}
		if b, _ := os.ReadFile(log); string(b) != c.changelog {
			t.Errorf("%s: the changelog changed:\n%s", c.name, b)
		}
		if b, _ := os.ReadFile(vfile); string(b) != file {
			t.Errorf("%s: VERSION changed to %q", c.name, b)
		}
	}
}
