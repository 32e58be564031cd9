package elf_test

import (
	"bytes"
	stdelf "debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/testkit/fixture"
)

// The reader is checked against debug/elf, the reference, on real files:
// headers, names, section and segment bytes and build IDs must agree.

// stdParse runs debug/elf, turning its panics (it indexes with unchecked
// header values) into errors.
func stdParse(b []byte) (f *stdelf.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("debug/elf panicked: %v", r)
		}
	}()
	return stdelf.NewFile(bytes.NewReader(b))
}

// knownDifference says why the readers may disagree on b: the cases where
// unwound/elf is meant to differ from debug/elf. "" when they must agree.
func knownDifference(b []byte, ours *elf.File) string {
	if len(b) < 64 {
		return ""
	}
	if ours != nil {
		for _, s := range ours.Sections {
			if s.Flags&elf.SHF_COMPRESSED != 0 {
				return "compressed section: debug/elf reads its header, unwound/elf does not"
			}
		}
	}
	le := b[elf.EI_DATA] == byte(elf.ELFDATA2LSB)
	uint := func(off, n int) uint64 {
		var v uint64
		for i := 0; i < n; i++ {
			if le {
				v |= uint64(b[off+i]) << (8 * i)
			} else {
				v = v<<8 | uint64(b[off+i])
			}
		}
		return v
	}
	phnum, shnum, shoff := uint(44, 2), uint(48, 2), uint(32, 4)
	if b[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
		phnum, shnum, shoff = uint(56, 2), uint(60, 2), uint(40, 8)
	}
	switch {
	case phnum == elf.PN_XNUM:
		return "PN_XNUM: unwound/elf takes the count from section header 0"
	case shnum == 0 && shoff != 0:
		return "extended section numbering: unwound/elf limits the count"
	}
	return ""
}

