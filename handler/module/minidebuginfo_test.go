package module

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"hash/crc32"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/ulikunitz/xz"
)

// The fixtures come from testdata/mdi/build.sh: a tiny program stripped
// as Yocto strips, with MiniDebugInfo made as poky makes it (.yocto) and
// with .debug_frame in it too (.frame).

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/mdi/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// debugdata returns the .gnu_debugdata bytes of file b and where they are.
func debugdata(t testing.TB, b []byte) ([]byte, uint64) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	s := ef.Section(".gnu_debugdata")
	if s == nil {
		t.Fatal("no .gnu_debugdata")
	}
	d, err := s.Data()
	if err != nil {
		t.Fatal(err)
	}
	return d, s.Offset
}

// innerFuncs reads the FUNC symbols of the MiniDebugInfo with the xz
// package's plain reader and the standard library's ELF reader: an oracle
// apart from the code under test.
func innerFuncs(t *testing.T, b []byte) map[string]uint64 {
	t.Helper()
	d, _ := debugdata(t, b)
	zr, err := xz.NewReader(bytes.NewReader(d))
	if err != nil {
		t.Fatal(err)
	}
	var inner bytes.Buffer
	if _, err := inner.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(inner.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]uint64{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			funcs[s.Name] = s.Value &^ 1
		}
	}
	return funcs
}

func TestMiniDebugInfoGivesFunctionStarts(t *testing.T) {
	for _, arch := range []string{"arm", "riscv64"} {
		for _, kind := range []string{"yocto", "frame"} {
			name := "mdi-" + arch + "." + kind
			t.Run(name, func(t *testing.T) {
				b := readFixture(t, name)
				funcs := innerFuncs(t, b)
				if len(funcs) < 3 {
					t.Fatalf("fixture has %d FUNC symbols, want leaf, mid, entry", len(funcs))
				}
				f, err := Load(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				for fn, start := range funcs {
					got, ok := f.FuncStart(start + 2)
					if !ok || got != start {
						t.Errorf("FuncStart(%s+2) = %#x, %v; want %#x", fn, got, ok, start)
					}
				}
				if err := f.MiniDebugInfoError(); err != nil {
					t.Fatal(err)
				}
				// Without MiniDebugInfo, the stripped file has none of them.
				plain, err := Load(bytes.NewReader(readFixture(t, "mdi-"+arch)))
				if err != nil {
					t.Fatal(err)
				}
				if s, ok := plain.FuncStart(funcs["mid"] + 2); ok {
					t.Errorf("plain strip: FuncStart found %#x", s)
				}
			})
		}
	}
}

func TestMiniDebugInfoDebugFrameIsCFI(t *testing.T) {
	for _, arch := range []string{"arm", "riscv64"} {
		funcs := innerFuncs(t, readFixture(t, "mdi-"+arch+".frame"))
		for _, kind := range []string{"yocto", "frame"} {
			f, err := Load(bytes.NewReader(readFixture(t, "mdi-"+arch+"."+kind)))
			if err != nil {
				t.Fatal(err)
			}
			if f.HasUnwindInfo() {
				t.Fatalf("%s %s: the stripped fixture has unwind tables of its own", arch, kind)
			}
			tabs := f.CFITables(funcs["mid"] + 2)
			if kind == "yocto" {
				if tabs[0] != nil {
					t.Errorf("%s: symbols-only MiniDebugInfo gave a .debug_frame", arch)
				}
				continue
			}
			if tabs[0] == nil {
				t.Fatalf("%s: no .debug_frame from MiniDebugInfo (%v)", arch, f.MiniDebugInfoError())
			}
			for fn, start := range funcs {
				fde, err := tabs[0].Lookup(start)
				if err != nil {
					t.Errorf("%s: %s: %v", arch, fn, err)
					continue
				}
				if _, err := tabs[0].Row(fde, start); err != nil {
					t.Errorf("%s: %s: row: %v", arch, fn, err)
				}
			}
		}
	}
}

// damage returns the fixture with its .gnu_debugdata changed by fn, in
// place (same size) or, with a shorter result, truncated by shrinking the
// section header's size.
func damage(t *testing.T, name string, fn func(d []byte) []byte) []byte {
	b := append([]byte(nil), readFixture(t, name)...)
	d, off := debugdata(t, b)
	nd := fn(append([]byte(nil), d...))
	copy(b[off:], nd)
	if len(nd) != len(d) {
		// Patch sh_size of the section (ELF32 LE: offset 20 in the header).
		ef, _ := elf.NewFile(bytes.NewReader(b))
		shoff := binary.LittleEndian.Uint32(b[32:])
		for i, s := range ef.Sections {
			if s.Name == ".gnu_debugdata" {
				binary.LittleEndian.PutUint32(b[shoff+uint32(i)*40+20:], uint32(len(nd)))
			}
		}
	}
	return b
}

func TestMiniDebugInfoDamagedIsAModuleError(t *testing.T) {
	cases := []struct {
		name string
		fn   func(d []byte) []byte
		want string
	}{
		{"truncated", func(d []byte) []byte { return d[:len(d)/2] }, "xz"},
		{"payload byte flipped", func(d []byte) []byte { d[40] ^= 0x55; return d }, "xz"},
		{"wrong check", func(d []byte) []byte {
			// The block's CRC64 sits just before the index.
			blocks, _, err := xzIndex(d)
			if err != nil {
				t.Fatal(err)
			}
			d[blocks[0].end-1] ^= 1
			return d
		}, "xz"},
		{"not xz", func(d []byte) []byte { copy(d, "hello"); return d }, "magic"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := damage(t, "mdi-arm.frame", c.fn)
			m := &Module{Path: "/bin/x", Maps: []Mapping{{Start: 0x10000, End: 0x11000, Path: "/bin/x"}}}
			if err := m.LoadFrom(bytes.NewReader(b)); err != nil {
				t.Fatalf("the module must load: %v", err)
			}
			if _, ok := m.File.FuncStart(0x10100); ok {
				t.Error("function starts from a damaged section")
			}
			if tabs := m.File.CFITables(0x10100); tabs[0] != nil {
				t.Error(".debug_frame from a damaged section")
			}
			err := m.Error()
			if err == nil || !strings.Contains(err.Error(), ".gnu_debugdata") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("module error %v, want a .gnu_debugdata error about %q", err, c.want)
			}
		})
	}
}

