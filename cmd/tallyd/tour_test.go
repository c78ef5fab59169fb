package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// TestTour runs docs/tour.md against the real binary, so the tour never
// drifts from what tallyd does. It builds tallyd, starts `tallyd local` in
// a temporary directory and runs every command of the tour's sh blocks, in
// order, in one bash session (so functions and variables carry over from
// block to block) whose working directory holds the deployment's data/.
// It then checks each command's output against the comment lines that
// follow it, loosely (see parseExpect and match).
//
// The tour uses tallyd local's default ports. The test runs on free ones
// and substitutes them everywhere in the tour's text: 8080 (the dashboard),
// 8081-8083 (the regions' HTTP ports), 4222-4224 (their NATS ports) and
// 6381-6383 (their RESP ports).
// `tallyd` on the PATH is the binary the test built. Three commands are the
// test's to carry out, as a person at the first terminal would:
//
//   - `make run` starts the deployment (first, and again after the tour
//     stopped it) and waits until every region takes writes;
//   - after a command that runs kill, the test waits for the deployment's
//     process to exit before the next command, as a person waits for the
//     prompt;
//   - a read (a command whose every curl is a GET) is run again until its
//     output matches, for a while: the tour's sleeps pace a person, and a
//     busy machine can take longer. So a sleep on its own line right
//     before a read is skipped.
//
// HTML comments in the tour steer the test; each applies to the next
// code block:
//
//	<!-- tour:skip REASON -->      the block is not run
//	<!-- tour:nocheck REASON -->   the block runs, its outputs are not checked
//	<!-- tour:vary KEY... -->      the values of these keys are not compared
//	<!-- tour:banner -->           the block is what `make run` prints
func TestTour(t *testing.T) { runTourDoc(t, "tour.md") }

// TestComingFromTheDesignNotes runs docs/design-notes.md as TestTour runs
// the tour: every route and payload of the product's design notes, next
// to tally's, with what tally answers.
func TestComingFromTheDesignNotes(t *testing.T) { runTourDoc(t, "design-notes.md") }

