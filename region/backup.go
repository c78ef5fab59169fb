package region

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tally-dev/tally/storage"
)

// metaRestored is written into a backup, with the time it was taken: a
// replica started on it logs that it starts from a backup.
const metaRestored = "restored-from-backup"

// Backup is what Admin.Backup wrote.
type Backup struct {
	Dir   string
	Bytes int64 // the copy's size on disk (hard links count in full)
	Files int
	At    time.Time // when the copy was taken
}

// Backup writes a consistent copy of the replica's store into dir (which
// must not exist; its parent must) while the replica goes on serving, and
// prepares the copy to be restored: a data directory replaced by it is a
// replica's old state, which the replica went on from. So the copy counts
// as fresh (no accepted writes), and a replica started on it holds writes
// until it has synced from every peer, however long that takes, as one
// that lost its disk does: its own entries come back from the peers as
// they last saw them, instead of counting on from the copy's older values,
// which max-merge would swallow (recovery never times out into the old
// state). It also forgets what the replica did after the copy that must
// not happen twice (storage.Batch.ForgetRun: its event log ids, its
// numbering queues and leases).
func (a Admin) Backup(dir string) (Backup, error) {
	r := a.r
	at := time.Now()
	if err := r.store.Checkpoint(dir); err != nil {
		return Backup{}, err
	}
	if err := prepareRestore(dir, at); err != nil {
		_ = os.RemoveAll(dir) // a copy that would restore unsafely is no backup
		return Backup{}, err
	}
	out := Backup{Dir: dir, At: at}
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out.Files++
		out.Bytes += info.Size()
		return nil
	})
	if err != nil {
		return Backup{}, fmt.Errorf("backup %s: %w", dir, err)
	}
	r.log.Info("backup written", "dir", dir, "files", out.Files, "bytes", out.Bytes)
	return out, nil
}

// prepareRestore opens the copy in dir and makes it safe to restore (see
// Backup).
func prepareRestore(dir string, at time.Time) error {
	s, err := storage.Open(storage.Config{Dir: dir, Durability: storage.DurabilitySync})
	if err != nil {
		return fmt.Errorf("prepare backup %s: %w", dir, err)
	}
	b := s.NewBatch()
	b.DeleteMeta(metaAccepted)
	b.DeleteMetaPrefix(metaSeq(""))
	b.ForgetRun()
	b.PutMeta(metaRestored, []byte(at.UTC().Format(time.RFC3339Nano)))
	err = b.Commit()
	b.Close()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("prepare backup %s: %w", dir, err)
	}
	return nil
}

// restoredFrom is when the backup this store was restored from was
// taken, if it was and the replica has not accepted writes since.
func (r *Replica) restoredFrom() (string, bool) {
	v, ok, err := r.store.Meta(metaRestored)
	if err != nil || !ok {
		return "", false
	}
	return string(v), true
}
