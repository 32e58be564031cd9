package install

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler"
	"github.com/unwound-dev/unwound/handler/coredump"
	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// The self-test: before `install` points the kernel at the handler, the
// handler proves it works on this board. It builds, in memory, an ELF core
// of a made-up process for this board's architecture (two threads, a stack
// segment, NT_PRSTATUS, NT_PRPSINFO, NT_SIGINFO, NT_AUXV, NT_FILE) and the
// program it maps (an ELF file with a build ID and an .eh_frame table
// describing three functions), streams the core through the handler's own
// code exactly as the kernel's pipe would (handler.Offline on a stream),
// and checks the report: the architecture, every frame's PC and method,
// the stop reason, the program's build ID, and that it encodes (zstd).

// SelfTestResult says what the self-test saw.
type SelfTestResult struct {
	Arch       string
	Frames     int // in the crashing thread
	ReportSize int // encoded (JSON + zstd) bytes
	Duration   time.Duration
}

// BoardArch is the handler's own architecture, in the report's naming.
func BoardArch() (*arch.Arch, error) {
	name := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "arm": "arm", "riscv64": "riscv64"}[runtime.GOARCH]
	if name == "" {
		return nil, fmt.Errorf("self-test: unwound does not support GOARCH=%s", runtime.GOARCH)
	}
	return arch.ByName(name)
}

// Synthetic program layout: one PT_LOAD at progBase holding the headers,
// a build-ID note, three functions of funcSize bytes at textOff, and the
// .eh_frame. The core maps it at the same address (no load bias).
const (
	progBase = 0x400000
	textOff  = 0x100
	funcSize = 0x40
	stackTop = 0x7ff000 // end of the stack segment in the core
	progPath = "/unwound-selftest/crash"
	tidMain  = 4242
	tidOther = 4243
	sigSEGV  = 11
)

var selftestBuildID = []byte("unwound-selftest-build-id")

func funcAddr(i int) uint64 { return progBase + textOff + uint64(i)*funcSize }

