package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxProductionLines is the most lines a production (non-test) Go file of
// this module may have: past it, a file holds more than one concern and
// is split along them.
const maxProductionLines = 800

// No production Go file of the module is over maxProductionLines. Test
// files are free; so are other modules in the tree (a directory with its
// own go.mod, such as the patched copy in third_party/redcon, which stays
// close to its upstream).
func TestNoProductionFileOverTheLineLimit(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if n := bytes.Count(b, []byte("\n")); n > maxProductionLines {
			rel, _ := filepath.Rel(root, path)
			t.Errorf("%s has %d lines, over %d: split it along its concerns, one file each", filepath.ToSlash(rel), n, maxProductionLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d production Go files; the walk from %s missed the module", checked, root)
	}
}