// compare checks unwound/elf against debug/elf on one file.
func compare(t *testing.T, name string, b []byte) {
	t.Helper()
	ours, err := elf.NewFile(bytes.NewReader(b), int64(len(b)))
	std, stdErr := stdParse(b)
	if (err == nil) != (stdErr == nil) {
		if why := knownDifference(b, ours); why == "" {
			t.Errorf("%s: unwound/elf: %v; debug/elf: %v", name, err, stdErr)
		}
		return
	}
	if err != nil {
		return
	}
	if why := knownDifference(b, ours); why != "" {
		return
	}
	h, sh := ours.FileHeader, std.FileHeader
	if h.Class != elf.Class(sh.Class) || h.Data != elf.Data(sh.Data) || h.Version != uint8(sh.Version) ||
		h.OSABI != uint8(sh.OSABI) || h.ABIVersion != sh.ABIVersion || h.ByteOrder != sh.ByteOrder ||
		h.Type != elf.Type(sh.Type) || h.Machine != elf.Machine(sh.Machine) || h.Entry != sh.Entry {
		t.Errorf("%s: header %+v, debug/elf %+v", name, h, sh)
	}
	if h.Type <= elf.ET_CORE && fmt.Sprint(h.Class, h.Type) != fmt.Sprint(sh.Class, sh.Type) {
		t.Errorf("%s: prints as %v %v, debug/elf %v %v", name, h.Class, h.Type, sh.Class, sh.Type)
	}
	if len(ours.Progs) != len(std.Progs) {
		t.Fatalf("%s: %d program headers, debug/elf %d", name, len(ours.Progs), len(std.Progs))
	}
	for i, p := range ours.Progs {
		sp := std.Progs[i]
		want := elf.ProgHeader{Type: elf.ProgType(sp.Type), Flags: elf.ProgFlag(sp.Flags), Off: sp.Off, Vaddr: sp.Vaddr,
			Paddr: sp.Paddr, Filesz: sp.Filesz, Memsz: sp.Memsz, Align: sp.Align}
		if p.ProgHeader != want {
			t.Errorf("%s: program header %d: %+v, debug/elf %+v", name, i, p.ProgHeader, want)
		}
		got, err := p.Data()
		wantData, stdErr := io.ReadAll(sp.Open())
		if stdErr == nil && uint64(len(wantData)) != sp.Filesz {
			stdErr = io.ErrUnexpectedEOF
		}
		if (err == nil) != (stdErr == nil) || !bytes.Equal(got, wantData) && err == nil {
			t.Errorf("%s: segment %d data: %d bytes, %v; debug/elf %d bytes, %v", name, i, len(got), err, len(wantData), stdErr)
		}
	}
	if len(ours.Sections) != len(std.Sections) {
		t.Fatalf("%s: %d sections, debug/elf %d", name, len(ours.Sections), len(std.Sections))
	}
	for i, s := range ours.Sections {
		ss := std.Sections[i]
		want := elf.SectionHeader{Name: ss.Name, Type: elf.SectionType(ss.Type), Flags: elf.SectionFlag(ss.Flags),
			Addr: ss.Addr, Offset: ss.Offset, Size: ss.Size, Link: ss.Link, Info: ss.Info,
			Addralign: ss.Addralign, Entsize: ss.Entsize, FileSize: ss.FileSize}
		if ss.Type == stdelf.SHT_NOBITS {
			want.FileSize = 0 // debug/elf keeps sh_size there; nothing of it is in the file
		}
		if s.SectionHeader != want {
			t.Errorf("%s: section %d: %+v, debug/elf %+v", name, i, s.SectionHeader, want)
		}
		if ours.Section(s.Name) != nil && std.Section(s.Name) != nil && ours.Section(s.Name).Offset != std.Section(s.Name).Offset {
			t.Errorf("%s: Section(%q) differs", name, s.Name)
		}
		if s.Type == elf.SHT_NOBITS {
			if _, err := s.Data(); err == nil {
				t.Errorf("%s: section %s: SHT_NOBITS data without an error", name, s.Name)
			}
			continue
		}
		got, err := s.Data()
		wantData, stdErr := ss.Data()
		if (err == nil) != (stdErr == nil) || err == nil && !bytes.Equal(got, wantData) {
			t.Errorf("%s: section %s data: %d bytes, %v; debug/elf %d bytes, %v", name, s.Name, len(got), err, len(wantData), stdErr)
		}
	}
}

// elfFiles lists the ELF files under dir (regular files that start with
// the ELF magic), at most max of them.
func elfFiles(t *testing.T, dir string, max int) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= max {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				var m [4]byte
				if _, err := io.ReadFull(f, m[:]); err == nil && string(m[:]) == elf.ELFMAG {
					out = append(out, p)
				}
				f.Close()
			}
		}
		return nil
	})
	return out
}

func compareFiles(t *testing.T, paths []string) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, p, b)
		ours, err1 := elf.NewFile(bytes.NewReader(b), int64(len(b)))
		std, err2 := stdelf.NewFile(bytes.NewReader(b))
		if err1 != nil || err2 != nil {
			continue
		}
		if s := std.Section(".note.gnu.build-id"); s != nil {
			if d, err := s.Data(); err == nil && len(d) > 16 && !bytes.Equal(ours.BuildID(), d[16:]) {
				t.Errorf("%s: build ID %x, .note.gnu.build-id says %x", p, ours.BuildID(), d[16:])
			}
		}
	}
}

// Every ELF file in the repository's testdata.
func TestMatchesDebugELFOnTestdata(t *testing.T) {
	root := fixture.Root()
	var paths []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "testdata" {
			paths = append(paths, elfFiles(t, p, 1000)...)
			return filepath.SkipDir
		}
		if err == nil && d.IsDir() && (d.Name() == "buildroot" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		return nil
	})
	if len(paths) < 2 {
		t.Fatalf("only %d ELF files in testdata: %v", len(paths), paths)
	}
	compareFiles(t, paths)
}