// SelfTest runs the self-test for a, normally BoardArch().
func SelfTest(a *arch.Arch) (*SelfTestResult, error) {
	start := time.Now()
	w := a.PtrSize
	ord := order(a)
	prog := syntheticProgram(a)

	// The crashing thread: f0 called from f1, called from f2, the
	// outermost function (its CFI says the return address is undefined).
	// Each frame is 2 words: CFA = SP + 2w, return address at CFA − w.
	frame := uint64(2 * w)
	sp0 := uint64(stackTop - 0x400)
	pcs := []uint64{funcAddr(0) + 0x10, funcAddr(1) + 0x18, funcAddr(2) + 0x20}
	stackLo := uint64(stackTop - 0x1000)
	stack := make([]byte, stackTop-stackLo)
	for i := 1; i < len(pcs); i++ {
		sp := sp0 + uint64(i-1)*frame
		slot := stack[sp+uint64(w)-stackLo:]
		if w == 8 {
			ord.PutUint64(slot, pcs[i])
		} else {
			ord.PutUint32(slot, uint32(pcs[i]))
		}
	}
	// The other thread sits in the outermost function.
	otherPC, otherSP := funcAddr(2)+4, uint64(stackTop-0x100)

	nw := coredump.NoteWriter{Class: elfClass(a), Order: a.Order, Machine: a.Machine}
	var notes []byte
	addNote := func(name string, typ uint32, desc []byte) { notes = nw.AppendNote(notes, name, typ, desc) }
	addNote("CORE", uint32(elf.NT_PRSTATUS), nw.PRStatus(tidMain, sigSEGV, gregs(a, pcs[0], sp0)))
	addNote("CORE", uint32(elf.NT_PRPSINFO), nw.PRPSInfo(tidMain, 1, 0, 0, "crash", progPath))
	addNote("CORE", 0x53494749 /* NT_SIGINFO */, nw.SigInfo(sigSEGV, 0, 1 /* SEGV_MAPERR */, 0))
	addNote("CORE", 6 /* NT_AUXV */, nw.Auxv(coredump.AT_PAGESZ, 4096, coredump.AT_ENTRY, funcAddr(2)))
	addNote("CORE", 0x46494c45 /* NT_FILE */, nw.File(4096, []coredump.FileMapping{
		{Start: progBase, End: progBase + uint64(len(prog)+4095)&^4095, Path: progPath}}))
	addNote("CORE", uint32(elf.NT_PRSTATUS), nw.PRStatus(tidOther, 0, gregs(a, otherPC, otherSP)))

	core := coreFile(nw, notes, stackLo, stack)
	src := func(m *module.Module) (io.ReaderAt, io.Closer, error) {
		if m.Path != progPath {
			return nil, nil, fmt.Errorf("%s: not the self-test's program", m.Path)
		}
		return bytes.NewReader(prog), io.NopCloser(nil), nil
	}
	cfg := config.Default()
	var log bytes.Buffer
	r, err := handler.Offline(handler.OfflineOptions{
		CoreFile: "-", Stdin: bytes.NewReader(core), Config: cfg, Log: handler.NewLogger(&log),
		Sources: []module.Source{src}, Sysroot: "/nonexistent-unwound-selftest",
	})
	if err != nil {
		return nil, fmt.Errorf("self-test: the handler failed on a synthetic %s core: %v", a.Name, err)
	}
	if err := checkSelfTest(r, a, pcs, otherPC); err != nil {
		if log.Len() > 0 {
			err = fmt.Errorf("%w\nhandler log:\n%s", err, strings.TrimSpace(log.String()))
		}
		return nil, err
	}
	enc, err := report.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("self-test: encoding the report: %v", err)
	}
	// Not decoded back here: the zstd decoder stays out of the handler
	// (docs/design.md, "Footprint"; report's own tests decode what
	// Encode writes).
	if !bytes.HasPrefix(enc, []byte(zstdenc.Magic)) {
		return nil, fmt.Errorf("self-test: the encoded report is not a zstd frame")
	}
	return &SelfTestResult{Arch: a.Name, Frames: len(r.Crashed().Frames), ReportSize: len(enc), Duration: time.Since(start)}, nil
}

func checkSelfTest(r *report.Report, a *arch.Arch, pcs []uint64, otherPC uint64) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("self-test (%s): "+format, append([]any{a.Name}, args...)...)
	}
	if r.Arch != a.Name {
		return bad("report says arch %q", r.Arch)
	}
	if len(r.Errors) > 0 {
		return bad("report errors: %s", strings.Join(r.Errors, "; "))
	}
	if r.Signal.Number != sigSEGV || r.TID != tidMain || r.Exe != progPath {
		return bad("signal %d, tid %d, exe %q; want %d, %d, %q", r.Signal.Number, r.TID, r.Exe, sigSEGV, tidMain, progPath)
	}
	if len(r.Modules) == 0 {
		return bad("no module")
	}
	mi := -1
	for i, m := range r.Modules {
		if m.Path == progPath {
			mi = i
		}
	}
	if mi < 0 {
		return bad("the program is not among the modules")
	}
	if m := r.Modules[mi]; m.Error != "" || m.BuildID != hex.EncodeToString(selftestBuildID) || m.BuildIDKind != "gnu" {
		return bad("program module: build id %q (%s), error %q", m.BuildID, m.BuildIDKind, m.Error)
	}
	if len(r.Threads) != 2 {
		return bad("%d threads, want 2", len(r.Threads))
	}
	th := r.Crashed()
	if th == nil || th.TID != tidMain {
		return bad("crashing thread missing")
	}
	want := []string{"context", "cfi", "cfi"}
	var got []string
	for _, f := range th.Frames {
		got = append(got, fmt.Sprintf("%#x/%s", uint64(f.PC), f.Method))
	}
	var exp []string
	for i, pc := range pcs {
		exp = append(exp, fmt.Sprintf("%#x/%s", pc, want[i]))
	}
	if strings.Join(got, " ") != strings.Join(exp, " ") || th.StopReason != "end_of_stack" {
		return bad("crashing thread %v (stop %s %s), want %v (stop end_of_stack)", got, th.StopReason, th.StopDetail, exp)
	}
	for _, t := range r.Threads {
		if t.TID == tidOther && (len(t.Frames) != 1 || uint64(t.Frames[0].PC) != otherPC || t.StopReason != "end_of_stack") {
			return bad("second thread: %d frames, stop %s", len(t.Frames), t.StopReason)
		}
	}
	return nil
}