// runTourDoc runs docs/<name> as the tour (see TestTour).
func runTourDoc(t *testing.T, name string) {
	if testing.Short() {
		t.Skip("builds tallyd and runs a three-region deployment")
	}
	t.Parallel()
	raw, err := os.ReadFile("../../docs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := parseTour(string(raw))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	bin := buildTallyd(t)
	dir := t.TempDir()
	base := freePorts(t, 9) // one run of ports, so the three kinds cannot overlap
	d := &tourDeployment{doc: name, bin: bin, dir: dir, http: base, nats: base + 3, resp: base + 6}
	sh := startShell(t, dir, filepath.Dir(bin))
	for _, b := range blocks {
		switch {
		case b.skip != "":
			t.Logf("%s:%d: skipped: %s", name, b.line, b.skip)
			continue
		case b.banner:
			checkBanner(t, b, d)
			continue
		}
		for i, c := range b.cmds {
			if tourSleep.MatchString(c.text) && i+1 < len(b.cmds) && isRead(b.cmds[i+1].text) {
				continue // the read is retried until it matches
			}
			d.runStep(t, sh, b, c)
		}
	}
}

// A tourBlock is one fenced code block of the tour.
type tourBlock struct {
	line    int       // of the opening fence
	cmds    []tourCmd // an sh block's commands
	text    []string  // a banner block's lines
	skip    string    // why the block is not run
	nocheck string    // why its outputs are not checked
	vary    map[string]bool
	banner  bool
}

// A tourCmd is one shell command (one or more lines) and the comment
// lines that follow it, which show its output.
type tourCmd struct {
	line   int
	text   string
	expect []string
}

var tourMarker = regexp.MustCompile(`^<!-- tour:(skip|nocheck|vary|banner)\b\s*(.*?)\s*-->$`)

// parseTour returns the tour's sh blocks, and its banner block, in order.
func parseTour(doc string) ([]tourBlock, error) {
	var blocks []tourBlock
	var next tourBlock // the markers seen since the last block
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if m := tourMarker.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "skip":
				next.skip = m[2]
			case "nocheck":
				next.nocheck = m[2]
			case "vary":
				next.vary = map[string]bool{}
				for _, k := range strings.Fields(m[2]) {
					next.vary[k] = true
				}
			case "banner":
				next.banner = true
			}
			if (m[1] == "skip" || m[1] == "nocheck") && m[2] == "" {
				return nil, fmt.Errorf("line %d: tour:%s without a reason", i+1, m[1])
			}
			continue
		}
		if !strings.HasPrefix(line, "```") {
			continue
		}
		lang := strings.TrimPrefix(line, "```")
		start := i
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		b := next
		next = tourBlock{}
		b.line = start + 1
		switch {
		case b.banner:
			b.text = body
		case lang == "sh":
			cmds, err := splitCommands(body, start+2)
			if err != nil {
				return nil, err
			}
			b.cmds = cmds
		default:
			continue
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// splitCommands cuts an sh block into commands: a command runs over as
// many lines as bash needs to parse it whole (and past a line that ends
// in a backslash), and the comment lines after it show its output.
func splitCommands(body []string, first int) ([]tourCmd, error) {
	var cmds []tourCmd
	var pending []string
	for i, line := range body {
		trimmed := strings.TrimSpace(line)
		switch {
		case len(pending) > 0:
			pending = append(pending, line)
		case trimmed == "":
			continue
		case strings.HasPrefix(trimmed, "#"):
			if len(cmds) == 0 {
				continue // a note on what follows
			}
			c := &cmds[len(cmds)-1]
			c.expect = append(c.expect, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		default:
			pending = append(pending, line)
		}
		text := strings.Join(pending, "\n")
		if !strings.HasSuffix(line, "\\") && exec.Command("bash", "-n", "-c", text).Run() == nil {
			cmds = append(cmds, tourCmd{line: first + i - len(pending) + 1, text: text})
			pending = nil
		}
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("line %d: a command bash cannot parse: %s", first+len(body)-len(pending), strings.Join(pending, "\n"))
	}
	return cmds, nil
}

// tourDeployment is the `tallyd local` process the tour runs against.
type tourDeployment struct {
	doc, bin, dir    string // doc: the file run, in docs/
	http, nats, resp int    // the first region's ports; the others follow
	dashboard        int
	banner           []string
	proc             *exec.Cmd
	exited           chan struct{} // closed when proc has exited
}

// start runs `tallyd local` in d.dir, as `make run` would, and returns
// once it has printed that it runs.
func (d *tourDeployment) start(t *testing.T) {
	t.Helper()
	if d.proc != nil {
		select {
		case <-d.exited:
		default:
			t.Fatal("make run: the deployment still runs")
		}
	}
	logf, err := os.OpenFile(filepath.Join(d.dir, "tallyd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logf.Close() })
	cmd := exec.Command(d.bin, "local", "--port", strconv.Itoa(d.http), "--nats-port", strconv.Itoa(d.nats),
		"--resp-port", strconv.Itoa(d.resp), "--dashboard", "127.0.0.1:0")
	cmd.Dir, cmd.Stderr = d.dir, logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	d.proc, d.exited = cmd, exited
	lines := make(chan string)
	go func() { // owned by the process: ends when its stdout closes
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines {
		}
		<-exited
	})
	d.banner = nil
	timeout := time.After(90 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("tallyd local exited while starting: %s\n%s", strings.Join(d.banner, "\n"), d.log())
			}
			d.banner = append(d.banner, line)
			if m := regexp.MustCompile(`^dashboard: http://127\.0\.0\.1:(\d+)$`).FindStringSubmatch(line); m != nil {
				d.dashboard, _ = strconv.Atoi(m[1])
			}
			if line == "press Ctrl-C to stop" {
				go func() { // keep draining, so the process never blocks on stdout
					for range lines {
					}
				}()
				d.waitReady(t)
				return
			}
		case <-timeout:
			t.Fatalf("tallyd local did not start: %s\n%s", strings.Join(d.banner, "\n"), d.log())
		}
	}
}

// waitReady waits until every region takes writes, as a person waits for
// the deployment before trying it.
func (d *tourDeployment) waitReady(t *testing.T) {
	t.Helper()
	for i := range 3 {
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", d.http+i)
		testkit.WaitFor(t, 60*time.Second, func() error {
			if code, b, err := testkit.DoJSON("GET", url, ""); err != nil || code != 200 {
				return fmt.Errorf("%s: %d %v %v", url, code, b, err)
			}
			return nil
		})
	}
}

func (d *tourDeployment) log() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "tallyd.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// subst puts the deployment's ports in place of the tour's.
func (d *tourDeployment) subst(s string) string {
	for i := range 3 {
		s = replacePort(s, 8081+i, d.http+i)
		s = replacePort(s, 4222+i, d.nats+i)
		s = replacePort(s, 6381+i, d.resp+i)
	}
	return replacePort(s, 8080, d.dashboard)
}

// replacePort replaces the number from with to wherever it is not part
// of a longer number.
func replacePort(s string, from, to int) string {
	re := regexp.MustCompile(`(^|[^0-9])` + strconv.Itoa(from) + `([^0-9]|$)`)
	for { // twice for adjacent matches, which share a boundary
		n := re.ReplaceAllString(s, "${1}"+strconv.Itoa(to)+"${2}")
		if n == s {
			return s
		}
		s = n
	}
}

var (
	killCmd   = regexp.MustCompile(`(^|[\s;(])kill\s`)
	tourSleep = regexp.MustCompile(`^sleep [0-9.]+\s*(#.*)?$`)
	waitLoop  = regexp.MustCompile(`(^|[\s;])(until|while)\s`)
	writeCmd  = regexp.MustCompile(`-X\s*(PUT|POST|DELETE)|\s(-d|--data[a-z-]*)\s`)
)

// isRead reports whether a command only reads from the deployment: every
// curl in it is a GET, and it is no loop that waits on its own.
func isRead(text string) bool {
	return strings.Contains(text, "curl") && !writeCmd.MatchString(text) && !strings.Contains(text, "tallyd") && !waitLoop.MatchString(text)
}

// runStep runs one command of the tour and checks its output.
func (d *tourDeployment) runStep(t *testing.T, sh *tourShell, b tourBlock, c tourCmd) {
	t.Helper()
	text := d.subst(c.text)
	if strings.TrimSpace(strings.SplitN(text, "#", 2)[0]) == "make run" {
		d.start(t)
		return
	}
	where := fmt.Sprintf("%s:%d: %s", d.doc, c.line, c.text)
	pats, err := parseExpect(d.subst(strings.Join(c.expect, "\n")))
	if err != nil {
		t.Fatalf("%s\n  output comment: %v", where, err)
	}
	vary := map[string]bool{}
	for k := range tourVary {
		vary[k] = true
	}
	for k := range b.vary {
		vary[k] = true
	}
	check := func(out string) error {
		if b.nocheck != "" || len(pats) == 0 {
			return nil
		}
		return matchOutput(pats, out, vary)
	}
	if !isRead(text) {
		out := sh.run(t, where, text)
		if killCmd.MatchString(text) {
			select {
			case <-d.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the deployment did not exit", where)
			}
		}
		if err := check(out); err != nil {
			t.Errorf("%s\n  %v\n  got: %s", where, err, out)
		}
		return
	}
	var out string
	testkit.WaitFor(t, 20*time.Second, func() error {
		out = sh.run(t, where, text)
		if err := check(out); err != nil {
			return fmt.Errorf("%s\n  %w\n  got: %s", where, err, out)
		}
		return nil
	})
}

// tourVary are the keys whose values change from run to run: times,
// clocks and the random id of a replica's event log.
var tourVary = map[string]bool{
	"at": true, "hlc": true, "time": true, "from": true, "to": true, "times": true,
	"last_heard_ago_ms": true, "lag_ms": true, "staleness_ms": true, "log": true,
}

// checkBanner compares what `tallyd local` printed when it started with
// the tour's copy, line by line; "..." in the tour matches anything.
func checkBanner(t *testing.T, b tourBlock, d *tourDeployment) {
	t.Helper()
	var want []string
	for _, l := range b.text {
		if strings.TrimSpace(l) != "" {
			want = append(want, d.subst(l))
		}
	}
	if len(want) != len(d.banner) {
		t.Errorf("%s:%d: the banner has %d lines, tallyd local printed %d:\n%s", d.doc, b.line, len(want), len(d.banner), strings.Join(d.banner, "\n"))
		return
	}
	for i, w := range want {
		if !globMatch(strings.TrimRight(w, " "), strings.TrimRight(d.banner[i], " ")) {
			t.Errorf("%s:%d: banner line %d:\n  tour: %s\n  got:  %s", d.doc, b.line, i+1, w, d.banner[i])
		}
	}
}

// tourShell is one bash session that runs the tour's commands in turn.
type tourShell struct {
	cmd   *exec.Cmd
	stdin io.Writer
	lines chan string
}

const tourDone = "__tour_step_done__"

func startShell(t *testing.T, dir, binDir string) *tourShell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so a hung command dies with it
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &tourShell{cmd: cmd, stdin: stdin, lines: make(chan string, 64)}
	go func() { // owned by the shell: ends when its stdout closes
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for range s.lines {
		}
		_ = cmd.Wait()
	})
	return s
}