// xzOf compresses b with the given LZMA2 dictionary size byte written in
// the block header (the encoder itself uses a small dictionary).
func xzOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := xz.WriterConfig{DictCap: 1 << 16}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rewriteIndex sets every index record's uncompressed size to size and
// fixes the index CRC32, keeping the varint length (size must encode in
// as many bytes as the old value, or the test says so).
func setDeclaredSize(t *testing.T, z []byte, size uint64) []byte {
	t.Helper()
	z = append([]byte(nil), z...)
	n := len(z)
	isize := (int(binary.LittleEndian.Uint32(z[n-8:])) + 1) * 4
	idx := z[n-12-isize : n-12]
	var rec []byte
	for v := size; ; v >>= 7 {
		if v < 0x80 {
			rec = append(rec, byte(v))
			break
		}
		rec = append(rec, byte(v)|0x80)
	}
	// Rebuild: indicator, count 1, unpadded, size, padding, CRC32.
	_, p, _ := xzVarint(idx[1:])
	unp, _, _ := xzVarint(p)
	var ni []byte
	ni = append(ni, 0, 1)
	for v := unp; ; v >>= 7 {
		if v < 0x80 {
			ni = append(ni, byte(v))
			break
		}
		ni = append(ni, byte(v)|0x80)
	}
	ni = append(ni, rec...)
	for len(ni)%4 != 0 {
		ni = append(ni, 0)
	}
	ni = binary.LittleEndian.AppendUint32(ni, crc32.ChecksumIEEE(ni))
	out := append(append([]byte(nil), z[:n-12-isize]...), ni...)
	foot := make([]byte, 12)
	copy(foot, z[n-12:])
	binary.LittleEndian.PutUint32(foot[4:], uint32(len(ni)/4-1))
	binary.LittleEndian.PutUint32(foot, crc32.ChecksumIEEE(foot[4:10]))
	return append(out, foot...)
}

