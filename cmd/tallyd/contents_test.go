package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The long docs open with a contents list: one link per section (every
// "## " heading outside code blocks, in order), each to the anchor GitHub
// gives that heading. A section added, renamed or moved without its line
// in the list fails here.
func TestLongDocsOpenWithContents(t *testing.T) {
	link := regexp.MustCompile(`^- \[(.+)\]\(#([^)]*)\)$`)
	for _, path := range []string{"../../docs/architecture.md", "../../docs/operations.md"} {
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
