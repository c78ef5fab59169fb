package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/frontdoor"
)

type backupRequest struct {
	Dir *string `json:"dir"`
}

var errNoParent = newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "the parent directory of dir does not exist on the replica's machine")

// backupTarget is where a backup into dir really goes: dir's parent with
// every symlink resolved, and dir's last element. It refuses a target
// inside (or equal to) a data directory of the deployment
// (Config.DataDirs, each resolved the same way), however the path
// reaches it: a checkpoint written into a store's directory would be
// taken for part of it, or be deleted with it. The backup is then
// written at the resolved path, the one checked.
func (s *Server) backupTarget(dir string) (string, error) {
	parent, err := filepath.EvalSymlinks(filepath.Dir(dir))
	if errors.Is(err, os.ErrNotExist) {
		return "", errNoParent
	}
	if err != nil {
		return "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest, "the parent directory of dir cannot be resolved: %v", err)
	}
	real := filepath.Join(parent, filepath.Base(dir))
	for _, d := range s.cfg.DataDirs {
		data, err := resolveDir(d)
		if err != nil {
			return "", fmt.Errorf("backup: resolve the data directory %s: %w", d, err)
		}
		if within(real, data) {
			return "", newError(http.StatusBadRequest, frontdoor.CodeBadRequest,
				"dir %s is inside the data directory %s (resolved: %s): write the backup outside every data directory", dir, d, real)
		}
	}
	return real, nil
}

// resolveDir is d made absolute with its symlinks resolved; a directory
// not there (yet) is only made absolute.
func resolveDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	r, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, os.ErrNotExist) {
		return abs, nil
	}
	return r, err
}

// within reports whether path is dir or under it (both clean and
// absolute).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// POST /v1/admin/backup {"dir": "/abs/path"}: write a consistent
// checkpoint of this replica's store into dir, a new directory on the
// replica's machine, prepared to be restored (region.Admin.Backup).
func (s *Server) postBackup(w http.ResponseWriter, r *http.Request) error {
	var req backupRequest
	if err := s.decodeRequired(w, r, &req, `{"dir":"/var/backups/tally/us-1-20250101"}`); err != nil {
		return err
	}
	if req.Dir == nil || *req.Dir == "" {
		return newError(http.StatusBadRequest, frontdoor.CodeMissingField, `body needs "dir": a new directory on the replica's machine to write the backup into`)
	}
	dir := *req.Dir
	if strings.ContainsRune(dir, 0) {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, `"dir" must not hold a NUL byte`)
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest, `"dir" must be a clean absolute path`)
	}
	if err := s.rep.Err(); err != nil {
		return stoppedError(err)
	}
	real, err := s.backupTarget(dir)
	if err != nil {
		return err
	}
	b, err := s.rep.Admin().Backup(real)
	switch {
	case errors.Is(err, os.ErrExist):
		return newError(http.StatusConflict, frontdoor.CodeExists, "dir exists: a backup goes into a new directory")
	case errors.Is(err, os.ErrNotExist):
		return errNoParent
	case err != nil:
		return err
	}
	s.log.Warn("backup written by admin", "dir", dir, "resolved", b.Dir, "files", b.Files, "bytes", b.Bytes)
	writeJSON(w, http.StatusOK, api.Backup{Replica: s.rep.ID(), Region: s.rep.Region(), Dir: dir, Files: b.Files,
		Bytes: b.Bytes, TakenAt: b.At.UTC().Format(time.RFC3339Nano)})
	return nil
}
