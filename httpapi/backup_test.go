package httpapi

import (
	"encoding/json"
	"github.com/tally-dev/tally/frontdoor"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// POST /v1/admin/backup on a real filesystem: a dir with a NUL byte is a
// 400 in the JSON error form (it was a 500), and a dir inside a data
// directory of the deployment is refused however the path reaches it: a
// data directory itself, a directory under it, through a symlinked
// parent, or a data directory configured through a symlink. A dir
// outside every data directory, also through a symlink or beside a data
// directory with the same name prefix, gets the backup.
func TestBackupPaths(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) string {
		t.Helper()
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target string, parts ...string) string {
		t.Helper()
		p := filepath.Join(append([]string{root}, parts...)...)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	data, other, realOther := mk("data"), mk("nested", "deploy"), mk("disk2", "eu-1")
	mk("data", "sub")
	backups, beside := mk("backups"), mk("data-old")
	toData := link(data, "to-data")
	toBackups := link(backups, "to-backups")
	otherLink := link(realOther, "eu-1-link") // the config names eu-1's dir through a symlink
	e := newEnv(t, envOpts{api: func(c *Config) { c.DataDirs = []string{data, other, otherLink} }})

	post := func(dir string) resp {
		t.Helper()
		b, err := json.Marshal(map[string]string{"dir": dir})
		if err != nil {
			t.Fatal(err)
		}
		return e.do("POST", "/v1/admin/backup", string(b))
	}
	for _, dir := range []string{"/tmp/a\x00b", filepath.Join(backups, "x\x00")} {
		r := post(dir)
		r.isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
		if msg, _ := r.body["error"].(string); !strings.Contains(msg, "NUL") {
			t.Errorf("dir %q: %q, want the message to name the NUL byte", dir, msg)
		}
	}
	for _, dir := range []string{
		data,                                     // the data directory itself
		filepath.Join(data, "backup-1"),          // inside it
		filepath.Join(data, "sub", "backup-1"),   // deeper
		filepath.Join(other, "backup-1"),         // another data directory of the deployment
		filepath.Join(toData, "backup-1"),        // through a symlinked parent
		filepath.Join(toData, "sub", "backup-1"), // through a symlinked ancestor
		filepath.Join(realOther, "backup-1"),     // a data directory configured through a symlink
		filepath.Join(otherLink, "sub-backup"),   // and reached through it
	} {
		r := post(dir)
		r.isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)
		if msg, _ := r.body["error"].(string); !strings.Contains(msg, "inside the data directory") {
			t.Errorf("dir %s: %q, want it refused as inside a data directory", dir, msg)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) && dir != data {
			t.Errorf("dir %s was created (%v)", dir, err)
		}
	}
	post(filepath.Join(root, "missing", "b")).isError(t, http.StatusBadRequest, frontdoor.CodeBadRequest)

	for _, tc := range []struct{ dir, written string }{
		{filepath.Join(backups, "b1"), filepath.Join(backups, "b1")},
		{filepath.Join(toBackups, "b2"), filepath.Join(backups, "b2")}, // a symlink to outside is fine
		{filepath.Join(beside, "b3"), filepath.Join(beside, "b3")},     // "data-old" is not inside "data"
	} {
		b := post(tc.dir).ok(t)
		if b["dir"] != tc.dir || num(t, b, "files") == 0 {
			t.Errorf("backup into %s: %v", tc.dir, b)
		}
		if fi, err := os.Lstat(tc.written); err != nil || !fi.IsDir() {
			t.Errorf("backup into %s: %s is not a directory (%v)", tc.dir, tc.written, err)
		}
	}
	if r := post(filepath.Join(backups, "b1")); r.status != http.StatusConflict {
		t.Errorf("a second backup into b1: %d, want 409", r.status)
	}
}
