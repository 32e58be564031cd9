package module

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const helloC = "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n"

// build compiles helloC with cc and args into a temporary directory.
func build(t *testing.T, cc string, args ...string) string {
	t.Helper()
	return buildC(t, "hello", helloC, cc, args...)
}

// tool is the path of the program name; it skips the test when name is
// not installed.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	return p
}

// buildC compiles the C source src with cc and args into a temporary
// directory as name; it skips when the toolchain lacks cc or what args
// ask for (a linker).
func buildC(t *testing.T, name, src, cc string, args ...string) string {
	t.Helper()
	tool(t, cc)
	dir := t.TempDir()
	file := filepath.Join(dir, name+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	if b, err := exec.Command(cc, append(append([]string{}, args...), "-o", out, file)...).CombinedOutput(); err != nil {
		t.Skipf("%s %v: %v\n%s", cc, args, err, b)
	}
	return out
}

// readelfBuildID is the build ID readelf -n reports, "" for none.
func readelfBuildID(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command(tool(t, "readelf"), "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	if m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// execOffset is p_vaddr − p_offset of the first executable PT_LOAD, from
// debug/elf.
func execOffset(t *testing.T, path string) uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.Vaddr - p.Off
		}
	}
	t.Fatalf("%s: no executable PT_LOAD", path)
	return 0
}

// loadOne groups maps into the one module they must form and loads it
// from this system's root; its file is closed when the test ends.
func loadOne(t *testing.T, maps []Mapping) *Module {
	t.Helper()
	mods := Group(maps)
	if len(mods) != 1 {
		t.Fatalf("%d modules", len(mods))
	}
	m := mods[0]
	c := m.Load([]Source{SysrootSource("/", nil)})
	if c == nil {
		t.Fatalf("Load: %v", m.Err)
	}
	t.Cleanup(func() { c.Close() })
	return m
}

// loadPath loads path as a module mapped the way ld.so maps it, 0x10000000
// above its link addresses.
func loadPath(t *testing.T, path string) *Module {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	defer ef.Close()
	const base = 0x10000000
	var maps []Mapping
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		start := (p.Vaddr &^ 0xfff) + base
		off := p.Off &^ 0xfff
		maps = append(maps, Mapping{Start: start, End: (p.Vaddr+p.Memsz+0xfff)&^0xfff + base, Offset: off, Path: path})
	}
	m := loadOne(t, maps)
	if m.Bias() != base {
		t.Errorf("bias %#x, want %#x", m.Bias(), uint64(base))
	}
	return m
}

// checkFile checks a loaded module against readelf and debug/elf.
func checkFile(t *testing.T, path string, m *Module) {
	t.Helper()
	if m.Err != nil || m.File == nil {
		t.Fatalf("%v", m.Err)
	}
	if want := readelfBuildID(t, path); want != "" {
		if m.BuildID != want || m.BuildIDKind != "gnu" {
			t.Errorf("build ID %s (%s), readelf says %s", m.BuildID, m.BuildIDKind, want)
		}
	}
	if want := execOffset(t, path); m.CompiledOffset != want {
		t.Errorf("CompiledOffset %#x, want %#x", m.CompiledOffset, want)
	}
	f := m.File
	if f.EHFrame == nil || !f.HasUnwindInfo() {
		t.Errorf("no .eh_frame (errors %v)", f.TableErrs)
	}
	if len(f.TableErrs) > 0 {
		t.Errorf("table errors: %v", f.TableErrs)
	}
	// Every function symbol with a size has an FDE covering it.
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	if len(syms) == 0 {
		syms, _ = ef.DynamicSymbols()
	}
	found, tried := 0, 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 || tried >= 200 {
			continue
		}
		tried++
		if fde, err := f.EHFrame.Lookup(s.Value); err == nil && fde != nil && fde.Start <= s.Value && s.Value < fde.End {
			found++
		}
		code := make([]byte, 4)
		if err := f.ReadCode(s.Value, code); err != nil {
			t.Errorf("ReadCode(%s): %v", s.Name, err)
		}
	}
	if tried == 0 || found < tried*8/10 {
		t.Errorf("FDEs found for %d of %d functions", found, tried)
	}
}

func TestLoadLibc(t *testing.T) {
	for _, path := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/aarch64-linux-gnu/lib/libc.so.6"} {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skip(err)
			}
			m := loadPath(t, path)
			checkFile(t, path, m)
		})
	}
}

func TestLoadStatic(t *testing.T) {
	path := build(t, "gcc", "-static", "-O0")
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Section(".eh_frame_hdr") != nil {
		t.Log("this gcc gives static binaries an .eh_frame_hdr")
	}
	ef.Close()
	m := loadPath(t, path)
	checkFile(t, path, m)
	if m.CompiledOffset == 0 {
		t.Errorf("static non-PIE binary with CompiledOffset 0")
	}
}