// The cross-compiled crash programs (gcc, g++: static and dynamic,
// stripped and not, for every architecture with a compiler here) and the
// libraries of each architecture's sysroot.
func TestMatchesDebugELFOnFixtures(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the crash fixtures")
	}
	for _, arch := range []string{"x86_64", "aarch64", "arm", "riscv64"} {
		t.Run(arch, func(t *testing.T) {
			dir := fixture.Build(t, arch)
			paths := elfFiles(t, dir, 1000)
			if len(paths) == 0 {
				t.Fatalf("no fixtures in %s", dir)
			}
			if sys := fixture.Sysroot(arch); sys != "/" {
				paths = append(paths, elfFiles(t, filepath.Join(sys, "lib"), 200)...)
			}
			t.Logf("%d files", len(paths))
			compareFiles(t, paths)
		})
	}
}

// Big-endian files, 32- and 64-bit: Go programs built for mips and s390x.
func TestMatchesDebugELFBigEndian(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go programs for mips and s390x")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() { println(\"hi\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"mips", "s390x"} {
		for _, ld := range []string{"", "-s -w"} {
			out := filepath.Join(dir, arch+strings.ReplaceAll(ld, " ", ""))
			cmd := exec.Command("go", "build", "-ldflags", ld, "-o", out, src)
			cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0", "GOFLAGS=")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", arch, err, b)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if b[elf.EI_DATA] != byte(elf.ELFDATA2MSB) {
				t.Fatalf("%s: not big-endian", out)
			}
			compare(t, out, b)
		}
	}
}

// Every prefix of a real file: a file cut anywhere is an error exactly
// when debug/elf says so, and never a panic.
func TestTruncated(t *testing.T) {
	for _, n := range []string{"tiny.elf", "tiny-arm.elf"} {
		b, err := os.ReadFile(filepath.Join("..", "handler", "module", "testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= len(b); i++ {
			compare(t, fmt.Sprintf("%s[:%d]", n, i), b[:i])
		}
	}
}

// The module package's files are the handler's inputs; list their headers
// as readelf -lS would, to make a failure readable.
func dump(f *elf.File) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v %v %v %v entry %#x\n", f.Class, f.Data, f.Type, f.Machine, f.Entry)
	for _, p := range f.Progs {
		fmt.Fprintf(&sb, "  %-16v off %#x vaddr %#x filesz %#x memsz %#x flags %d\n", p.Type, p.Off, p.Vaddr, p.Filesz, p.Memsz, p.Flags)
	}
	names := make([]string, 0, len(f.Sections))
	for _, s := range f.Sections {
		names = append(names, fmt.Sprintf("%s(%v)", s.Name, s.Type))
	}
	sort.Strings(names)
	fmt.Fprintf(&sb, "  sections: %s\n", strings.Join(names, " "))
	return sb.String()
}

func TestStrings(t *testing.T) {
	f, err := elf.Open(filepath.Join("..", "handler", "module", "testdata", "tiny-arm.elf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := dump(f)
	for _, want := range []string{"ELFCLASS32 ELFDATA2LSB ET_EXEC EM_ARM", "PT_ARM_EXIDX", "PT_LOAD", ".ARM.exidx(SHT_ARM_EXIDX)", ".shstrtab(SHT_STRTAB)"} {
		if !strings.Contains(got, want) {
			t.Errorf("dump lacks %q:\n%s", want, got)
		}
	}
	if s := elf.Machine(0x1234).String(); s != "4660" {
		t.Errorf("unknown machine prints as %q", s)
	}
	if len(f.BuildID()) != 20 {
		t.Errorf("build ID %x", f.BuildID())
	}
}

// formatErrorAt checks err is a *FormatError.
func formatErrorAt(t *testing.T, what string, err error) *elf.FormatError {
	t.Helper()
	var fe *elf.FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("%s: error %v (%T), want a *elf.FormatError", what, err, err)
	}
	return fe
}