// run runs text in the session, with stdin from /dev/null and stderr
// folded into stdout, and returns what it printed.
func (s *tourShell) run(t *testing.T, where, text string) string {
	t.Helper()
	if _, err := fmt.Fprintf(s.stdin, "{\n%s\n} </dev/null 2>&1\nprintf '\\n%s %%d\\n' $?\n", text, tourDone); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var out []string
	timeout := time.After(3 * time.Minute)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("%s: bash exited: %s", where, strings.Join(out, "\n"))
			}
			if rest, ok := strings.CutPrefix(line, tourDone+" "); ok {
				if rest == "126" || rest == "127" {
					t.Fatalf("%s: exit status %s: %s", where, rest, strings.Join(out, "\n"))
				}
				return strings.TrimSpace(strings.Join(out, "\n"))
			}
			out = append(out, line)
		case <-timeout:
			t.Fatalf("%s: still running after 3 minutes: %s", where, strings.Join(out, "\n"))
		}
	}
}

// freePorts returns the first of n consecutive free TCP ports. They are
// below Linux's ephemeral range (32768 up), where no test's outgoing
// connection can take one before tallyd listens on it.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(12000)
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// An output comment is a loose copy of the output: JSON in which "..."
// stands for what the tour leaves out. As a member of an object it allows
// other members (without it, the keys must be the same); as an element of
// an array (or a line of its own), any run of elements (or values); as a
// string, or inside one, any value or any text. Text after a value on its
// line ("(403)", "(the same on all three)") is a note, and so is a comment
// line that does not start a value. One value against many outputs (a
// loop) must match each of them.
type pattern struct {
	kind   byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null, '*' one value, 'r' a run
	str    string
	num    float64
	keys   []string
	vals   map[string]*pattern
	open   bool // an object with "..."
	elems  []*pattern
	source string
}

