// Package queue is the bounded report queue on flash: a directory of
// `.json.zst` files, written by the handler and drained by the uploader.
//
// Entries appear atomically (temp file, fsync, rename, fsync the directory):
// a reader sees a whole entry or none. Names are FAT-safe and ordered by a
// sequence number, never by wall-clock time (boards without an RTC start in
// 1970): "0000000042-1a2b3c4d.json.zst", the number being the highest in the
// queue plus one, the suffix the first 8 hex digits of the boot id. The
// lock (flock on ".lock") is held only to pick the number, evict and rename.
package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Suffix of every entry.
const Suffix = ".json.zst"

const (
	lockName  = ".lock"
	tmpPrefix = ".tmp-"
	// Temp files older than this are leftovers of a handler that died.
	staleTmp = 10 * time.Minute
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
	WhenFull      string // EvictOldest (default) or DropNewest
	AllowVolatile bool   // accept tmpfs/ramfs
}

// ErrFull is returned by Put under DropNewest when the entry does not fit.
var ErrFull = errors.New("queue full")

// Queue is an open queue directory.
type Queue struct {
	dir string
	opt Options
}

// Entry is one queued report.
type Entry struct {
	Name string
	Seq  uint64
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
	return &Queue{dir: dir, opt: opt}, nil
}

// Dir is the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// ParseName returns the sequence number of an entry name.
func ParseName(name string) (uint64, bool) {
	if !strings.HasSuffix(name, Suffix) || strings.HasPrefix(name, ".") {
		return 0, false
	}
	base := strings.TrimSuffix(name, Suffix)
	num, _, _ := strings.Cut(base, "-")
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}

// List returns the entries, oldest (lowest sequence) first.
func (q *Queue) List() ([]Entry, error) {
	des, err := os.ReadDir(q.dir)
	if err != nil {
		return nil, err
	}
	var es []Entry
	for _, de := range des {
		seq, ok := ParseName(de.Name())
		if !ok || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		es = append(es, Entry{Name: de.Name(), Seq: seq, Size: info.Size()})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Seq != es[j].Seq {
			return es[i].Seq < es[j].Seq
		}
		return es[i].Name < es[j].Name
	})
	return es, nil
}

// Read returns an entry's bytes.
func (q *Queue) Read(name string) ([]byte, error) {
	if _, ok := ParseName(name); !ok || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("queue: %q is not an entry name", name)
	}
	return os.ReadFile(filepath.Join(q.dir, name))
}

// Remove deletes an entry (the uploader, once the receiver acknowledged).
func (q *Queue) Remove(name string) error {
	if _, ok := ParseName(name); !ok || strings.ContainsRune(name, '/') {
		return fmt.Errorf("queue: %q is not an entry name", name)
	}
	err := os.Remove(filepath.Join(q.dir, name))
	if err == nil {
		syncDir(q.dir)
	}
	return err
}

// PutResult says what Put did.
type PutResult struct {
	Name    string
	Evicted []string // entries removed to make room
}

// Put stores data as a new entry. The data is written to a temp file and
// fsynced before the lock is taken; any write, fsync or close error unlinks
// the temp file and writes it again once from memory (after a failed fsync
// Linux marks the pages clean, so retrying fsync on the same file would
// "succeed" with the data gone).
func (q *Queue) Put(data []byte, bootID string) (PutResult, error) {
	var res PutResult
	tmp, err := q.writeTemp(data)
	if err != nil {
		tmp, err = q.writeTemp(data)
		if err != nil {
			return res, err
		}
	}
	defer os.Remove(tmp) // no-op after the rename

	unlock, err := q.lock()
	if err != nil {
		return res, err
	}
	defer unlock()

	es, err := q.List()
	if err != nil {
		return res, err
	}
	q.removeStaleTemps()
	var next uint64 = 1
	if len(es) > 0 {
		next = es[len(es)-1].Seq + 1
	}
	// Make room: count, bytes, free space.
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
		return q.opt.MinFreeBytes > 0 && freeBytes(q.dir) < q.opt.MinFreeBytes
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
	name := fmt.Sprintf("%010d-%s%s", next, bootTag(bootID), Suffix)
	if err := os.Rename(tmp, filepath.Join(q.dir, name)); err != nil {
		return res, fmt.Errorf("queue: %w", err)
	}
	if err := syncDir(q.dir); err != nil {
		return res, fmt.Errorf("queue: fsync %s: %w", q.dir, err)
	}
	res.Name = name
	return res, nil
}

func (q *Queue) writeTemp(data []byte) (string, error) {
	f, err := os.CreateTemp(q.dir, tmpPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("queue: %w", err)
	}
	name := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", fmt.Errorf("queue: writing %s: %w", filepath.Base(name), err)
	}
	return name, nil
}

func (q *Queue) removeStaleTemps() {
	des, _ := os.ReadDir(q.dir)
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		if info, err := de.Info(); err == nil && time.Since(info.ModTime()) > staleTmp {
			os.Remove(filepath.Join(q.dir, de.Name()))
		}
	}
}

func (q *Queue) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(q.dir, lockName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("queue: lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
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

func freeBytes(dir string) int64 {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return 1 << 62 // unknown: do not evict on a guess
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}

// bootTag is the first 8 hex digits of the boot id, FAT-safe.
func bootTag(bootID string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(bootID) {
		if (r >= '0' && r <= '9') || (r >= 'a' && r <= 'f') {
			b.WriteRune(r)
			if b.Len() == 8 {
				break
			}
		}
	}
	for b.Len() < 8 {
		b.WriteByte('0')
	}
	return b.String()
}