func TestMiniDebugInfoHugeDeclaredSizeAllocatesNothing(t *testing.T) {
	z := setDeclaredSize(t, xzOf(t, []byte("small")), 1<<40)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decompressXZ(z, MaxMiniDebugInfo)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "too many") {
		t.Fatalf("err = %v, want a size error", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Errorf("allocated %d bytes before refusing", d)
	}
	// A declared size smaller than the data is caught while decoding.
	if _, err := decompressXZ(setDeclaredSize(t, xzOf(t, bytes.Repeat([]byte("abc"), 1000)), 10), MaxMiniDebugInfo); err == nil {
		t.Error("a stream longer than its index says was accepted")
	}
}

func TestMiniDebugInfoHugeDictionaryIsCapped(t *testing.T) {
	data := bytes.Repeat([]byte("minidebuginfo "), 3000)
	z := xzOf(t, data)
	// Declare a 4 GiB dictionary in the block header (property 40) and
	// fix its CRC32, as a hostile or -9 file would.
	hlen := (int(z[12]) + 1) * 4
	h := z[12 : 12+hlen]
	i := bytes.IndexByte(h[2:], lzma2Filter) + 2
	if i < 2 || h[i+1] != 1 {
		t.Fatalf("no LZMA2 filter flags in %x", h)
	}
	h[i+2] = 40
	binary.LittleEndian.PutUint32(h[hlen-4:], crc32.ChecksumIEEE(h[:hlen-4]))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, err := decompressXZ(z, MaxMiniDebugInfo)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Fatal("decoded data differ")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
		t.Errorf("allocated %d bytes for %d bytes of output", d, len(data))
	}
}

func TestMiniDebugInfoHostileInnerELF(t *testing.T) {
	outer, err := Load(bytes.NewReader(readFixture(t, "mdi-arm.frame")))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := debugdata(t, readFixture(t, "mdi-arm.frame"))
	inner, err := decompressXZ(d, MaxMiniDebugInfo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseMiniELF(inner, outer); err != nil {
		t.Fatalf("the good inner ELF: %v", err)
	}
	mutate := map[string]func(b []byte){
		"section table past the end": func(b []byte) { binary.LittleEndian.PutUint32(b[32:], 0xfffffff0) },
		"65535 sections":             func(b []byte) { binary.LittleEndian.PutUint16(b[48:], 0xffff) },
		"every section huge": func(b []byte) {
			shoff, n := binary.LittleEndian.Uint32(b[32:]), binary.LittleEndian.Uint16(b[48:])
			for i := uint32(1); i < uint32(n); i++ {
				binary.LittleEndian.PutUint32(b[shoff+i*40+20:], 0x7ffffff0)
			}
		},
		"another machine": func(b []byte) { binary.LittleEndian.PutUint16(b[18:], uint16(elf.EM_AARCH64)) },
		"not ELF":         func(b []byte) { b[1] = 'X' },
	}
	for name, fn := range mutate {
		b := append([]byte(nil), inner...)
		fn(b)
		if _, err := parseMiniELF(b, outer); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDictByte(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want byte
	}{{0, 0}, {4096, 0}, {4097, 1}, {6144, 1}, {6145, 2}, {8 << 20, 22}, {1 << 32, 40}} {
		if got := dictByte(c.n); got != c.want {
			t.Errorf("dictByte(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
