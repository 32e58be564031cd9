// Package queue is the bounded report queue on flash: a directory of
// `.json.zst` files, written by the handler and drained by the uploader.
//
// Entries appear atomically (temp file, fsync, rename, fsync the directory):
// a reader sees a whole entry or none, and Read validates what it returns
// (Options.Check: the zstd content checksum), moving anything else to a
// bounded quarantine. Names are FAT-safe and ordered by a sequence number, never by
// wall-clock time (boards without an RTC start in 1970): see Name. The
// lock (flock on ".lock") is held only to pick the number, evict and rename
// (and, shared, while a temp file is created, written and fsynced).
package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/internal/flock"
	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

// QuarantineDir is the subdirectory for entries that failed validation
// (and, from the uploader, reports the receiver refused).
const QuarantineDir = "quarantine"

// MaxQuarantine bounds the quarantine: beyond it the oldest go.
const MaxQuarantine = 16

const (
	lockName  = ".lock"
	tmpPrefix = ".tmp-" // + boot tag + "-" + random
)

// Policy when the queue is full.
const (
	EvictOldest = "evict-oldest"
	DropNewest  = "drop-newest"
)

// Options bound the queue.
type Options struct {
	MaxEntries    int
	MaxBytes      int64
	MinFreeBytes  int64
	MinFreeInodes int64         // ignored where statfs reports no inode counts (FAT, UBIFS, JFFS2)
	MaxAge        time.Duration // only for entries with a trusted time, and only once the clock is trusted
	WhenFull      string        // EvictOldest (default) or DropNewest
	AllowVolatile bool          // accept tmpfs/ramfs
	// Check validates an entry's bytes for Read and Recover: readers set
	// it to decode.Entry (package report/decode). The handler only writes
	// and leaves it nil, so it links no zstd decoder; Read and Recover
	// refuse to run without it.
	Check func(data []byte) error
}

// FromConfig is the queue's options as the config sets them; readers add
// Check.
func FromConfig(c config.Queue) Options {
	return Options{
		MaxEntries:    c.MaxEntries,
		MaxBytes:      int64(c.MaxBytesKiB) << 10,
		MinFreeBytes:  int64(c.MinFreeKiB) << 10,
		MinFreeInodes: int64(c.MinFreeInodes),
		MaxAge:        c.MaxAge.D(),
		WhenFull:      c.WhenFull,
		AllowVolatile: c.AllowVolatile,
	}
}

// errNoCheck is Read's and Recover's answer on a queue opened without
// Options.Check.
var errNoCheck = errors.New("queue: opened without Options.Check, cannot read")

// ErrFull is returned by Put under DropNewest when the entry does not fit.
var ErrFull = errors.New("queue full")

// Queue is an open queue directory.
type Queue struct {
	// Landed, when set, is called right after a new entry's rename: from
	// then on the entry is in the queue, whatever happens to the caller
	// in the fsyncs that follow (the handler marks its crash as stored
	// with it, so that a handler killed there is not counted lost).
	Landed func(name string)

	dir string
	opt Options
	// now is the wall clock (a test sets it).
	now func() time.Time
}

// Entry is one queued report.
type Entry struct {
	Name string
	Seq  uint64
	Time int64 // trusted crash time, unix seconds; 0 when not trusted
	Size int64
}

// Filesystem magic numbers (include/uapi/linux/magic.h).
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// Open checks that dir exists, is a directory, is writable and sits on
// persistent storage. It never creates dir: packages do, on a persistent
// mount; creating it from the handler would write under a mountpoint that
// is not mounted yet at early boot.
func Open(dir string, opt Options) (*Queue, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("queue %s: %w (the package creates it; the handler does not)", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("queue %s: not a directory", dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return nil, fmt.Errorf("queue %s: statfs: %w", dir, err)
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return nil, fmt.Errorf("queue %s: read-only filesystem", dir)
	}
	if !opt.AllowVolatile && (uint64(fs.Type) == tmpfsMagic || uint64(fs.Type) == ramfsMagic) {
		return nil, fmt.Errorf("queue %s: on tmpfs/ramfs, reports would not survive a reboot (set queue.allow_volatile to accept)", dir)
	}
	if opt.WhenFull == "" {
		opt.WhenFull = EvictOldest
	}
	return &Queue{dir: dir, opt: opt, now: time.Now}, nil
}

// Dir is the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// List returns the entries, oldest (lowest sequence) first.
func (q *Queue) List() ([]Entry, error) {
	des, err := os.ReadDir(q.dir)
	if err != nil {
		return nil, err
	}
	var es []Entry
	for _, de := range des {
		n, err := ParseEntry(de.Name())
		if err != nil || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		es = append(es, Entry{Name: de.Name(), Seq: n.Seq, Time: n.Time, Size: info.Size()})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Seq != es[j].Seq {
			return es[i].Seq < es[j].Seq
		}
		return es[i].Name < es[j].Name
	})
	return es, nil
}

