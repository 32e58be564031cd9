package module

import (
	"bytes"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// parseMaps parses /proc/<pid>/maps lines.
func parseMaps(t *testing.T, text string) []Mapping {
	t.Helper()
	var maps []Mapping
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			t.Fatalf("bad maps line %q", line)
		}
		r := strings.SplitN(f[0], "-", 2)
		start, err1 := strconv.ParseUint(r[0], 16, 64)
		end, err2 := strconv.ParseUint(r[1], 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("bad maps line %q", line)
		}
		path := ""
		if len(f) > 5 {
			// The path is everything after the inode, spaces included.
			i := strings.Index(line, f[5])
			path = line[i:]
		}
		maps = append(maps, Mapping{Start: start, End: end, Offset: off, Path: path, Perms: f[1]})
	}
	return maps
}

const realMaps = `
55d0a4a00000-55d0a4a02000 r--p 00000000 fd:01 1311 /usr/bin/app
55d0a4a02000-55d0a4a08000 r-xp 00002000 fd:01 1311 /usr/bin/app
55d0a4a08000-55d0a4a0a000 r--p 00008000 fd:01 1311 /usr/bin/app
55d0a4a0b000-55d0a4a0c000 r--p 0000a000 fd:01 1311 /usr/bin/app
55d0a4a0c000-55d0a4a0d000 rw-p 0000b000 fd:01 1311 /usr/bin/app
55d0a5c3e000-55d0a5c5f000 rw-p 00000000 00:00 0 [heap]
7f1a2c000000-7f1a2c021000 rw-p 00000000 00:00 0
7f1a30000000-7f1a30010000 r--p 00000000 fd:01 2222 /opt/lld/liblld.so
7f1a30010000-7f1a30040000 r-xp 00010000 fd:01 2222 /opt/lld/liblld.so
7f1a30040000-7f1a30042000 rw-p 00040000 fd:01 2222 /opt/lld/liblld.so
7f1a31000000-7f1a31028000 r--p 00000000 fd:01 3333 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a31028000-7f1a311bd000 r-xp 00028000 fd:01 3333 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a311bd000-7f1a31215000 r--p 001bd000 fd:01 3333 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a31215000-7f1a31219000 r--p 00214000 fd:01 3333 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a31219000-7f1a3121b000 rw-p 00218000 fd:01 3333 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a3121b000-7f1a31228000 rw-p 00000000 00:00 0
7f1a31300000-7f1a31301000 r--p 00000000 fd:01 4444 /tmp/plugin dir/libplug.so (deleted)
7f1a31301000-7f1a31302000 r-xp 00001000 fd:01 4444 /tmp/plugin dir/libplug.so (deleted)
7f1a31400000-7f1a31401000 ---p 00000000 00:00 0
7ffc8e5a1000-7ffc8e5c2000 rw-p 00000000 00:00 0 [stack]
7ffc8e5f6000-7ffc8e5fa000 r--p 00000000 00:00 0 [vvar]
7ffc8e5fa000-7ffc8e5fc000 r-xp 00000000 00:00 0 [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]
`

