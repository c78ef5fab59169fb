package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A config with problems of every sort, each on its own line of the file.
const badConfig = `region = "us"
port = 1
listen = "nohost"
peer "eu" {}
durability = "fast"
log_json = "maybe"
limit "write" {
  clients = 3
}
`

// validate reports every problem of a config at once, the file's with
// file:line, and exits 2; serve refuses the same config with the same
// problems.
func TestValidateReportsEveryProblem(t *testing.T) {
	path := writeFile(t, "bad.hcl", badConfig)
	code, stdout, stderr := runArgs(t, "validate", "--config", path)
	if code != 2 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, stdout)
	}
	want := []string{
		path + `:2 (port = 1): Unsupported argument: An argument named "port"`,
		path + `:4 (peer "eu" {}): Unsupported block type: Blocks of type "peer"`,
		path + `:6 (log_json = "maybe"): Unsuitable value type`,
		path + `:8 (clients = 3): Unsupported argument: An argument named "clients"`,
		`listen "nohost": want host:port`,
		`durability "fast": want fsync or none`,
		"tallyd: validate: 6 problems; tallyd serve refuses this config",
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stderr)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i+1, lines[i], w)
		}
	}

	code, _, serveErr := runArgs(t, "serve", "--config", path)
	if code != 2 {
		t.Fatalf("serve: exit %d, want 2", code)
	}
	for _, w := range want[:len(want)-1] {
		if !strings.Contains(serveErr, w) {
			t.Errorf("serve's refusal %q lacks %q", serveErr, w)
		}
	}
}

