package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	osexec "os/exec"
	"strconv"
	"strings"
	"testing"
)

var x86Regs = map[string]uint64{"rax": 0, "rdx": 1, "rcx": 2, "rbx": 3, "rsi": 4, "rdi": 5, "rbp": 6, "rsp": 7}

// regNum maps readelf's register names to DWARF numbers.
func regNum(name string, m elf.Machine, ra uint64) (uint64, bool) {
	if name == "ra" {
		return ra, true
	}
	if n, ok := x86Regs[name]; ok && m == elf.EM_X86_64 {
		return n, true
	}
	if m == elf.EM_AARCH64 && name == "sp" {
		return 31, true
	}
	if len(name) > 1 && (name[0] == 'r' || name[0] == 'x') {
		if n, err := strconv.ParseUint(name[1:], 10, 8); err == nil {
			return n, true
		}
	}
	return 0, false
}

// TestMatchesReadelf runs every FDE of real libraries through Row and
// compares each row with readelf's own interpretation (readelf -wF):
// the CFA rule and every register column, at every location.
func TestMatchesReadelf(t *testing.T) {
	if _, err := osexec.LookPath("readelf"); err != nil {
		t.Skip("readelf not installed")
	}
	for _, lib := range []string{
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/usr/aarch64-linux-gnu/lib/libc.so.6",
		"/usr/aarch64-linux-gnu/lib/libstdc++.so.6",
		"/usr/riscv64-linux-gnu/lib/libc.so.6",
	} {
		t.Run(lib, func(t *testing.T) { compareReadelf(t, lib) })
	}
}

func compareReadelf(t *testing.T, lib string) {
	ef, err := elf.Open(lib)
	if err != nil {
		t.Skip(err)
	}
	defer ef.Close()
	eh, hdr := ef.Section(".eh_frame"), ef.Section(".eh_frame_hdr")
	if eh == nil || hdr == nil {
		t.Skip("no .eh_frame/.eh_frame_hdr")
	}
	ehData, _ := eh.Data()
	hdrData, _ := hdr.Data()
	a := Arch{PtrSize: 8, Order: ef.ByteOrder, AArch64: ef.Machine == elf.EM_AARCH64}
	if ef.Class == elf.ELFCLASS32 {
		a.PtrSize = 4
	}
	tab, err := NewEHFrame(ehData, eh.Addr, hdrData, hdr.Addr, a)
	if err != nil {
		t.Fatal(err)
	}
	// readelf exits 1 over warnings about other sections: its table is
	// still whole.
	out, err := osexec.Command("readelf", "-wF", lib).Output()
	if len(out) == 0 {
		t.Fatal(err)
	}
	var (
		fde        *FDE
		cols       []string
		nFDE, nRow int
		bad        int
		raCol      uint64 = 16
	)
	if ef.Machine == elf.EM_AARCH64 {
		raCol = 30
	} else if ef.Machine == elf.EM_RISCV {
		raCol = 1
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) >= 4 && f[3] == "FDE":
			var lo uint64
			for _, x := range f {
				if strings.HasPrefix(x, "pc=") {
					lo, _ = strconv.ParseUint(strings.SplitN(x[3:], "..", 2)[0], 16, 64)
				}
			}
			fde, err = tab.Lookup(lo)
			if err != nil || fde.Start != lo {
				t.Errorf("FDE at pc %#x: lookup gave %v, %v", lo, fde, err)
				fde = nil
				continue
			}
			nFDE++
		case len(f) >= 4 && f[3] == "CIE", len(f) >= 2 && f[1] == "ZERO":
			fde = nil
		case len(f) >= 2 && f[0] == "LOC" && f[1] == "CFA":
			cols = f[2:]
		case fde != nil && len(f) >= 2 && len(f) == len(cols)+2:
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			row, err := tab.Row(fde, loc)
			if err != nil {
				t.Errorf("%#x: %v", loc, err)
				bad++
				continue
			}
			nRow++
			if msg := checkCFA(row.CFA, f[1], ef.Machine, raCol); msg != "" {
				bad++
				if bad < 20 {
					t.Errorf("FDE %#x loc %#x: CFA %s", fde.Start, loc, msg)
				}
			}
			for i, c := range cols {
				n, ok := regNum(c, ef.Machine, raCol)
				if !ok {
					continue
				}
				if msg := checkReg(row.Regs[n], f[2+i], ef.Machine, raCol); msg != "" {
					bad++
					if bad < 20 {
						t.Errorf("FDE %#x loc %#x: %s %s", fde.Start, loc, c, msg)
					}
				}
			}
		}
	}
	t.Logf("%s: %d FDEs, %d rows compared, %d differences", lib, nFDE, nRow, bad)
	if nFDE < 100 {
		t.Errorf("only %d FDEs compared", nFDE)
	}
}

func checkCFA(r Rule, want string, m elf.Machine, ra uint64) string {
	if want == "exp" {
		if r.Kind != RuleCFAExpression {
			return "want expression, got " + r.Kind.String()
		}
		return ""
	}
	i := strings.IndexAny(want, "+-")
	if i < 0 {
		return ""
	}
	reg, ok := regNum(want[:i], m, ra)
	off, err := strconv.ParseInt(want[i:], 10, 64)
	if !ok || err != nil {
		return ""
	}
	if r.Kind != RuleCFARegOffset || r.Reg != reg || r.Offset != off {
		return "got " + r.Kind.String() + " r" + strconv.FormatUint(r.Reg, 10) + "+" + strconv.FormatInt(r.Offset, 10) + ", want " + want
	}
	return ""
}

func checkReg(r Rule, want string, m elf.Machine, ra uint64) string {
	ok := true
	switch {
	case want == "u":
		ok = r.Kind == RuleUnset || r.Kind == RuleUndefined
	case want == "s":
		ok = r.Kind == RuleSameValue || r.Kind == RuleUnset
	case want == "exp":
		ok = r.Kind == RuleExpression
	case want == "vexp":
		ok = r.Kind == RuleValExpression
	case strings.HasPrefix(want, "c"):
		off, _ := strconv.ParseInt(want[1:], 10, 64)
		ok = r.Kind == RuleOffset && r.Offset == off
	case strings.HasPrefix(want, "v"):
		off, _ := strconv.ParseInt(want[1:], 10, 64)
		ok = r.Kind == RuleValOffset && r.Offset == off
	default:
		if n, isReg := regNum(want, m, ra); isReg {
			ok = r.Kind == RuleRegister && r.Reg == n
		}
	}
	if !ok {
		return "got " + r.Kind.String() + " " + strconv.FormatInt(r.Offset, 10) + ", want " + want
	}
	return ""
}