// parseExpect parses the output comment lines of a command.
func parseExpect(text string) ([]*pattern, error) {
	var pats []*pattern
	p := &patParser{s: text}
	for p.i < len(p.s) {
		p.skipSpace()
		if p.i >= len(p.s) {
			break
		}
		if c := p.s[p.i]; c == '{' || c == '[' || c == '-' || (c >= '0' && c <= '9') || strings.HasPrefix(p.s[p.i:], "...") {
			start := p.i
			v, err := p.value(true)
			if err != nil {
				return nil, fmt.Errorf("%w in %q", err, text)
			}
			v.source = p.s[start:p.i]
			pats = append(pats, v)
		}
		p.skipLine()
	}
	return pats, nil
}

type patParser struct {
	s string
	i int
}

func (p *patParser) skipSpace() {
	for p.i < len(p.s) && strings.ContainsRune(" \t\n", rune(p.s[p.i])) {
		p.i++
	}
}

func (p *patParser) skipLine() {
	if j := strings.IndexByte(p.s[p.i:], '\n'); j >= 0 {
		p.i += j + 1
	} else {
		p.i = len(p.s)
	}
}

func (p *patParser) errf(format string, args ...any) error {
	return fmt.Errorf("at %d: %s", p.i, fmt.Sprintf(format, args...))
}