// Flags and the environment count as they do for serve: a flag fixes a
// file's value, and a missing token is a problem.
func TestValidateFlagsAndEnvironment(t *testing.T) {
	path := writeFile(t, "c.hcl", "region = \"us\"\nlisten = \"nohost\"\n")
	if code, _, stderr := runArgs(t, "validate", "--config", path, "--listen", "127.0.0.1:9000"); code != 0 {
		t.Fatalf("a flag fixing the listen address: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runArgs(t, "validate", "--config", path, "--nope"); code != 2 || !strings.Contains(stderr, "-nope") {
		t.Fatalf("an unknown flag: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runArgs(t, "validate", "--config", filepath.Join(t.TempDir(), "none.hcl")); code != 2 || !strings.Contains(stderr, "none.hcl") {
		t.Fatalf("a missing file: exit %d, %s", code, stderr)
	}
	public := writeFile(t, "p.hcl", "listen = \"0.0.0.0:8080\"\ninsecure_listen = true\n")
	if code, _, stderr := runArgs(t, "validate", "--config", public); code != 2 || !strings.Contains(stderr, "without an admin token") ||
		!strings.Contains(stderr, "1 problem;") {
		t.Fatalf("a public listener without an admin token: exit %d, %s", code, stderr)
	}
	c := &cli{getenv: tokenEnv}
	var out, errOut strings.Builder
	c.stdout, c.stderr = &out, &errOut
	if code := c.run(context.Background(), []string{"validate", "--config", public}); code != 0 {
		t.Fatalf("with TALLY_ADMIN_TOKEN set: exit %d, %s", code, errOut.String())
	}
}

// Every shipped tallyd config validates clean, with the secrets their
// headers say come from the environment.
func TestShippedConfigsValidate(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "configs", "*.hcl"))
	if len(files) < 4 {
		t.Fatalf("found %d configs", len(files))
	}
	// The files they name under /etc/tally are made in a scratch
	// directory the copies point at: validate checks that they exist.
	named := regexp.MustCompile(`"/etc/tally/([^"]+)"`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, m := range named.FindAllStringSubmatch(string(raw), -1) {
			if !strings.HasPrefix(strings.TrimSpace(lineOf(string(raw), m[0])), "#") {
				if err := os.WriteFile(filepath.Join(dir, m[1]), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		copied := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(copied, []byte(strings.ReplaceAll(string(raw), "/etc/tally/", dir+"/")), 0o600); err != nil {
			t.Fatal(err)
		}
		c := &cli{getenv: tokenEnv}
		var out, errOut strings.Builder
		c.stdout, c.stderr = &out, &errOut
		if code := c.run(context.Background(), []string{"validate", "--config", copied}); code != 0 || errOut.Len() > 0 ||
			!strings.HasPrefix(out.String(), "ok: replica ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", f, code, out.String(), errOut.String())
		}
	}
}

// lineOf is the line of text that holds s.
func lineOf(text, s string) string {
	i := strings.Index(text, s)
	start := strings.LastIndex(text[:i], "\n") + 1
	end := strings.Index(text[i:], "\n")
	if end < 0 {
		return text[start:]
	}
	return text[start : i+end]
}

// validate checks the files a config names, as serve would open them: a
// missing one, or a directory where a file belongs, is a problem naming
// the setting; serve is not told (it fails opening them, as before).
func TestValidateChecksReferencedFiles(t *testing.T) {
	dir := t.TempDir()
	cert := writeFile(t, "cert.pem", "x")
	cfg := fmt.Sprintf(`listen = "127.0.0.1:8080"
tls_cert = %q
tls_key = %q
tls_client_ca = %q
nats = "nats://127.0.0.1:4222"
replica = "us-1"
nats_ca = %q
`, cert, filepath.Join(dir, "missing-key.pem"), dir, filepath.Join(dir, "none", "ca.pem"))
	path := writeFile(t, "files.hcl", cfg)
	code, stdout, stderr := runArgs(t, "validate", "--config", path)
	if code != 2 || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want 2 (stderr %q)", code, stdout, stderr)
	}
	for _, want := range []string{
		`tls_key "` + filepath.Join(dir, "missing-key.pem") + `": no such file or directory`,
		`tls_client_ca "` + dir + `": is a directory`,
		`nats_ca "` + filepath.Join(dir, "none", "ca.pem") + `": no such file or directory`,
		"3 problems",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "tls_cert") {
		t.Errorf("the readable tls_cert is reported:\n%s", stderr)
	}
	// With every file there, the same config validates.
	for _, f := range []string{"missing-key.pem", "ca-file.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fixed := strings.NewReplacer(filepath.Join(dir, "none", "ca.pem"), filepath.Join(dir, "ca-file.pem"),
		fmt.Sprintf("tls_client_ca = %q", dir), fmt.Sprintf("tls_client_ca = %q", cert)).Replace(cfg)
	if code, _, stderr := runArgs(t, "validate", "--config", writeFile(t, "fixed.hcl", fixed)); code != 0 {
		t.Fatalf("every file there: exit %d, %s", code, stderr)
	}
}

// The credential files the environment names (TALLY_NATS_PASSWORD_FILE,
// TALLY_*_TOKEN_FILE, each pod's own from a Secret) are checked too: a
// missing one fails validate, naming the variable and not the secret;
// with the files there, the same config validates.
func TestValidateChecksCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, "c.hcl", "region = \"us\"\nreplica = \"us-1\"\nlisten = \"127.0.0.1:8080\"\nnats = \"nats://127.0.0.1:4222\"\nnats_user = \"tally-us-1\"\n")
	kv := map[string]string{
		envNATSPass + "_FILE":   filepath.Join(dir, "nats-password"),
		envWriteToken + "_FILE": filepath.Join(dir, "write-token"),
	}
	validate := func() (int, string) {
		c := &cli{getenv: env(kv)}
		var out, errOut strings.Builder
		c.stdout, c.stderr = &out, &errOut
		return c.run(context.Background(), []string{"validate", "--config", path}), errOut.String()
	}
	code, stderr := validate()
	if code != 2 {
		t.Fatalf("missing credential files: exit %d, %s", code, stderr)
	}
	for _, want := range []string{envNATSPass + "_FILE", envWriteToken + "_FILE", "2 problems"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for name, secret := range map[string]string{"nats-password": "pod-own-secret\n", "write-token": "w-secret\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, stderr := validate(); code != 0 {
		t.Fatalf("with the credential files there: exit %d, %s", code, stderr)
	}
}