func checkName(name string) error {
	if strings.ContainsRune(name, '/') {
		return fmt.Errorf("queue: %q is not an entry name", name)
	}
	_, err := ParseEntry(name)
	return err
}

// Read returns an entry's bytes once they pass Options.Check. An entry that
// fails is moved to the quarantine and the error is a *CorruptError
// (errors.Is(err, ErrCorrupt)); the caller logs it and goes on with the
// next entry. A missing entry is os.ErrNotExist.
func (q *Queue) Read(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if q.opt.Check == nil {
		return nil, errNoCheck
	}
	data, err := os.ReadFile(filepath.Join(q.dir, name))
	if err != nil {
		return nil, err
	}
	if verr := q.opt.Check(data); verr != nil {
		ce := &CorruptError{Name: name, Err: verr}
		if _, qerr := q.Quarantine(name); qerr == nil {
			ce.Quarantined = true
		}
		return nil, ce
	}
	return data, nil
}

// Remove deletes an entry (the uploader, once the receiver acknowledged).
func (q *Queue) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	// Under the lock: on FAT an unlink frees the file's clusters in the
	// allocation table, and a writer's fsync would write that to the disk
	// before the directory says the file is gone (see writeTemp).
	unlock, err := q.lock()
	if err != nil {
		return err
	}
	defer unlock()
	err = os.Remove(filepath.Join(q.dir, name))
	if err == nil {
		syncDir(q.dir)
	}
	return err
}

// PutResult says what Put did.
type PutResult struct {
	Name    string
	Evicted []string // entries removed to make room
	Expired []string // entries removed for being older than MaxAge
}

// Put stores data as a new entry whose crash time is not trusted.
func (q *Queue) Put(data []byte, bootID string) (PutResult, error) {
	return q.PutAt(data, bootID, 0)
}

// PutAt stores data as a new entry. crashTime is the crash's wall-clock
// time in unix seconds when the clock was trusted (report.TrustedTime),
// else 0: it goes into the name, and only such entries ever age out.
//
// The data is written to a temp file and fsynced before the lock is
// taken; any write, fsync or close error unlinks the temp file and writes
// it again once from memory (after a failed fsync Linux marks the pages
// clean, so retrying fsync on the same file would "succeed" with the data
// gone). On any error nothing of this entry is left in the directory.
func (q *Queue) PutAt(data []byte, bootID string, crashTime int64) (PutResult, error) {
	boot := bootTag(bootID)
	return q.put(data, boot, boot, crashTime, true)
}