// value parses one pattern; in a sequence (an array, the top level)
// "..." is a run of values.
func (p *patParser) value(inSeq bool) (*pattern, error) {
	p.skipSpace()
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end")
	}
	if strings.HasPrefix(p.s[p.i:], "...") {
		p.i += 3
		if inSeq {
			return &pattern{kind: 'r'}, nil
		}
		return &pattern{kind: '*'}, nil
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		o := &pattern{kind: 'o', vals: map[string]*pattern{}}
		for {
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return o, nil
			}
			if strings.HasPrefix(p.s[p.i:], "...") {
				p.i += 3
				o.open = true
			} else {
				k, err := p.str()
				if err != nil {
					return nil, err
				}
				p.skipSpace()
				if p.i >= len(p.s) || p.s[p.i] != ':' {
					return nil, p.errf("want : after %q", k)
				}
				p.i++
				v, err := p.value(false)
				if err != nil {
					return nil, err
				}
				o.keys = append(o.keys, k)
				o.vals[k] = v
			}
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
			} else if p.i >= len(p.s) || p.s[p.i] != '}' {
				return nil, p.errf("want , or }")
			}
		}
	case c == '[':
		p.i++
		a := &pattern{kind: 'a'}
		for {
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				return a, nil
			}
			v, err := p.value(true)
			if err != nil {
				return nil, err
			}
			a.elems = append(a.elems, v)
			p.skipSpace()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
			} else if p.i >= len(p.s) || p.s[p.i] != ']' {
				return nil, p.errf("want , or ]")
			}
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		if s == "..." {
			return &pattern{kind: '*'}, nil
		}
		return &pattern{kind: 's', str: s}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		j := p.i + 1
		for j < len(p.s) && strings.ContainsRune("0123456789.eE+-", rune(p.s[j])) {
			j++
		}
		n, err := strconv.ParseFloat(p.s[p.i:j], 64)
		if err != nil {
			return nil, p.errf("number: %v", err)
		}
		p.i = j
		return &pattern{kind: 'n', num: n}, nil
	}
	for word, pat := range map[string]*pattern{"true": {kind: 'b', num: 1}, "false": {kind: 'b'}, "null": {kind: 'z'}} {
		if strings.HasPrefix(p.s[p.i:], word) {
			p.i += len(word)
			return pat, nil
		}
	}
	return nil, p.errf("want a value")
}

func (p *patParser) str() (string, error) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", p.errf("want a string")
	}
	j := p.i + 1
	for j < len(p.s) && p.s[j] != '"' {
		if p.s[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(p.s) {
		return "", p.errf("unterminated string")
	}
	var s string
	if err := json.Unmarshal([]byte(p.s[p.i:j+1]), &s); err != nil {
		return "", p.errf("string: %v", err)
	}
	p.i = j + 1
	return s, nil
}

// matchOutput checks a command's output, a stream of JSON values, against
// the patterns of its output comment.
func matchOutput(pats []*pattern, out string, vary map[string]bool) error {
	var vals []any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	for {
		var v any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("output is not JSON: %v", err)
		}
		vals = append(vals, v)
	}
	if len(pats) == 1 && pats[0].kind != 'r' {
		if len(vals) == 0 {
			return errors.New("no output")
		}
		for i, v := range vals {
			if err := match(pats[0], v, vary, ""); err != nil {
				return fmt.Errorf("value %d of %d: %w", i+1, len(vals), err)
			}
		}
		return nil
	}
	if err := matchSeq(pats, vals, vary, ""); err != nil {
		return err
	}
	return nil
}

