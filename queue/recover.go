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

// removeStaleTemps removes leftover temp files: those no longer locked by
// their writer (a writer holds a flock on its temp until the rename; the
// kernel drops it when the writer dies) and, with otherBoots, all those
// written in another boot (the name carries the boot tag). No clock is
// involved: the wall clock jumps at NTP sync. Put leaves other boots'
// temps to Recover, which first stores again those that hold a whole
// report (a power cut after their fsync): the handler, which cannot
// validate them, may run before the uploader at boot. The caller holds
// the queue lock.
func (q *Queue) removeStaleTemps(boot string, otherBoots bool) (removed []string) {
	des, _ := os.ReadDir(q.dir)
	for _, de := range des {
		rest, ok := strings.CutPrefix(de.Name(), tmpPrefix)
		if !ok {
			continue
		}
		p := filepath.Join(q.dir, de.Name())
		if tag, _, _ := strings.Cut(rest, "-"); tag != boot {
			if otherBoots && os.Remove(p) == nil {
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
	// Promoted are leftover files holding a whole report (they pass
	// Options.Check), stored again as new entries: name of the leftover,
	// name of the entry.
	Promoted    [][2]string
	Quarantined []*CorruptError
	Entries     int // valid entries left
}

// Recover is run by the reader when it starts (the uploader, once per
// boot): it stores again the reports left whole in leftover files,
// removes the other leftover temps and validates every entry, moving the
// corrupt ones to the quarantine.
//
// A leftover file can hold a whole report when a power cut came after its
// temp's fsync: while its writer waited for the lock, or, on FAT, between
// the rename and the directory's fsync. A FAT rename is two directory
// updates; in that window the disk has the temp and the entry pointing at
// the same clusters, and fsck truncates whichever it meets second: the
// entry as often as the temp. Or the entry's long name had not reached
// the disk and only its 8.3 alias is left ("00DD5D~7.ZST"). Such a file
// is stored again through Put, as a new entry (new clusters), before it
// is removed, so at every moment the report is in a whole file. A report
// can come out stored twice (a cut after the new entry and before the
// removal): the receiver drops duplicates by report id.
func (q *Queue) Recover(bootID string) (Recovery, error) {
	var r Recovery
	if q.opt.Check == nil {
		return r, errNoCheck
	}
	boot := bootTag(bootID)
	unlock, err := q.lock()
	if err != nil {
		return r, err
	}
	left, strays := q.leftovers(boot)
	unlock()
	// Corrupt entries first, so that they do not count against the bounds
	// when the leftovers are stored.
	es, err := q.List()
	if err != nil {
		return r, err
	}
	for _, e := range es {
		var ce *CorruptError
		if _, err := q.Read(e.Name); errors.As(err, &ce) {
			r.Quarantined = append(r.Quarantined, ce)
		}
	}
	for _, l := range left {
		res, err := q.put(l.data, boot, l.boot, 0, false)
		if err != nil {
			continue // left for the next start
		}
		r.Promoted = append(r.Promoted, [2]string{l.name, res.Name})
		if !strings.HasPrefix(l.name, tmpPrefix) {
			strays = append(strays, l.name)
		}
	}
	if unlock, err = q.lock(); err != nil {
		return r, err
	}
	r.TempsRemoved = q.removeStaleTemps(boot, true)
	for _, s := range strays {
		os.Remove(filepath.Join(q.dir, s))
	}
	unlock()
	if len(r.TempsRemoved) > 0 || len(strays) > 0 {
		syncDir(q.dir)
	}
	if es, err = q.List(); err != nil {
		return r, err
	}
	r.Entries = len(es)
	return r, nil
}

type leftover struct {
	name, boot string
	data       []byte
}

// leftovers reads the files left by writers that are gone and that hold
// a whole report: stale temps (see removeStaleTemps) and strays (a file
// that is neither an entry, a temp nor the lock: on FAT, an entry whose
// long name was lost). It also returns the empty strays, which hold
// nothing (fsck truncated them). The caller holds the queue lock.
func (q *Queue) leftovers(boot string) (out []leftover, empty []string) {
	des, _ := os.ReadDir(q.dir)
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() || name == lockName {
			continue
		}
		if _, err := ParseEntry(name); err == nil {
			continue
		}
		p := filepath.Join(q.dir, name)
		tag := boot
		rest, temp := strings.CutPrefix(name, tmpPrefix)
		if temp {
			tag, _, _ = strings.Cut(rest, "-")
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		// A temp whose writer lives is locked; so is one another reader
		// is promoting.
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			continue
		}
		st, err := f.Stat()
		var data []byte
		if err == nil && st.Size() > 0 && st.Size() <= maxLeftover {
			data = make([]byte, st.Size())
			if _, err := f.ReadAt(data, 0); err != nil {
				data = nil
			}
		}
		f.Close()
		switch {
		case data != nil && q.opt.Check(data) == nil:
			out = append(out, leftover{name: name, boot: bootTag(tag), data: data})
		case err == nil && st.Size() == 0 && !temp:
			empty = append(empty, name)
		}
	}
	return out, empty
}

// maxLeftover bounds what Recover reads of a leftover file.
const maxLeftover = 16 << 20
