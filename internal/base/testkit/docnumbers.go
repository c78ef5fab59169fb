package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// DocNumber is one default a doc quotes: in Doc (a path from the
// module's root), the one match of Anchor, a regular expression whose
// first group is the number, must read Want, which the test computes
// from the code's constant or DefaultConfig. Runs of white space in the
// doc, line breaks too, read as one space, so an anchor does not care
// where a paragraph wraps. It is an unnamed struct, so that a test's
// table of them can leave out the field names.
type DocNumber = struct {
	Doc, Anchor, Want string
}

// CheckDocNumbers checks every row against the docs under root (the
// module's root, relative to the test's directory). A row whose anchor
// matches nowhere, or more than once, fails as a number that disagrees
// does: an anchor must name one sentence, and a reworded sentence must
// take its anchor along.
func CheckDocNumbers(t testing.TB, root string, rows []DocNumber) {
	t.Helper()
	docs := map[string]*flatDoc{}
	for _, row := range rows {
		d, ok := docs[row.Doc]
		if !ok {
			var err error
			if d, err = readFlatDoc(filepath.Join(root, row.Doc)); err != nil {
				t.Fatal(err)
			}
			docs[row.Doc] = d
		}
		re, err := regexp.Compile(row.Anchor)
		if err != nil {
			t.Errorf("%s: anchor %q: %v", row.Doc, row.Anchor, err)
			continue
		}
		ms := re.FindAllStringSubmatchIndex(d.text, -1)
		switch {
		case len(ms) == 0:
			t.Errorf("%s: no sentence matches %q (reworded? then move the anchor; want %q in it)", row.Doc, row.Anchor, row.Want)
			continue
		case len(ms) > 1:
			t.Errorf("%s: %d sentences match %q, at lines %d and %d: make the anchor name one", row.Doc, len(ms), row.Anchor, d.lines[ms[0][0]], d.lines[ms[1][0]])
			continue
		case len(ms[0]) < 4 || ms[0][2] < 0:
			t.Errorf("%s: anchor %q has no group to read the number from", row.Doc, row.Anchor)
			continue
		}
		if got := d.text[ms[0][2]:ms[0][3]]; got != row.Want {
			t.Errorf("%s:%d says %q where the code's default is %q (anchor %q)", row.Doc, d.lines[ms[0][2]], got, row.Want, row.Anchor)
		}
	}
}

// flatDoc is a doc with every run of white space made one space, and
// the doc's line of each byte of it.
type flatDoc struct {
	text  string
	lines []int
}

func readFlatDoc(path string) (*flatDoc, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the doc: %w", err)
	}
	var b strings.Builder
	var lines []int
	line, space := 1, false
	for _, r := range string(raw) {
		if unicode.IsSpace(r) {
			if r == '\n' {
				line++
			}
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
			lines = append(lines, line)
		}
		space = false
		n, _ := b.WriteRune(r)
		for range n {
			lines = append(lines, line)
		}
	}
	return &flatDoc{text: b.String(), lines: lines}, nil
}

// Human spells a duration as the docs' prose does: "10 ms", "2 s",
// "5 min", "24 h".
func Human(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	default:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
}

// IEC spells a size as the docs do: "64 MiB", "256 KiB", "100 bytes".
func IEC[N int | int64 | uint64](n N) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(n) >= u.size && int64(n)%u.size == 0 {
			return fmt.Sprintf("%d %s", int64(n)/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", int64(n))
}

// Commas spells a count with its thousands separated: "16,384".
func Commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