// matchSeq matches a sequence of patterns, "..." runs among them.
func matchSeq(pats []*pattern, vals []any, vary map[string]bool, path string) error {
	if len(pats) == 0 {
		if len(vals) > 0 {
			return fmt.Errorf("%s: %d more values than the tour shows", path, len(vals))
		}
		return nil
	}
	if pats[0].kind == 'r' {
		var err error
		for k := 0; k <= len(vals); k++ {
			if err = matchSeq(pats[1:], vals[k:], vary, path); err == nil {
				return nil
			}
		}
		return err
	}
	if len(vals) == 0 {
		return fmt.Errorf("%s: fewer values than the tour shows", path)
	}
	if err := match(pats[0], vals[0], vary, path); err != nil {
		return err
	}
	return matchSeq(pats[1:], vals[1:], vary, path)
}

func match(p *pattern, v any, vary map[string]bool, path string) error {
	mismatch := func() error {
		got, _ := json.Marshal(v)
		return fmt.Errorf("%s: got %s, the tour shows %s", strings.TrimPrefix(path, "."), got, p.describe())
	}
	switch p.kind {
	case '*':
		return nil
	case 'o':
		o, ok := v.(map[string]any)
		if !ok {
			return mismatch()
		}
		for _, k := range p.keys {
			ov, ok := o[k]
			if !ok {
				return fmt.Errorf("%s.%s: missing", path, k)
			}
			if vary[k] {
				continue
			}
			if err := match(p.vals[k], ov, vary, path+"."+k); err != nil {
				return err
			}
		}
		if !p.open {
			for k := range o {
				if _, ok := p.vals[k]; !ok {
					return fmt.Errorf("%s.%s: not in the tour (add it, or \"...\")", path, k)
				}
			}
		}
		return nil
	case 'a':
		a, ok := v.([]any)
		if !ok {
			return mismatch()
		}
		if err := matchSeq(p.elems, a, vary, path+"[]"); err != nil {
			return fmt.Errorf("%w (got %s)", err, mustJSON(v))
		}
		return nil
	case 's':
		s, ok := v.(string)
		if !ok || !globMatch(p.str, s) {
			return mismatch()
		}
		return nil
	case 'n':
		n, ok := v.(json.Number)
		if !ok {
			return mismatch()
		}
		f, err := n.Float64()
		if err != nil || f != p.num {
			return mismatch()
		}
		return nil
	case 'b':
		b, ok := v.(bool)
		if !ok || b != (p.num == 1) {
			return mismatch()
		}
		return nil
	case 'z':
		if v != nil {
			return mismatch()
		}
		return nil
	}
	return fmt.Errorf("%s: a run (...) where one value belongs", path)
}

func (p *pattern) describe() string {
	switch p.kind {
	case 's':
		return strconv.Quote(p.str)
	case 'n':
		return strconv.FormatFloat(p.num, 'f', -1, 64)
	case 'b':
		return strconv.FormatBool(p.num == 1)
	}
	return string(p.kind)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// globMatch reports whether s matches pat, in which "..." stands for any
// text.
func globMatch(pat, s string) bool {
	parts := strings.Split(pat, "...")
	if len(parts) == 1 {
		return pat == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, part := range parts[1 : len(parts)-1] {
		j := strings.Index(s, part)
		if j < 0 {
			return false
		}
		s = s[j+len(part):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}
