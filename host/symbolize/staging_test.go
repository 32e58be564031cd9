package symbolize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/testkit/fixture"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// TestBuildrootStaging is Buildroot's layout: the board runs stripped
// programs from output/target, the unstripped ones sit in the staging
// sysroot (output/staging, what Buildroot points gdb's sysroot at), and
// Buildroot's GCC is not configured with --enable-linker-build-id, so the
// programs have no GNU build ID and the report identifies them by code
// ID. The symbolizer must take the staging binary itself, verified by code
// ID, equal to addr2line; and refuse a staging binary of another build
// (rebuilt after the board's image was made), on every frame.
func TestBuildrootStaging(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes a program: not in -short")
	}
	testutil.Need(t, "gcc", "strip", "addr2line")
	arch := hostArch()
	src := filepath.Join(fixture.Root(), "testdata", "crash", "crash.c")
	root := t.TempDir()
	b := fixture.Binary{Arch: arch, Variant: "O2-dynamic", Prog: "crash", Dir: filepath.Join(root, arch)}
	os.MkdirAll(filepath.Dir(b.Stripped()), 0o755)
	testutil.Run(t, "gcc", "-g", "-O2", "-pthread", "-Wl,--build-id=none", "-o", b.Unstripped(), src)
	testutil.Run(t, "strip", "--remove-section=.comment", "--remove-section=.note", "-o", b.Stripped(), b.Unstripped())
	stale := filepath.Join(root, "stale")
	testutil.Run(t, "gcc", "-g", "-O2", "-fno-inline", "-pthread", "-Wl,--build-id=none", "-o", stale, src)

	r := crashReport(t, b, "nullwrite")
	pm := -1
	for i := range r.Modules {
		if r.Modules[i].Path == b.Stripped() {
			pm = i
			r.Modules[i].Path = "/usr/bin/crash"
			r.Exe = "/usr/bin/crash"
		}
	}
	if pm < 0 {
		t.Fatal("program module missing")
	}
	if k := r.Modules[pm].BuildIDKind; k != "code" {
		t.Fatalf("program identified by %q, want a code id", k)
	}

	t.Run("staging", func(t *testing.T) {
		staging := t.TempDir()
		testutil.CopyFile(t, b.Unstripped(), filepath.Join(staging, "usr/bin/crash"))
		s := New(Options{Sysroot: staging})
		defer s.Close()
		res := s.Symbolize(r)
		m := res.Modules[pm]
		if m.DebugHow != "binary" || m.DebugFile != filepath.Join(staging, "usr/bin/crash") {
			t.Fatalf("debug file %q found by %q (status %q, mismatches %v)", m.DebugFile, m.DebugHow, m.Status, m.Mismatches)
		}
		frames := programFrames(res, pm)
		var addrs []uint64
		for _, f := range frames {
			addrs = append(addrs, uint64(*f.Addr))
		}
		want := addr2line(t, b.Unstripped(), addrs)
		var names []string
		for i, f := range frames {
			if d := sameAsAddr2line(f.Locations, want[i]); d != "" {
				t.Errorf("frame %v:\n%s", f.PC, d)
			}
			names = append(names, f.Locations[len(f.Locations)-1].Function)
		}
		if got := strings.Join(names, " "); !strings.HasPrefix(got, "null_write nw3") {
			t.Errorf("program frames %q", got)
		}
	})

	t.Run("stale-staging", func(t *testing.T) {
		staging := t.TempDir()
		testutil.CopyFile(t, stale, filepath.Join(staging, "usr/bin/crash"))
		s := New(Options{Sysroot: staging})
		defer s.Close()
		res := s.Symbolize(r)
		m := res.Modules[pm]
		if m.DebugFile != "" || !strings.Contains(m.Status, "mismatch") || !strings.Contains(m.Status, "code id") {
			t.Fatalf("stale staging binary: debug file %q, status %q", m.DebugFile, m.Status)
		}
		frames := programFrames(res, pm)
		if len(frames) == 0 {
			t.Fatal("no program frames")
		}
		for _, f := range frames {
			if len(f.Locations) > 0 || !strings.Contains(f.Error, "code id") {
				t.Errorf("frame %v: locations %v, error %q", f.PC, f.Locations, f.Error)
			}
		}
	})
}