// put is PutAt with boot tags: boot, this boot's, for the temp (so that
// no one takes it for a leftover), entryBoot for the name (Recover keeps
// the tag of the boot a leftover was written in). reap removes this
// boot's leftover temps under the lock (Recover, which promotes them, does
// that itself afterwards).
func (q *Queue) put(data []byte, boot, entryBoot string, crashTime int64, reap bool) (PutResult, error) {
	var res PutResult
	tmp, err := q.writeTemp(data, boot)
	if err != nil {
		tmp, err = q.writeTemp(data, boot)
		if err != nil {
			return res, err
		}
	}
	defer tmp.Close()           // the temp's lock, held until after the rename
	defer os.Remove(tmp.Name()) // no-op after the rename

	unlock, err := q.lock()
	if err != nil {
		return res, err
	}
	defer unlock()

	es, err := q.List()
	if err != nil {
		return res, err
	}
	if reap {
		q.removeStaleTemps(boot, false)
	}
	var next uint64 = 1
	if len(es) > 0 {
		next = es[len(es)-1].Seq + 1
	}
	if q.opt.MaxAge > 0 {
		es, res.Expired = q.expire(es)
	}
	// Make room: count, bytes, free space and inodes (measured with the
	// temp file already written, so it counts itself).
	size := int64(len(data))
	var total int64
	for _, e := range es {
		total += e.Size
	}
	full := func() bool {
		if q.opt.MaxEntries > 0 && len(es)+1 > q.opt.MaxEntries {
			return true
		}
		if q.opt.MaxBytes > 0 && total+size > q.opt.MaxBytes {
			return true
		}
		if q.opt.MinFreeBytes <= 0 && q.opt.MinFreeInodes <= 0 {
			return false
		}
		bytes, inodes := free(q.dir)
		return bytes < q.opt.MinFreeBytes || (inodes >= 0 && inodes < q.opt.MinFreeInodes)
	}
	for full() {
		if q.opt.WhenFull == DropNewest || len(es) == 0 {
			return res, ErrFull
		}
		if err := os.Remove(filepath.Join(q.dir, es[0].Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("queue: evicting %s: %w", es[0].Name, err)
		}
		res.Evicted = append(res.Evicted, es[0].Name)
		total -= es[0].Size
		es = es[1:]
	}
	if len(res.Evicted) > 0 || len(res.Expired) > 0 {
		// The removals reach the disk before the new entry does: a power
		// cut between the two must not leave the queue over its bound
		// (on FAT the entry would otherwise land first, from the file's
		// fsync below).
		if err := syncDir(q.dir); err != nil {
			return res, fmt.Errorf("queue: fsync %s: %w", q.dir, err)
		}
	}
	var when int64
	if report.TrustedTime(crashTime) {
		when = crashTime
	}
	name := Name{Seq: next, Boot: entryBoot, Time: when}.String()
	if err := os.Rename(tmp.Name(), filepath.Join(q.dir, name)); err != nil {
		return res, fmt.Errorf("queue: %w", err)
	}
	if q.Landed != nil {
		q.Landed(name)
	}
	// On FAT the size and first cluster live in the directory entry, and
	// a rename makes a new entry with neither: they reach it when the
	// inode is written, which fsync of the directory does not do (without
	// -o dirsync, fs/fat/namei_vfat.c). A power cut then leaves an empty
	// file. fsync the file under its new name first; elsewhere this costs
	// nothing (ext4 commits the rename either way).
	if err := tmp.Sync(); err != nil {
		return res, fmt.Errorf("queue: fsync %s: %w", name, err)
	}
	if err := syncDir(q.dir); err != nil {
		return res, fmt.Errorf("queue: fsync %s: %w", q.dir, err)
	}
	res.Name = name
	return res, nil
}

// expire removes entries older than MaxAge. Only trusted times age: an
// entry written before the clock was set has none, and while the clock
// itself is not trusted (before NTP sync on a board without an RTC)
// nothing ages at all.
func (q *Queue) expire(es []Entry) (kept []Entry, expired []string) {
	now := q.now().Unix()
	if !report.TrustedTime(now) {
		return es, nil
	}
	limit := int64(q.opt.MaxAge / time.Second)
	for _, e := range es {
		if e.Time > 0 && e.Time <= now && now-e.Time > limit {
			if err := os.Remove(filepath.Join(q.dir, e.Name)); err == nil || errors.Is(err, os.ErrNotExist) {
				expired = append(expired, e.Name)
				continue
			}
		}
		kept = append(kept, e)
	}
	return kept, expired
}

// writeTemp writes data into a new temp file and fsyncs it. The file is
// returned open, holding a flock that tells removeStaleTemps its writer is
// alive. It all happens under the queue lock taken shared: a reaper
// (which holds it exclusive) never sees the temp unlocked, and the fsync,
// which on FAT writes the whole allocation table, never comes between an
// unlink and the directory fsync that follows it (see Put and Remove).
func (q *Queue) writeTemp(data []byte, boot string) (*os.File, error) {
	unlock, err := q.lockHow(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	f, err := os.CreateTemp(q.dir, tmpPrefix+boot+"-*")
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	name := f.Name()
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		os.Remove(name)
		return nil, fmt.Errorf("queue: writing %s: %w", filepath.Base(name), err)
	}
	return f, nil
}

func (q *Queue) lock() (func(), error) { return q.lockHow(unix.LOCK_EX) }

func (q *Queue) lockHow(how int) (func(), error) {
	f, err := flock.Open(filepath.Join(q.dir, lockName), how)
	if err != nil {
		return nil, fmt.Errorf("queue: lock: %w", err)
	}
	return func() { f.Close() }, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// free returns the bytes available to unprivileged writers and the free
// inodes, -1 where the filesystem has no inode count (FAT, UBIFS and
// JFFS2 report 0 files). statfs is an estimate on UBIFS and JFFS2.
func free(dir string) (bytes, inodes int64) {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return 1 << 62, -1 // unknown: do not evict on a guess
	}
	inodes = -1
	if fs.Files > 0 {
		inodes = int64(fs.Ffree)
	}
	return int64(fs.Bavail) * int64(fs.Bsize), inodes
}
