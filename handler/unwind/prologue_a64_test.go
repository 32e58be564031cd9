package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/unwind/prologue"
	"github.com/unwound-dev/unwound/testkit/testutil"
)

// The AArch64 prologue analyzer against the compiler's own tables: a
// static program built with CFI, GCC's -O0, -O2 and -O2
// -fomit-frame-pointer, with glibc's objects linked in. At every
// instruction of every function (its first 512 bytes), where the CFI row
// computes the CFA from SP, the analyzer must give the same frame size,
// and the same slots for x29 and x30, or say it cannot (a wrong start, a
// dynamic frame). A disagreement is a frame the prologue strategy would
// get wrong.
func TestAArch64PrologueAgreesWithCFI(t *testing.T) {
	const cc = "aarch64-linux-gnu-gcc"
	testutil.Need(t, cc)
	src := filepath.Join("..", "..", "testdata", "crash", "crash.c")
	for _, flags := range [][]string{{"-O0"}, {"-O2"}, {"-O2", "-fomit-frame-pointer"}} {
		t.Run(flags[len(flags)-1], func(t *testing.T) {
			exe := filepath.Join(t.TempDir(), "crash")
			args := append(append([]string{}, flags...), "-g", "-static", "-pthread", "-fasynchronous-unwind-tables", "-o", exe, src)
			testutil.Run(t, cc, args...)
			syms := symbols(t, exe)
			f := loadFile(t, exe)
			if f.EHFrame == nil {
				t.Fatal("load: no eh_frame")
			}
			var agree, disagree, declined int
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size < 8 || s.Value == 0 {
					continue
				}
				n := min(s.Size, 512)
				code := make([]byte, n)
				if f.ReadCode(s.Value, code) != nil {
					continue
				}
				for pc := s.Value; pc < s.Value+n; pc += 4 {
					fde, err := f.EHFrame.Lookup(pc)
					if err != nil {
						continue
					}
					row, err := f.EHFrame.Row(fde, pc)
					if err != nil || row.CFA.Kind != cfi.RuleCFARegOffset || row.CFA.Reg != 31 {
						continue
					}
					fr, err := prologue.AArch64(code[:pc-s.Value], s.Value, pc)
					if errors.Is(err, prologue.ErrNoPrologue) {
						fr = &prologue.Frame{Saved: map[int]int64{}}
					} else if err != nil {
						declined++
						continue
					}
					ok := fr.Size == uint64(row.CFA.Offset) && !fr.Dynamic
					for _, reg := range []int{29, 30} {
						rule := row.Regs[reg]
						off, saved := fr.Saved[reg]
						switch {
						case rule.Kind == cfi.RuleOffset && !saved && reloadsA64(code[:pc-s.Value], reg):
							// Reloaded from its slot before the PC: the
							// register holds the caller's value again, as
							// the slot does; GCC's CFI says so later.
						case rule.Kind == cfi.RuleOffset:
							ok = ok && saved && off == rule.Offset
						case rule.Kind == cfi.RuleUnset || rule.Kind == cfi.RuleSameValue:
							ok = ok && !saved
						}
					}
					if ok {
						agree++
						continue
					}
					disagree++
					if disagree <= 5 {
						t.Logf("%s+%#x: prologue size %d saved %v, CFI CFA sp+%d x29 %+v x30 %+v", s.Name, pc-s.Value, fr.Size, fr.Saved, row.CFA.Offset, row.Regs[29], row.Regs[30])
					}
				}
			}
			total := agree + disagree
			t.Logf("%v: %d instructions agree with CFI, %d disagree (%.2f%%), %d declined", flags, agree, disagree, 100*float64(disagree)/float64(max(1, total)), declined)
			if total == 0 || disagree*200 > total {
				t.Errorf("more than 0.5%% of instructions disagree with the CFI")
			}
		})
	}
}

// reloadsA64 reports whether code loads reg from the stack (ldr, ldp).
func reloadsA64(code []byte, reg int) bool {
	for i := 0; i+4 <= len(code); i += 4 {
		w := binary.LittleEndian.Uint32(code[i:])
		if w&0x3e0 != 0x3e0 {
			continue
		}
		pair := w&0xffc00000 == 0xa9400000 || w&0xffc00000 == 0xa8c00000
		single := w&0xffc00000 == 0xf9400000 || w&0xffe00c00 == 0xf8400400
		if (pair || single) && int(w&0x1f) == reg || pair && int(w>>10&0x1f) == reg {
			return true
		}
	}
	return false
}
