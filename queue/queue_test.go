package queue

// The queue on a real directory: Put's names and bounds, Read's checks
// and the quarantine, and Recover after a cut or a crash.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"golang.org/x/sys/unix"
)

func TestNamesCarryTrustedTimeOnly(t *testing.T) {
	q := open(t, Options{})
	r1, _ := q.PutAt(entry(t, "a"), "0123abcd", 1800000000)
	r2, _ := q.PutAt(entry(t, "b"), "0123abcd", 1000) // a board in 1970
	if r1.Name != "0000000001-0123abcd-1800000000.json.zst" {
		t.Errorf("trusted: %s", r1.Name)
	}
	if r2.Name != "0000000002-0123abcd.json.zst" {
		t.Errorf("untrusted: %s", r2.Name)
	}
	es, _ := q.List()
	if len(es) != 2 || es[0].Time != 1800000000 || es[1].Time != 0 {
		t.Errorf("%+v", es)
	}
}

func TestMaxAgeOnlyForTrustedTimes(t *testing.T) {
	day := int64(86400)
	q := open(t, Options{MaxAge: 24 * time.Hour})
	clock := int64(1000) // the board booted without an RTC: 1970
	q.now = func() time.Time { return time.Unix(clock, 0) }
	old := int64(1800000000)
	q.PutAt(entry(t, "old, trusted"), "b", old)
	q.PutAt(entry(t, "untrusted"), "b", 500)
	// The clock is not trusted yet: nothing ages, however old it looks.
	r, _ := q.PutAt(entry(t, "x"), "b", 0)
	if len(r.Expired) != 0 {
		t.Fatalf("expired %v under an untrusted clock", r.Expired)
	}
	// NTP sets the clock two days later: the trusted old entry goes, the
	// untrusted ones stay for ever.
	clock = old + 2*day
	r, _ = q.PutAt(entry(t, "new"), "b", clock)
	if len(r.Expired) != 1 || !strings.Contains(r.Expired[0], fmt.Sprint(old)) {
		t.Fatalf("expired %v", r.Expired)
	}
	es, _ := q.List()
	if len(es) != 3 {
		t.Fatalf("%+v", es)
	}
	// A time in the future (the clock stepped back) is not aged either.
	clock = old - day
	if r, _ = q.PutAt(entry(t, "y"), "b", 0); len(r.Expired) != 0 {
		t.Errorf("expired %v with the clock stepped back", r.Expired)
	}
}

func TestReadQuarantinesCorruptEntries(t *testing.T) {
	q := open(t, Options{})
	good := entry(t, "good")
	cases := map[string][]byte{
		"zeros":       make([]byte, len(good)),
		"truncated":   good[:len(good)-3],
		"bit flip":    flip(good, len(good)/2),
		"no checksum": noChecksum(t),
		"plain json":  []byte(`{"version":1}`),
		"empty":       nil,
	}
	for what, data := range cases {
		r, err := q.Put(data, "b")
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Read(r.Name)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !ce.Quarantined {
			t.Errorf("%s: Read = %v, want a quarantined *CorruptError", what, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(q.Dir(), QuarantineDir, r.Name)); err != nil {
			t.Errorf("%s: not in the quarantine: %v", what, err)
		}
	}
	r, _ := q.Put(good, "b")
	if b, err := q.Read(r.Name); err != nil || !bytes.Equal(b, good) {
		t.Errorf("good entry: %v", err)
	}
	if es, _ := q.List(); len(es) != 1 {
		t.Errorf("%d entries left, want the good one", len(es))
	}
}

func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x10
	return c
}

// noChecksum is a valid zstd frame without the content checksum.
func noChecksum(t *testing.T) []byte {
	z := entry(t, "x")
	c := append([]byte(nil), z[:len(z)-4]...)
	c[4] &^= 0x04
	if decode.Entry(c) == nil {
		t.Fatal("a frame without checksum passed")
	}
	return c
}

func TestQuarantineIsBounded(t *testing.T) {
	q := open(t, Options{})
	for i := 0; i < MaxQuarantine+5; i++ {
		r, _ := q.Put([]byte("junk"), "b")
		if _, err := q.Read(r.Name); !errors.Is(err, ErrCorrupt) {
			t.Fatal(err)
		}
	}
	des, _ := os.ReadDir(filepath.Join(q.Dir(), QuarantineDir))
	if len(des) != MaxQuarantine {
		t.Fatalf("%d in the quarantine, want %d", len(des), MaxQuarantine)
	}
}