// order is a's byte order with the append methods.
func order(a *arch.Arch) interface {
	binary.ByteOrder
	binary.AppendByteOrder
} {
	if a.Order == binary.ByteOrder(binary.BigEndian) {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// elfClass is a's ELF class.
func elfClass(a *arch.Arch) elf.Class {
	if a.PtrSize == 8 {
		return elf.ELFCLASS64
	}
	return elf.ELFCLASS32
}

// gregs is a thread's pr_reg with pc and sp set.
func gregs(a *arch.Arch, pc, sp uint64) []uint64 {
	r := make([]uint64, coredump.GregsetWords(a.Machine))
	for i, n := range a.PRStatus {
		if n == a.SP {
			r[i] = sp
		}
	}
	r[a.PRStatusPC] = pc
	return r
}

// elfFlags is e_flags for a's executables.
func elfFlags(a *arch.Arch) uint32 {
	if a.PtrSize == 4 && a.Machine == elf.EM_ARM {
		return 0x05000000 // EF_ARM_EABI_VER5
	}
	return 0
}

// syntheticProgram is the ELF executable the synthetic process maps: a
// GNU build-ID note, three functions and their .eh_frame. Every function
// keeps a two-word frame with the return address at CFA − w, as compiled
// code with unwind tables does; the third is the outermost one.
func syntheticProgram(a *arch.Arch) []byte {
	w := a.PtrSize
	o := order(a)
	ptr := func(b []byte, v uint64) []byte {
		if w == 8 {
			return o.AppendUint64(b, v)
		}
		return o.AppendUint32(b, uint32(v))
	}
	uleb := func(b []byte, v uint64) []byte {
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	pad := func(b []byte) []byte {
		for len(b)%w != 0 { // entries end pointer-aligned
			b = append(b, 0) // DW_CFA_nop
		}
		return b
	}
	// CIE: version 1, "zR" with absolute pointers, code alignment 1, data
	// alignment −w, the architecture's return-address column; initial
	// rules: CFA = SP + 2w, return address saved at CFA − w.
	cie := []byte{0, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0}
	cie = uleb(cie, 1)
	cie = append(cie, byte(0x80-w)&0x7f) // sleb128 −w
	cie = append(cie, byte(a.RA))
	cie = uleb(cie, 1)
	cie = append(cie, 0x00) // DW_EH_PE_absptr
	cie = append(cie, 0x0c) // DW_CFA_def_cfa
	cie = uleb(cie, uint64(a.SP))
	cie = uleb(cie, uint64(2*w))
	cie = append(cie, 0x80|byte(a.RA)) // DW_CFA_offset ra, 1 × data alignment
	cie = uleb(cie, 1)
	cie = pad(cie)
	o.PutUint32(cie[0:], uint32(len(cie)-4))
	eh := append([]byte(nil), cie...)
	for i := 0; i < 3; i++ {
		fde := make([]byte, 8)
		o.PutUint32(fde[4:], uint32(len(eh)+4)) // back to the CIE
		fde = ptr(fde, funcAddr(i))
		fde = ptr(fde, funcSize)
		fde = uleb(fde, 0)
		if i == 2 {
			fde = append(fde, 0x07) // DW_CFA_undefined ra: the outermost frame
			fde = uleb(fde, uint64(a.RA))
		}
		fde = pad(fde)
		o.PutUint32(fde[0:], uint32(len(fde)-4))
		eh = append(eh, fde...)
	}
	eh = append(eh, 0, 0, 0, 0) // terminator

	wr := elf.Writer{Class: a.Class, Order: a.Order}
	ehsize, phentsize, _ := wr.Sizes()
	noteOff := uint64(ehsize + 2*phentsize)
	note := o.AppendUint32(nil, 4)
	note = o.AppendUint32(note, uint32(len(selftestBuildID)))
	note = o.AppendUint32(note, 3 /* NT_GNU_BUILD_ID */)
	note = append(note, "GNU\x00"...)
	note = append(note, selftestBuildID...)
	for len(note)%4 != 0 {
		note = append(note, 0)
	}
	ehOff := uint64(textOff + 3*funcSize)
	shstr := []byte("\x00.text\x00.eh_frame\x00.note.gnu.build-id\x00.shstrtab\x00")
	strOff := ehOff + uint64(len(eh))
	loadSize := strOff
	shoff := (strOff + uint64(len(shstr)) + 7) &^ 7

	file := wr.AppendHeader(make([]byte, 0, shoff), elf.Header{Type: elf.ET_EXEC, Machine: a.Machine, Flags: elfFlags(a), Entry: funcAddr(2), Phnum: 2, Shoff: shoff, Shnum: 5, Shstrndx: 4})
	file = wr.AppendProg(file, elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Vaddr: progBase, Paddr: progBase, Filesz: loadSize, Memsz: loadSize, Align: 4096})
	file = wr.AppendProg(file, elf.ProgHeader{Type: elf.PT_NOTE, Flags: elf.PF_R, Off: noteOff, Vaddr: progBase + noteOff, Paddr: progBase + noteOff, Filesz: uint64(len(note)), Memsz: uint64(len(note)), Align: 4})
	file = file[:shoff]
	copy(file[noteOff:], note)
	// The functions' code: never executed or decoded (the CFI describes
	// them); a recognisable filler that is no signal trampoline.
	for i := uint64(textOff); i < ehOff; i++ {
		file[i] = 0xa5
	}
	copy(file[ehOff:], eh)
	copy(file[strOff:], shstr)
	idx := func(name string) uint32 { return uint32(bytes.Index(shstr, []byte("\x00"+name+"\x00")) + 1) }
	sec := func(name string, typ elf.SectionType, flags elf.SectionFlag, addr, off, size uint64) {
		n := uint32(0)
		if name != "" {
			n = idx(name)
		}
		file = wr.AppendSection(file, n, elf.SectionHeader{Type: typ, Flags: flags, Addr: addr, Offset: off, Size: size, Addralign: 1})
	}
	sec("", elf.SHT_NULL, 0, 0, 0, 0)
	sec(".text", elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, progBase+textOff, textOff, 3*funcSize)
	sec(".eh_frame", elf.SHT_PROGBITS, elf.SHF_ALLOC, progBase+ehOff, ehOff, uint64(len(eh)))
	sec(".note.gnu.build-id", elf.SHT_NOTE, elf.SHF_ALLOC, progBase+noteOff, noteOff, uint64(len(note)))
	sec(".shstrtab", elf.SHT_STRTAB, 0, 0, strOff, uint64(len(shstr)))
	return file
}

// coreFile is the core (coredump.CoreLayout): the program's mapping is a
// PT_LOAD without file data (text is not dumped); the stack is dumped.
func coreFile(nw coredump.NoteWriter, notes []byte, stackLo uint64, stack []byte) []byte {
	l := coredump.CoreLayout{NoteWriter: nw, Notes: notes, Segs: []coredump.CoreSegment{
		{Vaddr: progBase, Memsz: 4096, Flags: elf.PF_R | elf.PF_X},
		{Vaddr: stackLo, Filesz: uint64(len(stack)), Flags: elf.PF_R | elf.PF_W},
	}}
	hdr, _, _ := l.Header()
	return append(hdr, stack...)
}
