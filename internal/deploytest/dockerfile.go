// Package deploytest reads the deployment files under deploy/ (the
// Dockerfile, compose, systemd and Kubernetes files) into the tallyd
// command lines and configuration files they hold, so that tests can
// parse each with tallyd's own flag sets and config loader and run the
// image's build steps.
package deploytest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Instruction is one instruction of a Dockerfile: its keyword (upper
// case), the text after it with line continuations joined, and the line
// it starts on.
type Instruction struct {
	Keyword string
	Args    string
	Line    int
}

// Dockerfile is a parsed Dockerfile.
type Dockerfile struct {
	Path         string
	Instructions []Instruction
}

// ReadDockerfile parses the Dockerfile at path: comments dropped, lines
// ending in a backslash joined to the next.
func ReadDockerfile(path string) (*Dockerfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("deploytest: %w", err)
	}
	defer f.Close()
	d := &Dockerfile{Path: path}
	sc := bufio.NewScanner(f)
	var cur *Instruction
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cont := strings.HasSuffix(line, `\`)
		line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
		if cur == nil {
			kw, rest, _ := strings.Cut(line, " ")
			cur = &Instruction{Keyword: strings.ToUpper(kw), Args: strings.TrimSpace(rest), Line: n}
		} else {
			cur.Args = strings.TrimSpace(cur.Args + " " + line)
		}
		if !cont {
			d.Instructions = append(d.Instructions, *cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("deploytest: %s: %w", path, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("deploytest: %s:%d: continued past the end", path, cur.Line)
	}
	return d, nil
}

// Final returns the instructions of the last build stage with this
// keyword.
func (d *Dockerfile) Final(keyword string) []Instruction {
	var out []Instruction
	for _, in := range d.Instructions {
		switch in.Keyword {
		case "FROM":
			out = nil
		case keyword:
			out = append(out, in)
		}
	}
	return out
}

// Last returns the last stage's last instruction with this keyword, or an
// error if it has none.
func (d *Dockerfile) Last(keyword string) (Instruction, error) {
	ins := d.Final(keyword)
	if len(ins) == 0 {
		return Instruction{}, fmt.Errorf("deploytest: %s: no %s in the last stage", d.Path, keyword)
	}
	return ins[len(ins)-1], nil
}

// ExecForm parses the exec (JSON array) form of CMD, ENTRYPOINT or a
// HEALTHCHECK's CMD. The shell form is refused: an image without a shell
// cannot run it.
func ExecForm(in Instruction) ([]string, error) {
	s := in.Args
	if in.Keyword == "HEALTHCHECK" {
		i := strings.Index(s, "CMD ")
		if i < 0 {
			return nil, fmt.Errorf("deploytest: line %d: HEALTHCHECK without CMD", in.Line)
		}
		s = strings.TrimSpace(s[i+len("CMD "):])
	}
	var argv []string
	if err := json.Unmarshal([]byte(s), &argv); err != nil {
		return nil, fmt.Errorf("deploytest: line %d: %s %s: want the exec form, a JSON array: %w", in.Line, in.Keyword, s, err)
	}
	return argv, nil
}