func TestLoadStrippedSections(t *testing.T) {
	path := build(t, "gcc", "-O0")
	stripped := stripSections(t, path)
	ef, err := elf.Open(stripped)
	if err != nil {
		t.Fatal(err)
	}
	if len(ef.Sections) > 1 {
		t.Fatalf("%d sections left", len(ef.Sections))
	}
	ef.Close()
	full := loadPath(t, path)
	m := loadPath(t, stripped)
	if m.File.EHFrame == nil {
		t.Fatalf("no .eh_frame through PT_GNU_EH_FRAME: %v", m.File.TableErrs)
	}
	if m.BuildID != full.BuildID || m.BuildIDKind != "gnu" {
		t.Errorf("build ID %s, unstripped %s", m.BuildID, full.BuildID)
	}
	want, err := full.File.EHFrame.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("no FDEs")
	}
	for _, w := range want {
		fde, err := m.File.EHFrame.Lookup(w.Start)
		if err != nil || fde == nil || fde.Start != w.Start || fde.End != w.End {
			t.Errorf("FDE for %#x: %+v %v, want %#x-%#x", w.Start, fde, err, w.Start, w.End)
		}
	}
}

func TestLoadNoBuildID(t *testing.T) {
	path := build(t, "gcc", "-O0", "-Wl,--build-id=none")
	if id := readelfBuildID(t, path); id != "" {
		t.Fatalf("linker wrote build ID %s", id)
	}
	m := loadPath(t, path)
	if m.File.BuildID != nil || m.BuildIDKind != "code" || len(m.BuildID) != 32 {
		t.Errorf("build ID %q kind %q", m.BuildID, m.BuildIDKind)
	}
	if _, err := hex.DecodeString(m.BuildID); err != nil {
		t.Error(err)
	}
	// Stable across loads, and different for different code.
	if m2 := loadPath(t, path); m2.BuildID != m.BuildID {
		t.Errorf("code ID changed: %s, %s", m.BuildID, m2.BuildID)
	}
	other := build(t, "gcc", "-O2", "-Wl,--build-id=none")
	if m3 := loadPath(t, other); m3.BuildID == m.BuildID {
		t.Errorf("-O0 and -O2 builds share code ID %s", m.BuildID)
	}
}

func TestLoadTruncated(t *testing.T) {
	path := build(t, "gcc", "-O0")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &Module{Path: "hello", Start: 0x1000, End: 0x2000, Maps: []Mapping{{Start: 0x1000, End: 0x2000, Path: "hello"}}}
	// Cut off the section headers (at the end): an error, kept in m.Err.
	if err := m.LoadFrom(bytes.NewReader(b[:len(b)/2])); err == nil || m.Err == nil || m.File != nil {
		t.Errorf("half a file: err %v, m.Err %v", err, m.Err)
	}
	if !strings.Contains(m.Err.Error(), "hello") {
		t.Errorf("error does not name the file: %v", m.Err)
	}
	// Every prefix: no panic.
	for n := 0; n <= len(b); n += 1 + n/64 {
		m := &Module{Path: "hello", Maps: []Mapping{{Start: 0x1000, End: 0x2000, Path: "hello"}}}
		m.LoadFrom(bytes.NewReader(b[:n]))
		if m.File == nil && m.Err == nil {
			t.Fatalf("prefix %d: no file and no error", n)
		}
	}
	// A source that fails to open.
	m = &Module{Path: "/nonexistent/x", Maps: []Mapping{{Start: 0x1000, End: 0x2000}}}
	if c := m.Load([]Source{SysrootSource("/", nil)}); c != nil || m.Err == nil {
		t.Errorf("nonexistent file loaded: %v", m.Err)
	}
}

// stripSections writes a copy of an ELF64 LE file without section headers
// (as llvm-objcopy --strip-sections does): e_shoff, e_shnum and e_shstrndx
// zeroed and the section header table cut off the end.
func stripSections(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b[elf.EI_CLASS] != byte(elf.ELFCLASS64) || b[elf.EI_DATA] != byte(elf.ELFDATA2LSB) {
		t.Skip("not ELF64 LE")
	}
	shoff := binary.LittleEndian.Uint64(b[40:])
	if shoff > 0 && shoff < uint64(len(b)) {
		b = b[:shoff]
	}
	binary.LittleEndian.PutUint64(b[40:], 0)
	binary.LittleEndian.PutUint16(b[60:], 0)
	binary.LittleEndian.PutUint16(b[62:], 0)
	out := path + ".nosections"
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}
