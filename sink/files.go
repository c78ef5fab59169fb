package sink

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
)

// Files writes events as JSON lines (each the stream's line, unchanged),
// one file per region and UTC hour of the event's time:
// <dir>/<region>/2026-11-27T08.jsonl. Object storage takes the files as
// they are.
//
// The file is its own deduplication state: before the first write to a
// file, Files reads the identities (replica, log, seq) of the events it
// holds, so an event delivered again, after a crash or a restart, is
// found there and not written twice. An event always goes to the file of its own
// hour, so that file is the only place it can already be. A batch's lines
// are appended and fsynced before Write returns; a line cut short by a
// crash is cut off when the file is next opened (its event was not
// acknowledged and comes again).
type Files struct {
	dir     string
	maxOpen int

	mu      sync.Mutex // guards regions
	regions map[string]*regionFiles
}

// regionFiles are one region's open hour files. Only that region's sink
// loop writes them; mu makes a second Write for the region wait.
type regionFiles struct {
	mu    sync.Mutex
	dir   string
	open  map[string]*hourFile // by hour, "2006-01-02T15"
	clock uint64               // counts file uses, for closing the least recently used
}

// hourFile is an open hour file and the identities of its events.
type hourFile struct {
	f    *os.File
	seen map[string]*spans // by replica and log: the seqs the file holds
	used uint64
}

// hourLayout names an hour file (UTC).
const hourLayout = "2006-01-02T15"

// OpenFiles writes under dir, creating it if needed. maxOpen is at most
// how many hour files of a region stay open with their identities in
// memory (0: 8); a file closed and needed again is read again.
func OpenFiles(dir string, maxOpen int) (*Files, error) {
	if maxOpen <= 0 {
		maxOpen = 8
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	return &Files{dir: dir, maxOpen: maxOpen, regions: map[string]*regionFiles{}}, nil
}

// Write appends the events of region that its files lack; see Writer.
// A file takes any line, so Files refuses no event for its content.
func (fs *Files) Write(_ context.Context, region string, events []Event) (Written, error) {
	added, err := fs.write(region, events)
	return Written{Added: added}, err
}

// write appends events and says how many it added.
func (fs *Files) write(region string, events []Event) (int, error) {
	if !validRegion(region) {
		return 0, fmt.Errorf("files: region %q: want letters, digits, '-' and '_'", region)
	}
	fs.mu.Lock()
	rf := fs.regions[region]
	if rf == nil {
		rf = &regionFiles{dir: filepath.Join(fs.dir, region), open: map[string]*hourFile{}}
		fs.regions[region] = rf
	}
	fs.mu.Unlock()
	rf.mu.Lock()
	defer rf.mu.Unlock()

	byHour := map[string][]*Event{}
	var hours []string
	for i := range events {
		h := events[i].At.UTC().Format(hourLayout)
		if byHour[h] == nil {
			hours = append(hours, h)
		}
		byHour[h] = append(byHour[h], &events[i])
	}
	added := 0
	for _, h := range hours {
		hf, err := rf.file(h, fs.maxOpen)
		if err != nil {
			return added, err
		}
		var buf []byte
		n := 0
		for _, e := range byHour[h] {
			if !hf.add(e.Replica, e.Log, e.Seq) {
				continue
			}
			buf = append(append(buf, e.Line...), '\n')
			n++
		}
		if n == 0 {
			continue
		}
		if _, err := hf.f.Write(buf); err != nil {
			// What was added to seen may not be in the file: read the
			// file again on the next write.
			_ = rf.close(h)
			return added, fmt.Errorf("files: %w", err)
		}
		if err := hf.f.Sync(); err != nil {
			_ = rf.close(h)
			return added, fmt.Errorf("files: %w", err)
		}
		added += n
	}
	return added, nil
}

// Close closes every open file.
func (fs *Files) Close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var errs []error
	for _, rf := range fs.regions {
		rf.mu.Lock()
		for h := range rf.open {
			errs = append(errs, rf.close(h))
		}
		rf.mu.Unlock()
	}
	return errors.Join(errs...)
}

// close closes hour's file and forgets it.
func (rf *regionFiles) close(hour string) error {
	hf := rf.open[hour]
	delete(rf.open, hour)
	if hf == nil {
		return nil
	}
	return hf.f.Close()
}

// file returns hour's open file, opening (and reading) it if needed and
// closing the least recently used one beyond maxOpen.
func (rf *regionFiles) file(hour string, maxOpen int) (*hourFile, error) {
	rf.clock++
	if hf := rf.open[hour]; hf != nil {
		hf.used = rf.clock
		return hf, nil
	}
	for len(rf.open) >= maxOpen {
		var lru string
		for h, hf := range rf.open {
			if lru == "" || hf.used < rf.open[lru].used {
				lru = h
			}
		}
		if err := rf.close(lru); err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
	}
	hf, err := openHour(rf.dir, filepath.Join(rf.dir, hour+".jsonl"))
	if err != nil {
		return nil, err
	}
	hf.used = rf.clock
	rf.open[hour] = hf
	return hf, nil
}

// openHour opens (or creates) an hour file, reads the identities of its
// events, and cuts off a last line without its newline (a write a crash
// cut short).
func openHour(dir, path string) (*hourFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	hf := &hourFile{f: f, seen: map[string]*spans{}}
	if errors.Is(statErr, os.ErrNotExist) {
		// A new file: make its directory entry durable too.
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, err
		}
		return hf, nil
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 1<<16)
	var end int64 // just past the last whole line
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("files: read %s: %w", path, err)
		}
		var id struct {
			Replica string `json:"replica"`
			Log     string `json:"log"`
			Seq     uint64 `json:"seq"`
		}
		if err := json.Unmarshal(line, &id); err != nil || id.Replica == "" || id.Log == "" || id.Seq == 0 {
			f.Close()
			return nil, fmt.Errorf("files: %s line %d is not an event (move the file away to start it again)", path, lineNo)
		}
		hf.add(id.Replica, id.Log, id.Seq)
		end += int64(len(line))
	}
	if st, err := f.Stat(); err != nil || st.Size() != end {
		if err == nil {
			err = f.Truncate(end)
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("files: cut the torn last line of %s: %w", path, err)
		}
	}
	return hf, nil
}

// syncDir makes dir's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("files: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("files: sync %s: %w", dir, err)
	}
	return nil
}

// add records (replica, log, seq) as in the file; false if it already
// was.
func (hf *hourFile) add(replica, log string, seq uint64) bool {
	k := replica + "\x00" + log
	s := hf.seen[k]
	if s == nil {
		s = &spans{}
		hf.seen[k] = s
	}
	return s.add(seq)
}

// spans is a set of seqs as sorted, disjoint, non-adjacent ranges: a
// log's events in one hour are mostly consecutive, so it stays small.
type spans []span

type span struct{ lo, hi uint64 }

// add puts v in the set; false if it was there.
func (s *spans) add(v uint64) bool {
	ss := *s
	i := sort.Search(len(ss), func(i int) bool { return ss[i].hi >= v })
	if i < len(ss) && ss[i].lo <= v {
		return false
	}
	joinLeft := i > 0 && ss[i-1].hi+1 == v
	joinRight := i < len(ss) && ss[i].lo == v+1
	switch {
	case joinLeft && joinRight:
		ss[i-1].hi = ss[i].hi
		ss = slices.Delete(ss, i, i+1)
	case joinLeft:
		ss[i-1].hi = v
	case joinRight:
		ss[i].lo = v
	default:
		ss = slices.Insert(ss, i, span{v, v})
	}
	*s = ss
	return true
}