func TestGroup(t *testing.T) {
	maps := parseMaps(t, realMaps)
	// Out of order input groups the same.
	rev := append([]Mapping(nil), maps...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for name, in := range map[string][]Mapping{"in order": maps, "reversed": rev} {
		t.Run(name, func(t *testing.T) {
			mods := Group(in)
			type want struct {
				path       string
				start, end uint64
				n          int
				rto        uint64
			}
			wants := []want{
				{"/usr/bin/app", 0x55d0a4a00000, 0x55d0a4a0d000, 5, 0x55d0a4a00000},
				{"/opt/lld/liblld.so", 0x7f1a30000000, 0x7f1a30042000, 3, 0x7f1a30000000},
				{"/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f1a31000000, 0x7f1a3121b000, 5, 0x7f1a31000000},
				{"/tmp/plugin dir/libplug.so (deleted)", 0x7f1a31300000, 0x7f1a31302000, 2, 0x7f1a31300000},
			}
			if len(mods) != len(wants) {
				for _, m := range mods {
					t.Logf("%s %#x-%#x", m.Path, m.Start, m.End)
				}
				t.Fatalf("%d modules, want %d", len(mods), len(wants))
			}
			for i, w := range wants {
				m := mods[i]
				if m.Path != w.path || m.Start != w.start || m.End != w.end || len(m.Maps) != w.n || m.RuntimeOffset != w.rto {
					t.Errorf("module %d: %s %#x-%#x %d maps rto %#x, want %+v", i, m.Path, m.Start, m.End, len(m.Maps), m.RuntimeOffset, w)
				}
				for j := 1; j < len(m.Maps); j++ {
					if m.Maps[j].Start < m.Maps[j-1].Start {
						t.Errorf("%s: maps not in address order", m.Path)
					}
				}
			}
			for _, c := range []struct {
				pc  uint64
				mod int
			}{
				{0x55d0a4a02100, 0},
				{0x55d0a4a0a800, -1}, // the gap between app's mappings
				{0x7f1a30010000, 1},
				{0x7f1a30042000, -1},
				{0x7f1a311bcfff, 2},
				{0x7f1a3121b000, -1}, // anonymous bss after libc
				{0x7f1a31301abc, 3},
				{0x7ffc8e5fa100, -1}, // [vdso]: added by the caller
				{0, -1},
				{^uint64(0), -1},
			} {
				if got := Find(mods, c.pc); got != c.mod {
					t.Errorf("Find(%#x) = %d, want %d", c.pc, got, c.mod)
				}
			}
		})
	}
}

// placeFile puts the runtime offset where the executable segment is
// mapped, for lld's r--/r-x split with p_vaddr − p_offset differing
// between segments and for a non-PIE binary linked at 0x400000.
func TestPlaceFile(t *testing.T) {
	mods := Group(parseMaps(t, realMaps))
	lld := mods[1]
	// lld: r-- at offset 0 vaddr 0, r-x at offset 0x10000 vaddr 0x11000.
	f := &File{loads: []seg{
		{Vaddr: 0, Off: 0, Filesz: 0x10000, Flags: 4},
		{Vaddr: 0x11000, Off: 0x10000, Filesz: 0x30000, Flags: 5},
	}}
	if err := lld.placeFile(f); err != nil {
		t.Fatal(err)
	}
	if lld.CompiledOffset != 0x1000 || lld.RuntimeOffset != 0x7f1a30000000 || lld.Bias() != 0x7f1a30000000-0x1000 {
		t.Errorf("lld: compiled %#x runtime %#x", lld.CompiledOffset, lld.RuntimeOffset)
	}
	// pc 0x7f1a30010100 is file offset 0x10100, vaddr 0x11100.
	if v := 0x7f1a30010100 - lld.Bias(); v != 0x11100 {
		t.Errorf("pc maps to %#x, want 0x11100", v)
	}

	m := &Module{Path: "/bin/x", Maps: []Mapping{
		{Start: 0x400000, End: 0x401000, Offset: 0},
		{Start: 0x401000, End: 0x480000, Offset: 0x1000},
	}}
	f = &File{loads: []seg{{Vaddr: 0x400000, Off: 0, Filesz: 0x1000, Flags: 4}, {Vaddr: 0x401000, Off: 0x1000, Filesz: 0x7f000, Flags: 5}}}
	if err := m.placeFile(f); err != nil {
		t.Fatal(err)
	}
	if m.Bias() != 0 {
		t.Errorf("non-PIE bias %#x", m.Bias())
	}
	// The executable segment's mapping missing (partial NT_FILE).
	m.Maps = m.Maps[:1]
	if err := m.placeFile(f); err != nil || m.Bias() != 0 {
		t.Errorf("fallback: %v bias %#x", err, m.Bias())
	}
	if err := m.placeFile(&File{}); err == nil {
		t.Error("no executable segment: no error")
	}
}

func TestGroupDegenerate(t *testing.T) {
	if mods := Group(nil); len(mods) != 0 {
		t.Errorf("%d modules from nothing", len(mods))
	}
	mods := Group([]Mapping{
		{Start: 0x2000, End: 0x1000, Path: "/backwards"},
		{Start: 0x3000, End: 0x3000, Path: "/empty"},
		{Start: 0x4000, End: 0x5000, Path: "[anon:x]"},
		{Start: 0x6000, End: 0x7000, Offset: 0x1000, Path: "/a"},
	})
	if len(mods) != 1 || mods[0].Path != "/a" || mods[0].RuntimeOffset != 0x5000 {
		t.Errorf("%v", mods)
	}
	if got := CleanPath("/tmp/x (deleted)"); got != "/tmp/x" {
		t.Errorf("CleanPath %q", got)
	}
}

// The test binary's own mappings: Group, ProcSources and Bias put a Go
// function's runtime address at its symbol value.
func TestSelfMaps(t *testing.T) {
	text, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	mods := Group(parseMaps(t, string(text)))
	pc := uint64(reflect.ValueOf(TestSelfMaps).Pointer())
	i := Find(mods, pc)
	if i < 0 {
		t.Fatalf("pc %#x in no module", pc)
	}
	m := mods[i]
	c := m.Load(ProcSources(os.Getpid()))
	if c == nil {
		t.Fatal(m.Err)
	}
	defer c.Close()
	// The file's bytes at pc − bias are the process's bytes at pc.
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Skip(err)
	}
	defer mem.Close()
	want := make([]byte, 64)
	if _, err := mem.ReadAt(want, int64(pc)); err != nil {
		t.Skip(err)
	}
	got := make([]byte, 64)
	if err := m.File.ReadCode(pc-m.Bias(), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("code at %#x − bias %#x differs from memory", pc, m.Bias())
	}
	if m.BuildID == "" {
		t.Error("no build ID")
	}
}
