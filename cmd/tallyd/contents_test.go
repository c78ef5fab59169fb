package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The long docs (those of many sections) open with a contents list:
// one link per section (every "## " heading outside code blocks, in
// order), each to the anchor GitHub gives that heading. A section added,
// renamed or moved without its line in the list fails here.
func TestLongDocsOpenWithContents(t *testing.T) {
	link := regexp.MustCompile(`^- \[(.+)\]\(#([^)]*)\)$`)
	for _, path := range []string{"../../docs/architecture.md", "../../docs/operations.md", "../../docs/performance.md", "../../docs/benchmarks.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var heads, listed []string
		inContents, fence := false, false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
				continue
			}
			if fence {
				continue
			}
			if strings.HasPrefix(line, "## ") {
				title := strings.TrimPrefix(line, "## ")
				inContents = title == "Contents"
				if !inContents {
					heads = append(heads, title)
				}
				continue
			}
			if inContents {
				if m := link.FindStringSubmatch(line); m != nil {
					if want := headingAnchor(m[1]); m[2] != want {
						t.Errorf("%s: contents line %q links #%s; the heading's anchor is #%s", path, line, m[2], want)
					}
					listed = append(listed, m[1])
				}
			}
		}
		if len(listed) == 0 {
			t.Errorf("%s has no contents list (a \"## Contents\" section of links)", path)
			continue
		}
		if strings.Join(listed, "\n") != strings.Join(heads, "\n") {
			t.Errorf("%s: the contents list\n  %s\nis not the sections in order\n  %s", path,
				strings.Join(listed, "\n  "), strings.Join(heads, "\n  "))
		}
	}
}

// headingAnchor is the anchor GitHub gives a heading: lower case, every
// character but letters, digits, spaces, hyphens and underscores
// dropped, spaces made hyphens.
func headingAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(title)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// maxSectionLines is the most lines a long doc runs between two headings:
// a section longer than this is split under "### " subheadings, so that
// a reader can find a part of it (and link to it) without paging through
// the whole section.
const maxSectionLines = 150

// The long docs' sections are split under subheadings: no stretch of a
// doc between two headings (of any level, outside code blocks) is longer
// than maxSectionLines.
func TestLongDocsSectionsHaveSubheadings(t *testing.T) {
	for _, path := range []string{"../../docs/architecture.md", "../../docs/operations.md"} {
		lines := strings.Split(readDoc(t, path), "\n")
		heads := 0
		start, title, fence := 1, "(the top)", false
		check := func(end int) {
			if n := end - start; n > maxSectionLines {
				t.Errorf("%s:%d: %q runs %d lines without a subheading (at most %d): split it under ### headings", path, start, title, n, maxSectionLines)
			}
		}
		for i, line := range lines {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			}
			if fence || !strings.HasPrefix(line, "## ") && !strings.HasPrefix(line, "### ") && !strings.HasPrefix(line, "#### ") {
				continue
			}
			heads++
			check(i + 1)
			start, title = i+1, line
		}
		check(len(lines) + 1)
		if heads < 10 {
			t.Errorf("%s: only %d headings: the parse is broken", path, heads)
		}
	}
}

// Every relative link of the docs (README.md and docs/*.md) names a file
// that exists and, with a #fragment into a Markdown file, a heading of
// it: a section renamed or a fact moved to its one place cannot leave a
// pointer to nowhere.
func TestDocLinksResolve(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		for _, h := range markdownHeadings(readDoc(t, path)) {
			a[h.anchor] = true
		}
		anchors[path] = a
		return a
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for _, path := range files {
		for _, m := range link.FindAllStringSubmatch(readDoc(t, path), -1) {
			target, frag, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			file := path
			if target != "" {
				file = filepath.Join(filepath.Dir(path), target)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %s: no file %s", path, m[1], target)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !anchorsOf(file)[frag] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", path, m[1], filepath.Base(file), frag)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d relative links in the docs: the parse is broken", n)
	}
}
