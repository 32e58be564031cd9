package queue

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

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
	des, _ := os.ReadDir(q.Dir())
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			t.Errorf("temp file left behind: %s", de.Name())
		}
	}
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
