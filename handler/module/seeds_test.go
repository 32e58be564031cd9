package module

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/elf"
)

// writeSeed writes b as a corpus file in go test fuzz v1 format.
func writeSeed(t *testing.T, fuzzer, name string, b []byte) {
	dir := filepath.Join("testdata", "fuzz", fuzzer)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// noSections is b without its section header table.
func noSections(b []byte) []byte {
	b = append([]byte(nil), b...)
	if b[elf.EI_CLASS] == byte(elf.ELFCLASS64) {
		shoff := binary.LittleEndian.Uint64(b[40:])
		b = b[:shoff]
		binary.LittleEndian.PutUint64(b[40:], 0)
		binary.LittleEndian.PutUint32(b[60:], 0)
	} else {
		shoff := binary.LittleEndian.Uint32(b[32:])
		b = b[:shoff]
		binary.LittleEndian.PutUint32(b[32:], 0)
		binary.LittleEndian.PutUint32(b[48:], 0)
	}
	return b
}

// TestWriteSeeds regenerates testdata/fuzz/FuzzLoad from the tiny ELF
// files when UNWOUND_WRITE_SEEDS is set.
func TestWriteSeeds(t *testing.T) {
	if os.Getenv("UNWOUND_WRITE_SEEDS") == "" {
		t.Skip("set UNWOUND_WRITE_SEEDS=1 to rewrite the seed corpus")
	}
	for _, n := range []string{"tiny", "tiny-arm"} {
		b, err := os.ReadFile("testdata/" + n + ".elf")
		if err != nil {
			t.Fatal(err)
		}
		writeSeed(t, "FuzzLoad", "seed-"+n, b)
		writeSeed(t, "FuzzLoad", "seed-"+n+"-nosections", noSections(b))
	}
}

// The tiny files in testdata (the fuzz seeds): x86_64 with .eh_frame_hdr,
// ARM with .ARM.exidx, with and without section headers.
func TestTiny(t *testing.T) {
	for _, n := range []string{"tiny", "tiny-arm"} {
		b, err := os.ReadFile("testdata/" + n + ".elf")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range [][]byte{b, noSections(b)} {
			f, err := Load(bytes.NewReader(v))
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if len(f.BuildID) != 20 {
				t.Errorf("%s: build ID %x", n, f.BuildID)
			}
			if !f.HasUnwindInfo() || len(f.TableErrs) > 0 {
				t.Errorf("%s: no unwind info (%v)", n, f.TableErrs)
			}
			if f.Machine == elf.EM_ARM {
				if len(f.Exidx) != 16 || f.ExidxAddr != 0x100dc {
					t.Errorf("%s: exidx %x at %#x", n, f.Exidx, f.ExidxAddr)
				}
			} else if f.EHFrame == nil {
				t.Errorf("%s: no .eh_frame", n)
			} else if fde, err := f.EHFrame.Lookup(binary.LittleEndian.Uint64(v[24:])); err != nil || fde == nil {
				t.Errorf("%s: no FDE for _start: %v", n, err)
			}
		}
	}
}
