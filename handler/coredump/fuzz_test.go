package coredump

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/elf"
)

// fuzzLimits keep one iteration small: the fuzzer's inputs are small, and
// what the package allocates must follow what the input holds.
var fuzzLimits = Limits{MaxThreads: 64, MaxNoteBytes: 1 << 20, MaxSegments: 4096, MaxFiles: 256}

// addSeeds adds one small synthesized core; testdata/fuzz holds the rest.
// Small seeds matter: minimizing a 30 KB input stalls the fuzzer for a
// minute.
func addSeeds(f *testing.F) {
	sc := sampleCore(elf.ELFCLASS64, elf.EM_X86_64)
	sc.align = 8
	sc.notes = smallNotes(sc.notes)
	for i := range sc.segs {
		if sc.segs[i].size > 0 {
			sc.segs[i].size = 32
		}
	}
	f.Add(sc.bytes())
}

func FuzzReadHeader(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, s, err := ReadHeader(bytes.NewReader(b), fuzzLimits)
		if err != nil && s != nil && c == nil {
			t.Fatal("stream without core")
		}
		if c == nil || s == nil {
			return
		}
		m, err := s.Collect(c.Segments, func(sg Segment) []Range {
			return []Range{{sg.Vaddr, sg.Vaddr + sg.Filesz}, {sg.Vaddr + 1, sg.Vaddr + 17}}
		}, int64(len(b)))
		if m == nil {
			t.Fatal("nil Memory")
		}
		if m.Size() > int64(len(b)) {
			t.Fatalf("kept %d bytes of a %d-byte core", m.Size(), len(b))
		}
		if err == nil && s.Offset() > int64(len(b)) {
			t.Fatalf("stream at %d of %d", s.Offset(), len(b))
		}
		p := make([]byte, 8)
		for _, sg := range c.Segments {
			m.ReadAt(p, int64(sg.Vaddr))
		}
	})
}

func FuzzOpenFile(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, fm, _ := OpenFile(bytes.NewReader(b), int64(len(b)), fuzzLimits)
		if c == nil {
			return
		}
		if fm == nil {
			t.Fatal("core without memory")
		}
		p := make([]byte, 16)
		for _, sg := range c.Segments {
			fm.ReadAt(p, int64(sg.Vaddr))
			fm.ReadAt(p, int64(sg.Vaddr+sg.Filesz-8))
		}
		c.AuxvValue(AT_SYSINFO_EHDR)
	})
}

// TestWriteSeeds regenerates testdata/fuzz/Fuzz{ReadHeader,OpenFile} from
// the synthesized cores when UNWOUND_WRITE_SEEDS is set.
func TestWriteSeeds(t *testing.T) {
	if os.Getenv("UNWOUND_WRITE_SEEDS") == "" {
		t.Skip("set UNWOUND_WRITE_SEEDS=1 to rewrite the seed corpus")
	}
	seeds := map[string][]byte{}
	for i, a := range sampleArches {
		sc := sample(i)
		sc.align = 16
		sc.notes = smallNotes(sc.notes)
		// Small segments keep the seeds small.
		for j := range sc.segs {
			if sc.segs[j].size > 0 {
				sc.segs[j].size = 64
			}
		}
		seeds["seed-"+a.name] = sc.bytes()
	}
	sc := sampleCore(elf.ELFCLASS32, elf.EM_ARM)
	sc.xnum, sc.align = true, 16
	sc.notes = smallNotes(sc.notes)
	sc.segs = sc.segs[:2]
	sc.segs[0].size, sc.segs[1].size = 32, 32
	seeds["seed-xnum-arm"] = sc.bytes()
	for _, fz := range []string{"FuzzReadHeader", "FuzzOpenFile"} {
		dir := filepath.Join("testdata", "fuzz", fz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seeds {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// smallNotes drops the big skipped notes (FP registers, xstate).
func smallNotes(ns []synthNote) []synthNote {
	var out []synthNote
	for _, n := range ns {
		if len(n.desc) <= 400 {
			out = append(out, n)
		}
	}
	return out
}
