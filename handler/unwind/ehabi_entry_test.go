package unwind

import (
	"debug/elf"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// TestEHABINotAtFunctionEntry: a PC stopped at a function's first
// instruction (a random stop of Debian's armhf busybox, at glibc's
// _IO_default_xsputn, called through a pointer) has pushed nothing yet,
// but the function's EXIDX program pops {r4-r10, lr}: run there, it took
// eight words of the caller's frame for saved registers and its eighth
// for the return address, at high trust. The return address is in LR.
// glibc's own libc.so.6 of the cross sysroot gives the table.
func TestEHABINotAtFunctionEntry(t *testing.T) {
	const libc = "/usr/arm-linux-gnueabihf/lib/libc.so.6"
	ef, err := elf.Open(libc)
	if err != nil {
		t.Skipf("%s: %v (libc6-armhf-cross)", libc, err)
	}
	syms, _ := ef.DynamicSymbols()
	ef.Close()
	var entry uint64
	for _, s := range syms {
		if s.Name == "_IO_default_xsputn" {
			entry = s.Value &^ 1
		}
	}
	file := loadFile(t, libc)
	e, err := file.EHABI.Lookup(entry)
	if entry == 0 || err != nil || e.Start != entry || len(e.Ops) == 0 {
		t.Skipf("%s: _IO_default_xsputn at %#x has no EXIDX program of its own (%v)", libc, entry, err)
	}
	f := newFake(t, arch.ARM)
	const bias = 0x40000000
	f.mods = append(f.mods, &module.Module{Path: "/lib/libc.so.6", Start: bias, End: bias + 1<<24,
		Maps:          []module.Mapping{{Start: bias, End: bias + 1<<24, Path: "/lib/libc.so.6", Perms: "r-xp"}},
		RuntimeOffset: bias, File: file})
	// Two indirect calls in the program: the real caller's, whose return
	// address is in LR, and a stale one in the caller's frame, where the
	// popped LR would come from.
	const caller, stale = codeBase + 0x100, codeBase + 0x200
	f.insn16(caller, 0x4798) // blx r3
	f.insn16(stale, 0x4798)
	sp := uint64(stackBase + 0x1000)
	f.word(sp+7*4, (stale+2)|1)
	r := f.unwind(bias+entry, regsOf(map[int]uint64{13: sp, 14: (caller + 2) | 1}), Options{Thumb: true, NoScan: true})
	logFrames(t, r)
	if len(r.Frames) < 2 || r.Frames[1].PC != caller+2 || r.Frames[1].Method == MethodEHABI {
		t.Errorf("frame 1 is not the caller %#x from LR (stop %s: %s)", caller+2, r.Stop, r.Detail)
	}
}