func TestRecoverRemovesLeftoversAndQuarantines(t *testing.T) {
	q := open(t, Options{})
	const boot = "feedf00d-0000"
	good, _ := q.Put(entry(t, "g"), boot)
	bad, _ := q.Put([]byte("torn"), boot)
	dir := q.Dir()
	// A temp of a handler that died in an earlier boot, one of a handler
	// that died in this boot, and one being written right now (its
	// writer holds its flock).
	write := func(name string, age time.Duration) {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte("partial"), 0o600)
		mt := time.Now().Add(-age)
		os.Chtimes(p, mt, mt)
	}
	write(".tmp-12345678-1", 0)
	write(".tmp-feedf00d-2", time.Hour)
	write(".tmp-feedf00d-3", 0)
	lockAsWriter(t, filepath.Join(dir, ".tmp-feedf00d-3"))
	r, err := q.Recover(boot)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.TempsRemoved, " ") != ".tmp-12345678-1 .tmp-feedf00d-2" {
		t.Errorf("removed %v", r.TempsRemoved)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-feedf00d-3")); err != nil {
		t.Error("a temp being written was removed")
	}
	if len(r.Quarantined) != 1 || r.Quarantined[0].Name != bad.Name || r.Entries != 1 {
		t.Errorf("%+v", r)
	}
	if _, err := q.Read(good.Name); err != nil {
		t.Error(err)
	}
}

func TestFreeInodesBound(t *testing.T) {
	q := open(t, Options{MinFreeInodes: 1 << 62})
	_, inodes := free(q.Dir())
	if inodes < 0 {
		// No inode count here: the bound must not apply.
		if _, err := q.Put(entry(t, "x"), "b"); err != nil {
			t.Fatal(err)
		}
		t.Skip("no inode count on this filesystem")
	}
	q.opt.WhenFull = DropNewest
	if _, err := q.Put(entry(t, "x"), "b"); !errors.Is(err, ErrFull) {
		t.Fatalf("err = %v, want ErrFull below min_free_inodes", err)
	}
	assertNoTemps(t, q.Dir())
}

// lockAsWriter holds path's flock until the test ends, as a live writer
// holds its temp's.
func lockAsWriter(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			t.Errorf("temp file left behind: %s", de.Name())
		}
	}
}

