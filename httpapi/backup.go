package httpapi

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/tally-dev/tally/api"
)

type backupRequest struct {
	Dir *string `json:"dir"`
}

// POST /v1/admin/backup {"dir": "/abs/path"}: write a consistent
// checkpoint of this replica's store into dir, a new directory on the
// replica's machine, prepared to be restored (region.Replica.Backup).
func (s *Server) postBackup(w http.ResponseWriter, r *http.Request) error {
	var req backupRequest
	if err := s.decodeRequired(w, r, &req, `{"dir":"/var/backups/tally/us-1-20250101"}`); err != nil {
		return err
	}
	if req.Dir == nil || *req.Dir == "" {
		return newError(http.StatusBadRequest, CodeMissingField, `body needs "dir": a new directory on the replica's machine to write the backup into`)
	}
	dir := *req.Dir
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return newError(http.StatusBadRequest, CodeBadRequest, `"dir" must be a clean absolute path`)
	}
	if err := s.rep.Err(); err != nil {
		return stoppedError(err)
	}
	b, err := s.rep.Backup(dir)
	switch {
	case errors.Is(err, os.ErrExist):
		return newError(http.StatusConflict, CodeExists, "dir exists: a backup goes into a new directory")
	case errors.Is(err, os.ErrNotExist):
		return newError(http.StatusBadRequest, CodeBadRequest, "the parent directory of dir does not exist on the replica's machine")
	case err != nil:
		return err
	}
	s.log.Warn("backup written by admin", "dir", b.Dir, "files", b.Files, "bytes", b.Bytes)
	writeJSON(w, http.StatusOK, api.Backup{Replica: s.rep.ID(), Region: s.rep.Region(), Dir: b.Dir, Files: b.Files,
		Bytes: b.Bytes, TakenAt: b.At.UTC().Format(time.RFC3339Nano)})
	return nil
}
