package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// removeStaleTemps removes leftover temp files: those written in another
// boot (the name carries the boot tag), and those no longer locked by
// their writer (a writer holds a flock on its temp until the rename; the
// kernel drops it when the writer dies). No clock is involved: the wall
// clock jumps at NTP sync. The caller holds the queue lock.
func (q *Queue) removeStaleTemps(boot string) (removed []string) {
	des, _ := os.ReadDir(q.dir)
	for _, de := range des {
		rest, ok := strings.CutPrefix(de.Name(), tmpPrefix)
		if !ok {
			continue
		}
		p := filepath.Join(q.dir, de.Name())
		if tag, _, _ := strings.Cut(rest, "-"); tag != boot {
			if os.Remove(p) == nil {
				removed = append(removed, de.Name())
			}
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		// Removed while locked, so a writer that flocks after this sees
		// its name gone (writeTemp checks) and writes again.
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && os.Remove(p) == nil {
			removed = append(removed, de.Name())
		}
		f.Close()
	}
	return removed
}

// Quarantine moves an entry to the quarantine subdirectory, where at most
// MaxQuarantine files are kept (the oldest go first), and returns the
// names it removed from there to keep that bound.
func (q *Queue) Quarantine(name string) (dropped []string, err error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	dir := filepath.Join(q.dir, QuarantineDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("queue: quarantine: %w", err)
	}
	des, _ := os.ReadDir(dir)
	type qf struct {
		name  string
		ctime int64
	}
	var fs []qf
	for _, de := range des {
		if info, err := de.Info(); err == nil && de.Type().IsRegular() {
			var ct int64
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				ct = int64(st.Ctim.Sec)*1e9 + int64(st.Ctim.Nsec) // the rename into the quarantine
			}
			fs = append(fs, qf{de.Name(), ct})
		}
	}
	// Oldest first; sequence numbers restart once the queue is empty, so
	// names alone do not order the quarantine.
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].ctime != fs[j].ctime {
			return fs[i].ctime < fs[j].ctime
		}
		return fs[i].name < fs[j].name
	})
	taken := map[string]bool{}
	for _, f := range fs {
		taken[f.name] = true
	}
	for len(fs) >= MaxQuarantine {
		if os.Remove(filepath.Join(dir, fs[0].name)) == nil {
			dropped = append(dropped, fs[0].name)
			delete(taken, fs[0].name)
		}
		fs = fs[1:]
	}
	dst := name
	for i := 1; taken[dst]; i++ {
		dst = fmt.Sprintf("%s.%d", name, i)
	}
	if err := os.Rename(filepath.Join(q.dir, name), filepath.Join(dir, dst)); err != nil {
		return dropped, fmt.Errorf("queue: quarantine: %w", err)
	}
	syncDir(dir)
	syncDir(q.dir)
	return dropped, nil
}

// Recovery says what Recover did.
type Recovery struct {
	TempsRemoved []string
	Quarantined  []*CorruptError
	Entries      int // valid entries left
}

// Recover is run by the reader when it starts (the uploader, once per
// boot): it removes leftover temp files and validates every entry, moving
// the corrupt ones to the quarantine. After a power cut an atomic queue
// has nothing to recover; this is for flash that lies.
func (q *Queue) Recover(bootID string) (Recovery, error) {
	var r Recovery
	if q.opt.Check == nil {
		return r, errNoCheck
	}
	unlock, err := q.lock()
	if err != nil {
		return r, err
	}
	r.TempsRemoved = q.removeStaleTemps(bootTag(bootID))
	unlock()
	if len(r.TempsRemoved) > 0 {
		syncDir(q.dir)
	}
	es, err := q.List()
	if err != nil {
		return r, err
	}
	for _, e := range es {
		_, err := q.Read(e.Name)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			r.Quarantined = append(r.Quarantined, ce)
		case err == nil:
			r.Entries++
		}
	}
	return r, nil
}
