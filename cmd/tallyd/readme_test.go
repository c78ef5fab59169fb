package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's taste is a few steps of the tour, word for word, so that
// TestTour checks it too: every command of its sh blocks, with the output
// comment under it, is in docs/tour.md.
func TestREADMETasteIsInTheTour(t *testing.T) {
	readme, tour := readDoc(t, "../../README.md"), readDoc(t, "../../docs/tour.md")
	readmeBlocks, err := parseTour(readme)
	if err != nil {
		t.Fatal(err)
	}
	tourBlocks, err := parseTour(tour)
	if err != nil {
		t.Fatal(err)
	}
	inTour := map[string]bool{}
	for _, b := range tourBlocks {
		for _, c := range b.cmds {
			inTour[c.text+"\n"+strings.Join(c.expect, "\n")] = true
		}
	}
	n := 0
	for _, b := range readmeBlocks {
		if b.skip != "" {
			continue
		}
		for _, c := range b.cmds {
			n++
			if !inTour[c.text+"\n"+strings.Join(c.expect, "\n")] {
				t.Errorf("README.md:%d: not in docs/tour.md with this output:\n%s\n# %s", c.line, c.text, strings.Join(c.expect, "\n# "))
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d commands in the README's taste: the parse is broken", n)
	}
}

// The README's package map names every package of the module, and no
// other; a package outside internal/ and cmd/ imports only packages above
// it in the map.
func TestREADMEPackageMap(t *testing.T) {
	readme := readDoc(t, "../../README.md")
	_, table, ok := strings.Cut(readme, "\n## Packages\n")
	if !ok {
		t.Fatal("README.md has no ## Packages section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/]+)` \\|").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}

	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/tally-dev/tally/"
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		imports[pkg] = nil
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				imports[pkg] = append(imports[pkg], rest)
			}
		}
	}
	for pkg := range imports {
		if !slices.Contains(listed, pkg) {
			t.Errorf("package %s is missing from the README's package map", pkg)
		}
	}
	for i, pkg := range listed {
		deps, ok := imports[pkg]
		if !ok {
			t.Errorf("the README's package map lists %s, which is no package", pkg)
			continue
		}
		if strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		for _, dep := range deps {
			if !strings.HasPrefix(dep, "internal/") && !slices.Contains(listed[:i], dep) {
				t.Errorf("%s imports %s, which the README's package map lists below it", pkg, dep)
			}
		}
	}
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(fmt.Errorf("read the docs: %w", err))
	}
	return string(b)
}

// The README's prerequisites name every Debian package .ci/run installs
// for `make test`, and the command each is needed for where the two
// differ (promtool from prometheus): the list is read from .ci/run, so a
// tool CI starts installing cannot be left out of the README.
func TestREADMEPrerequisitesAreCIs(t *testing.T) {
	readme, ci := readDoc(t, "../../README.md"), readDoc(t, "../../.ci/run")
	_, prereq, ok := strings.Cut(readme, "**Prerequisites:**")
	if !ok {
		t.Fatal("README.md has no **Prerequisites:** paragraph")
	}
	prereq, _, _ = strings.Cut(prereq, "\n\n")
	words := map[string]bool{}
	for _, w := range regexp.MustCompile("[A-Za-z0-9][A-Za-z0-9._-]*").FindAllString(prereq, -1) {
		words[w] = true
	}
	// Each line of .ci/run that adds a package to install: the package,
	// and the command its check looks for (command -v CMD).
	need := regexp.MustCompile(`need\+=\(([a-z0-9.+-]+)\)`)
	cmdOf := regexp.MustCompile(`command -v ([a-z0-9._-]+)`)
	n := 0
	for line := range strings.SplitSeq(ci, "\n") {
		m := need.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		if !words[m[1]] {
			t.Errorf("README.md's prerequisites lack the package %s (.ci/run: %s)", m[1], strings.TrimSpace(line))
		}
		if c := cmdOf.FindStringSubmatch(line); c != nil && c[1] != m[1] && !words[c[1]] {
			t.Errorf("README.md's prerequisites lack the command %s, of the package %s (.ci/run: %s)", c[1], m[1], strings.TrimSpace(line))
		}
	}
	if n < 5 {
		t.Fatalf("only %d packages read from .ci/run: the parse is broken", n)
	}
}