// TestRecoverPromotesWholeLeftovers: a leftover temp or stray file that
// holds a whole report (a cut after its fsync: on FAT, fsck may have kept
// it and truncated the entry it was being renamed to) is stored again as
// a new entry, then removed; torn ones are only removed, a live writer's
// temp is left alone, an empty stray (what fsck left of an entry) goes.
func TestRecoverPromotesWholeLeftovers(t *testing.T) {
	q := open(t, Options{MaxEntries: 3})
	const boot = "feedf00d-0000"
	dir := q.Dir()
	q.Put(entry(t, "old"), boot)
	truncated, _ := q.Put(nil, boot) // what fsck leaves of an entry that lost
	os.WriteFile(filepath.Join(dir, ".tmp-12345678-1"), entry(t, "whole, earlier boot"), 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-12345678-2"), entry(t, "torn")[:9], 0o600)
	os.WriteFile(filepath.Join(dir, "00DD5D~7.ZST"), entry(t, "whole, lost its long name"), 0o600)
	os.WriteFile(filepath.Join(dir, "00DE6D~7.ZST"), nil, 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-feedf00d-3"), entry(t, "being written"), 0o600)
	lockAsWriter(t, filepath.Join(dir, ".tmp-feedf00d-3"))
	// A handler stores a crash before the uploader starts: it leaves the
	// earlier boot's temps to Recover, which can tell a whole report.
	q.Put(entry(t, "crash at boot"), boot)
	if _, err := os.Stat(filepath.Join(dir, ".tmp-12345678-1")); err != nil {
		t.Fatal("Put removed an earlier boot's temp")
	}
	r, err := q.Recover(boot)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Promoted) != "[[.tmp-12345678-1 0000000004-12345678.json.zst] [00DD5D~7.ZST 0000000005-feedf00d.json.zst]]" {
		t.Errorf("promoted %v", r.Promoted)
	}
	if strings.Join(r.TempsRemoved, " ") != ".tmp-12345678-1 .tmp-12345678-2" {
		t.Errorf("removed %v", r.TempsRemoved)
	}
	if len(r.Quarantined) != 1 || r.Quarantined[0].Name != truncated.Name {
		t.Errorf("quarantined %+v", r.Quarantined)
	}
	var names []string
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		names = append(names, de.Name())
	}
	// The corrupt entry went to the quarantine first; the promotions then
	// evicted the oldest entry to stay within max_entries = 3.
	if want := ".lock .tmp-feedf00d-3 0000000003-feedf00d.json.zst 0000000004-12345678.json.zst 0000000005-feedf00d.json.zst quarantine"; strings.Join(names, " ") != want {
		t.Errorf("queue holds %q, want %q", names, want)
	}
	for name, want := range map[string]string{"0000000004-12345678.json.zst": "whole, earlier boot", "0000000005-feedf00d.json.zst": "whole, lost its long name"} {
		b, err := q.Read(name)
		if err == nil {
			b, err = decode.JSON(b)
		}
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if r.Entries != 3 {
		t.Errorf("%d entries, want 3", r.Entries)
	}
}

func open(t *testing.T, opt Options) *Queue {
	t.Helper()
	opt.AllowVolatile = true // t.TempDir may sit on tmpfs
	opt.Check = decode.Entry
	q, err := Open(t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// entry is a valid entry's bytes: a checksummed zstd frame of JSON.
func entry(t testing.TB, s string) []byte {
	t.Helper()
	return report.Compress([]byte(fmt.Sprintf("%q", s)))
}

func TestPutOrdersBySequenceAndIsReadable(t *testing.T) {
	q := open(t, Options{MaxEntries: 10})
	for i := 0; i < 3; i++ {
		r, err := q.Put(entry(t, fmt.Sprint("report", i)), "6f1b2c3d-0000-4000-8000-000000000000")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%010d-6f1b2c3d.json.zst", i+1)
		if r.Name != want {
			t.Errorf("name %q, want %q", r.Name, want)
		}
	}
	es, _ := q.List()
	if len(es) != 3 {
		t.Fatalf("%d entries", len(es))
	}
	for i, e := range es {
		b, err := q.Read(e.Name)
		if err != nil || !bytes.Equal(b, entry(t, fmt.Sprint("report", i))) {
			t.Errorf("entry %d: %q, %v", i, b, err)
		}
	}
	if err := q.Remove(es[0].Name); err != nil {
		t.Fatal(err)
	}
	r, _ := q.Put([]byte("x"), "")
	if !strings.HasPrefix(r.Name, "0000000004-00000000") {
		t.Errorf("sequence restarted or boot tag wrong: %q", r.Name)
	}
}

func TestFullQueueEvictsOldest(t *testing.T) {
	q := open(t, Options{MaxEntries: 3})
	for i := 0; i < 5; i++ {
		r, err := q.Put([]byte{byte(i)}, "ab")
		if err != nil {
			t.Fatal(err)
		}
		if i >= 3 && len(r.Evicted) != 1 {
			t.Errorf("put %d evicted %v", i, r.Evicted)
		}
	}
	es, _ := q.List()
	if len(es) != 3 || es[0].Seq != 3 || es[2].Seq != 5 {
		t.Errorf("entries %+v, want seq 3..5", es)
	}
}

func TestFullQueueByBytes(t *testing.T) {
	q := open(t, Options{MaxEntries: 100, MaxBytes: 250})
	for i := 0; i < 5; i++ {
		if _, err := q.Put(bytes.Repeat([]byte{'x'}, 100), ""); err != nil {
			t.Fatal(err)
		}
	}
	es, _ := q.List()
	if len(es) != 2 {
		t.Errorf("%d entries of 100 bytes under a 250-byte bound", len(es))
	}
}

func TestDropNewestRefuses(t *testing.T) {
	q := open(t, Options{MaxEntries: 2, WhenFull: DropNewest})
	q.Put([]byte("a"), "")
	q.Put([]byte("b"), "")
	if _, err := q.Put([]byte("c"), ""); !errors.Is(err, ErrFull) {
		t.Fatalf("err = %v, want ErrFull", err)
	}
	es, _ := q.List()
	if len(es) != 2 {
		t.Errorf("%d entries", len(es))
	}
	assertNoTemps(t, q.Dir())
}

func TestConcurrentPutsGetDistinctNames(t *testing.T) {
	q := open(t, Options{MaxEntries: 1000})
	var wg sync.WaitGroup
	names := make(chan string, 64)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 4; j++ {
				// A second Queue value, as a second handler process would have.
				q2, _ := Open(q.Dir(), q.opt)
				r, err := q2.Put([]byte("r"), "")
				if err != nil {
					t.Error(err)
					return
				}
				names <- r.Name
			}
		}()
	}
	wg.Wait()
	close(names)
	seen := map[string]bool{}
	for n := range names {
		if seen[n] {
			t.Errorf("name %s given twice", n)
		}
		seen[n] = true
	}
	if es, _ := q.List(); len(es) != 64 {
		t.Errorf("%d entries, want 64", len(es))
	}
}

func TestOpenRefusesWhatWouldLoseReports(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "absent"), Options{}); err == nil {
		t.Error("missing directory accepted (the handler must not create it)")
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := Open(f, Options{}); err == nil {
		t.Error("a file accepted as queue directory")
	}
	if _, err := Open("/dev/shm", Options{}); err == nil || !strings.Contains(err.Error(), "tmpfs") {
		t.Logf("/dev/shm: %v (skipped when it is not tmpfs)", err)
	} else if _, err := Open("/dev/shm", Options{AllowVolatile: true}); err != nil {
		t.Errorf("allow_volatile: %v", err)
	}
}

func TestNamesRefuseTraversal(t *testing.T) {
	q := open(t, Options{})
	for _, n := range []string{"../x.json.zst", ".lock", "a/1.json.zst", "x.json"} {
		if _, err := q.Read(n); err == nil {
			t.Errorf("Read(%q) accepted", n)
		}
		if err := q.Remove(n); err == nil {
			t.Errorf("Remove(%q) accepted", n)
		}
	}
}
