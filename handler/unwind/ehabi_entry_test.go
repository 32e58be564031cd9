package unwind

import (
	"debug/elf"
	"testing"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// TestEHABIOutsideTheBody: an entry's EXIDX program undoes the whole
// prologue, so it holds only where that has run and no epilogue has begun
// to give it back. A PC interrupted elsewhere (a random stop of Debian's
// armhf busybox landed on glibc's _IO_default_xsputn's first instruction,
// whose program pops {r4-r10, lr}) would take the caller's words for saved
// registers and for the return address, at high trust. glibc's own
// libc.so.6 of the cross sysroot gives the tables and the code:
// _IO_default_xsputn begins with one push; posix_spawn is
//
//	push {r4, lr}; sub sp, #16; ...; bl __spawni; add sp, #16; pop {r4, pc}
//
// and its program is vsp += 16; pop {r4, r14}.
func TestEHABIOutsideTheBody(t *testing.T) {
	const libc = "/usr/arm-linux-gnueabihf/lib/libc.so.6"
	ef, err := elf.Open(libc)
	if err != nil {
		t.Skipf("%s: %v (libc6-armhf-cross)", libc, err)
	}
	syms, _ := ef.DynamicSymbols()
	ef.Close()
	start := map[string]uint64{}
	for _, s := range syms {
		start[s.Name] = s.Value &^ 1
	}
	file := loadFile(t, libc)
	const bias = 0x40000000
	// Two indirect calls in the program: the real caller's and a stale
	// one, in the caller's frame where a wrongly popped LR would come
	// from.
	const caller, stale = codeBase + 0x100, codeBase + 0x200
	sp := uint64(stackBase + 0x1000)
	for _, tc := range []struct {
		name, fn string
		off      uint64            // of the PC from the function's start
		regs     map[int]uint64    // beyond SP
		stack    map[uint64]uint64 // words above SP
		method   string            // frame 1's: anything but EHABI
	}{
		{"entry", "_IO_default_xsputn", 0, map[int]uint64{14: (caller + 2) | 1},
			map[uint64]uint64{7 * 4: (stale + 2) | 1}, MethodLR},
		{"after the push, before sub sp", "posix_spawn", 2, map[int]uint64{14: (caller + 2) | 1},
			map[uint64]uint64{4: (caller + 2) | 1, 6 * 4: (stale + 2) | 1}, MethodPrologue},
		{"after add sp, at the pop", "posix_spawn", 0x16, nil,
			map[uint64]uint64{4: (caller + 2) | 1, 6 * 4: (stale + 2) | 1}, MethodPrologue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entry := start[tc.fn]
			e, err := file.EHABI.Lookup(entry)
			if entry == 0 || err != nil || e.Start != entry || len(e.Ops) == 0 {
				t.Skipf("%s: %s at %#x has no EXIDX program of its own (%v)", libc, tc.fn, entry, err)
			}
			f := newFake(t, arch.ARM)
			f.mods = append(f.mods, &module.Module{Path: "/lib/libc.so.6", Start: bias, End: bias + 1<<24,
				Maps:          []module.Mapping{{Start: bias, End: bias + 1<<24, Path: "/lib/libc.so.6", Perms: "r-xp"}},
				RuntimeOffset: bias, File: file})
			f.insn16(caller, 0x4798) // blx r3
			f.insn16(stale, 0x4798)
			for off, v := range tc.stack {
				f.word(sp+off, v)
			}
			regs := map[int]uint64{13: sp}
			for r, v := range tc.regs {
				regs[r] = v
			}
			r := f.unwind(bias+entry+tc.off, regsOf(regs), Options{Thumb: true, NoScan: true})
			logFrames(t, r)
			if len(r.Frames) < 2 || r.Frames[1].PC != caller+2 || r.Frames[1].Method != tc.method {
				t.Errorf("frame 1 is not the caller %#x by %s (stop %s: %s)", caller+2, tc.method, r.Stop, r.Detail)
			}
		})
	}
}
