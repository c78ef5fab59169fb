package main

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// The module's folders keep floors apart: no core package (one outside
// internal/ and cmd/) imports a package from a folder that also holds,
// in it or in a folder under it, a package importing that core package.
// The ground floor core packages lean on (internal/base) holds no
// harness, and the harnesses that import the core (internal/chaos,
// internal/bench, internal/deploy, ...) live in folders no core package
// imports from.
func TestNoCorePackageImportsFromAFolderThatImportsIt(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/tally-dev/tally/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/tally-dev/tally/"
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], mod) {
			continue
		}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, mod) {
				imports[strings.TrimPrefix(f[0], mod)] = append(imports[strings.TrimPrefix(f[0], mod)], strings.TrimPrefix(imp, mod))
			}
		}
	}
	core := func(p string) bool { return !strings.HasPrefix(p, "internal/") && !strings.HasPrefix(p, "cmd/") }
	// importers[p]: the packages of the module importing p.
	importers := map[string][]string{}
	for p, imps := range imports {
		for _, imp := range imps {
			importers[imp] = append(importers[imp], p)
		}
	}
	checked := 0
	for c, imps := range imports {
		if !core(c) {
			continue
		}
		for _, imp := range imps {
			if !strings.HasPrefix(imp, "internal/") {
				continue
			}
			folder := path.Dir(imp)
			checked++
			for _, user := range importers[c] {
				if dir := path.Dir(user); dir == folder || strings.HasPrefix(dir, folder+"/") { // the folder or one under it
					t.Errorf("%s imports %s, from folder %s, which also holds %s, which imports %s", c, imp, folder, user, c)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no core package imports an internal package: the check read nothing")
	}
}
