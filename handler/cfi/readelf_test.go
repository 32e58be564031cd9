package cfi

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

// This file compares the tables against binutils' readelf
// --debug-dump=frames-interp on real binaries.

// readelfRegNames maps binutils' register names (dwarf.c
// dwarf_regnames_x86_64 / dwarf_regnames_aarch64) to DWARF numbers.
func readelfRegNames(m elf.Machine) map[string]uint64 {
	names := map[string]uint64{}
	switch m {
	case elf.EM_X86_64:
		for i, n := range []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"} {
			names[n] = uint64(i)
		}
		for i := 8; i < 16; i++ {
			names[fmt.Sprintf("r%d", i)] = uint64(i)
		}
		names["rip"] = 16
		for i := 0; i < 16; i++ {
			names[fmt.Sprintf("xmm%d", i)] = uint64(17 + i)
		}
		for i := 0; i < 8; i++ {
			names[fmt.Sprintf("st%d", i)] = uint64(33 + i)
			names[fmt.Sprintf("mm%d", i)] = uint64(41 + i)
		}
		names["rflags"] = 49
		for i, n := range []string{"es", "cs", "ss", "ds", "fs", "gs"} {
			names[n] = uint64(50 + i)
		}
		names["fs.base"], names["gs.base"] = 58, 59
	case elf.EM_AARCH64:
		for i := 0; i < 31; i++ {
			names[fmt.Sprintf("x%d", i)] = uint64(i)
		}
		names["sp"], names["elr"], names["vg"], names["ffr"] = 31, 33, 46, 47
		for i := 0; i < 16; i++ {
			names[fmt.Sprintf("p%d", i)] = uint64(48 + i)
		}
		for i := 0; i < 32; i++ {
			names[fmt.Sprintf("v%d", i)] = uint64(64 + i)
		}
	}
	return names
}

type reRow struct {
	loc  uint64
	cfa  string
	cols []string
}

type reEntry struct {
	off        uint64
	cie        bool
	cieOff     uint64
	ra         uint64 // CIE's return address column
	start, end uint64
	regs       []string // column names after CFA
	rows       []reRow
}

var (
	reEntryLine = regexp.MustCompile(`^([0-9a-f]{8,16}) ([0-9a-f]{8,16}) ([0-9a-f]{8,16}) (CIE|FDE)(.*)$`)
	reFDETail   = regexp.MustCompile(`cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	reCIERA     = regexp.MustCompile(`ra=(\d+)`)
	reRowLine   = regexp.MustCompile(`^([0-9a-f]{8,16}) +(\S+)((?: +\S+)*) *$`)
)

// parseFramesInterp parses the first .eh_frame section of readelf -wF
// output into its entries.
func parseFramesInterp(out []byte) ([]*reEntry, error) {
	var entries []*reEntry
	var cur *reEntry
	in := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the ") {
			if in {
				break // only the first section
			}
			in = strings.Contains(line, ".eh_frame")
			continue
		}
		if !in {
			continue
		}
		if m := reEntryLine.FindStringSubmatch(line); m != nil {
			off, _ := strconv.ParseUint(m[1], 16, 64)
			cur = &reEntry{off: off, cie: m[4] == "CIE"}
			if cur.cie {
				if ra := reCIERA.FindStringSubmatch(m[5]); ra != nil {
					cur.ra, _ = strconv.ParseUint(ra[1], 10, 64)
				}
			} else {
				f := reFDETail.FindStringSubmatch(m[5])
				if f == nil {
					return nil, fmt.Errorf("bad FDE line %q", line)
				}
				cur.cieOff, _ = strconv.ParseUint(f[1], 16, 64)
				cur.start, _ = strconv.ParseUint(f[2], 16, 64)
				cur.end, _ = strconv.ParseUint(f[3], 16, 64)
			}
			entries = append(entries, cur)
			continue
		}
		if strings.HasSuffix(line, "ZERO terminator") {
			cur = nil
			continue
		}
		if cur == nil {
			continue
		}
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "LOC") {
			f := strings.Fields(t)
			if len(f) < 2 || f[1] != "CFA" {
				return nil, fmt.Errorf("bad header %q", line)
			}
			cur.regs = f[2:]
			continue
		}
		if m := reRowLine.FindStringSubmatch(line); m != nil && cur.regs != nil {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			cols := rowFields(m[3])
			if len(cols) != len(cur.regs) {
				return nil, fmt.Errorf("entry %#x: row %q has %d columns, header %d", cur.off, line, len(cols), len(cur.regs))
			}
			cur.rows = append(cur.rows, reRow{loc, m[2], cols})
		}
	}
	return entries, sc.Err()
}

// rowFields splits a row's columns. A register rule prints as "r1 (rdx)",
// with a space, so a "(name)" token joins the one before it.
func rowFields(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "(") && len(out) > 0 {
			out[len(out)-1] += " " + f
			continue
		}
		out = append(out, f)
	}
	return out
}

// splitRegOff splits "rsp+8" / "x29-16" / "c-8".
func splitRegOff(s string) (string, int64, bool) {
	i := strings.LastIndexAny(s, "+-")
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseInt(s[i:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return s[:i], n, true
}

type comparer struct {
	names map[string]uint64
	ra    uint64
}

func (c *comparer) reg(name string) (uint64, bool) {
	if name == "ra" {
		return c.ra, true
	}
	if n, ok := c.names[name]; ok {
		return n, true
	}
	if strings.HasPrefix(name, "r") {
		if n, err := strconv.ParseUint(name[1:], 10, 64); err == nil {
			return n, true
		}
	}
	return 0, false
}

func (c *comparer) cfa(r Rule, s string) error {
	if s == "exp" {
		if r.Kind != RuleCFAExpression {
			return fmt.Errorf("CFA %v, readelf exp", r.Kind)
		}
		return nil
	}
	name, off, ok := splitRegOff(s)
	reg, ok2 := c.reg(name)
	if !ok || !ok2 {
		return fmt.Errorf("cannot parse CFA %q", s)
	}
	if r.Kind != RuleCFARegOffset || r.Reg != reg || r.Offset != off {
		return fmt.Errorf("CFA %v r%d%+d, readelf %s", r.Kind, r.Reg, r.Offset, s)
	}
	return nil
}

func (c *comparer) rule(r Rule, s string) error {
	bad := func() error { return fmt.Errorf("rule %v (reg %d, off %d), readelf %q", r.Kind, r.Reg, r.Offset, s) }
	switch s {
	case "u":
		// readelf shows both "no rule yet" and DW_CFA_undefined as u.
		if r.Kind != RuleUnset && r.Kind != RuleUndefined {
			return bad()
		}
	case "s":
		if r.Kind != RuleSameValue {
			return bad()
		}
	case "exp":
		if r.Kind != RuleExpression {
			return bad()
		}
	case "vexp":
		if r.Kind != RuleValExpression {
			return bad()
		}
	default:
		if s[0] == 'c' || s[0] == 'v' {
			if _, off, ok := splitRegOff(s); ok && (s[1] == '+' || s[1] == '-') {
				want := RuleOffset
				if s[0] == 'v' {
					want = RuleValOffset
				}
				if r.Kind != want || r.Offset != off {
					return bad()
				}
				return nil
			}
		}
		name := s
		if i := strings.Index(s, " ("); i > 0 {
			name = s[:i] // "r1 (rdx)": the number
		}
		reg, ok := c.reg(name)
		if !ok {
			return fmt.Errorf("cannot parse rule %q", s)
		}
		if r.Kind != RuleRegister || r.Reg != reg {
			return bad()
		}
	}
	return nil
}

// compareRow checks a Row against one readelf row.
func (c *comparer) compareRow(row *Row, hdr []string, rr reRow) error {
	if err := c.cfa(row.CFA, rr.cfa); err != nil {
		return err
	}
	shown := map[uint64]bool{}
	for i, name := range hdr {
		reg, ok := c.reg(name)
		if !ok {
			return fmt.Errorf("unknown register column %q", name)
		}
		shown[reg] = true
		if reg >= regs.Max {
			continue
		}
		if err := c.rule(row.Regs[reg], rr.cols[i]); err != nil {
			return fmt.Errorf("%s: %v", name, err)
		}
	}
	for n := range row.Regs {
		if !shown[uint64(n)] && row.Regs[n].Kind != RuleUnset {
			return fmt.Errorf("register %d has rule %v, readelf shows no column", n, row.Regs[n].Kind)
		}
	}
	return nil
}

type elfTables struct {
	withHdr, linear *Table
	machine         elf.Machine
	arch            Arch
}

func loadELF(t testing.TB, path string) *elfTables {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	eh := f.Section(".eh_frame")
	if eh == nil {
		t.Skipf("%s: no .eh_frame", path)
	}
	data, err := eh.Data()
	if err != nil {
		t.Fatal(err)
	}
	var hdr []byte
	var hdrAddr uint64
	if h := f.Section(".eh_frame_hdr"); h != nil {
		if hdr, err = h.Data(); err != nil {
			t.Fatal(err)
		}
		hdrAddr = h.Addr
	}
	a := Arch{PtrSize: 8, Order: f.ByteOrder, AArch64: f.Machine == elf.EM_AARCH64}
	if f.Class == elf.ELFCLASS32 {
		a.PtrSize = 4
	}
	withHdr, err := NewEHFrame(data, eh.Addr, hdr, hdrAddr, a)
	if err != nil {
		t.Fatal(err)
	}
	if hdr != nil && withHdr.hdr == nil {
		t.Fatalf("%s: .eh_frame_hdr rejected", path)
	}
	linear, err := NewEHFrame(data, eh.Addr, nil, 0, a)
	if err != nil {
		t.Fatal(err)
	}
	return &elfTables{withHdr, linear, f.Machine, a}
}

func readelfOut(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := osexec.LookPath("readelf"); err != nil {
		t.Skip("no readelf")
	}
	out, err := osexec.Command("readelf", args...).Output()
	if err != nil {
		t.Fatalf("readelf %v: %v", args, err)
	}
	return out
}

type compareStats struct {
	fdes, fdesMatched, rows, rowsMatched, rowsOutside, lookups, lookupsMatched int
}

// compareWithReadelf checks every FDE's range, its lookup through both
// indexes, and each row readelf lists, at its first and its last address.
func compareWithReadelf(t *testing.T, path string) compareStats {
	tabs := loadELF(t, path)
	entries, err := parseFramesInterp(readelfOut(t, "--debug-dump=frames-interp,no-follow-links", path))
	if err != nil {
		t.Fatal(err)
	}
	var st compareStats
	cies := map[uint64]*reEntry{}
	for _, e := range entries {
		if e.cie {
			cies[e.off] = e
		}
	}
	all, err := tabs.linear.All()
	if err != nil {
		t.Errorf("All: %v", err)
	}
	byOff := map[uint64]*FDE{}
	for _, f := range all {
		byOff[f.Off] = f
	}
	names := readelfRegNames(tabs.machine)
	const maxErrs = 20
	nerr := 0
	fail := func(format string, args ...any) {
		nerr++
		if nerr <= maxErrs {
			t.Errorf(format, args...)
		}
	}
	for _, e := range entries {
		if e.cie {
			continue
		}
		if e.end == e.start {
			continue // empty FDEs are not indexed
		}
		st.fdes++
		f := byOff[e.off]
		if f == nil {
			fail("FDE %#x [%#x,%#x): not found", e.off, e.start, e.end)
			continue
		}
		if f.Start != e.start || f.End != e.end || f.CIE.Off != e.cieOff {
			fail("FDE %#x: [%#x,%#x) cie %#x, readelf [%#x,%#x) cie %#x", e.off, f.Start, f.End, f.CIE.Off, e.start, e.end, e.cieOff)
			continue
		}
		st.fdesMatched++
		for _, pc := range []uint64{e.start, e.end - 1} {
			st.lookups++
			g1, err1 := tabs.withHdr.Lookup(pc)
			g2, err2 := tabs.linear.Lookup(pc)
			if err1 != nil || err2 != nil || g1.Off != e.off || g2.Off != e.off {
				fail("Lookup(%#x): hdr %v %v, linear %v %v, want FDE %#x", pc, g1, err1, g2, err2, e.off)
				continue
			}
			st.lookupsMatched++
		}
		cie := cies[e.cieOff]
		if cie == nil {
			fail("FDE %#x: readelf CIE %#x missing", e.off, e.cieOff)
			continue
		}
		c := &comparer{names: names, ra: cie.ra}
		hdr, rows := e.regs, e.rows
		if rows == nil {
			// No instructions: readelf prints no table; the CIE's row
			// applies to the whole FDE.
			hdr = cie.regs
			for _, r := range cie.rows {
				r.loc = e.start
				rows = append(rows, r)
			}
		}
		for i, rr := range rows {
			last := e.end - 1
			if i+1 < len(rows) {
				if rows[i+1].loc == rr.loc {
					continue // superseded at the same address
				}
				last = rows[i+1].loc - 1
			}
			if rr.loc < e.start || rr.loc >= e.end {
				st.rowsOutside++
				continue
			}
			st.rows++
			ok := true
			for _, pc := range []uint64{rr.loc, last} {
				row, err := tabs.withHdr.Row(f, pc)
				if err == nil {
					err = c.compareRow(row, hdr, rr)
				}
				if err != nil {
					fail("FDE %#x pc %#x (readelf row %#x): %v", e.off, pc, rr.loc, err)
					ok = false
					break
				}
			}
			if ok {
				st.rowsMatched++
			}
		}
	}
	if len(all) != st.fdes {
		t.Errorf("All returned %d FDEs, readelf lists %d non-empty", len(all), st.fdes)
	}
	t.Logf("%s: FDEs %d/%d matched, lookups %d/%d, rows %d/%d matched (%d rows outside their FDE skipped)",
		path, st.fdesMatched, st.fdes, st.lookupsMatched, st.lookups, st.rowsMatched, st.rows, st.rowsOutside)
	if st.fdes == 0 || st.rows == 0 {
		t.Error("nothing compared")
	}
	return st
}

const (
	libcX86   = "/lib/x86_64-linux-gnu/libc.so.6"
	libcARM64 = "/usr/aarch64-linux-gnu/lib/libc.so.6"
)

func TestReadelfLibc(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for name, p := range map[string]string{"x86_64": libcX86, "aarch64": libcARM64} {
		p := p
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(p); err != nil {
				t.Skipf("%s: %v", p, err)
			}
			compareWithReadelf(t, p)
		})
	}
}

// TestReadelfPACRet builds an AArch64 program with -mbranch-protection=
// pac-ret, compares its tables with readelf, and checks the RA signing
// state against readelf's raw DW_CFA_AARCH64_negate_ra_state listing.
func TestReadelfPACRet(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	cc, err := osexec.LookPath("aarch64-linux-gnu-gcc")
	if err != nil {
		t.Skip("no aarch64-linux-gnu-gcc")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "pac.c")
	bin := filepath.Join(dir, "pac")
	// Non-leaf functions save LR and so sign it; the early-return path in
	// pick() makes GCC emit remember_state/restore_state around it.
	const prog = `#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { return x * 3; }
__attribute__((noinline)) int mid(int x) {
	int a[8];
	for (int i = 0; i < 8; i++) a[i] = leaf(x + i);
	return a[x & 7] + printf("%d\n", a[1]);
}
__attribute__((noinline)) int pick(int x) {
	if (x > 100) return x;
	return mid(x) + printf("%d\n", x);
}
int main(int argc, char **argv) { return pick(argc) + mid(argc); }
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := osexec.Command(cc, "-O2", "-mbranch-protection=pac-ret", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("%s: %v\n%s", cc, err, out)
	}
	compareWithReadelf(t, bin)

	tabs := loadELF(t, bin)
	raw := readelfOut(t, "--debug-dump=frames,no-follow-links", bin)
	var (
		fde     *FDE
		loc     uint64
		signed  bool
		stack   []bool
		want    = map[uint64]bool{}
		checked int
		nSigned int
	)
	flush := func() {
		if fde == nil {
			return
		}
		want[loc] = signed
		for pc, s := range want {
			if pc < fde.Start || pc >= fde.End {
				continue
			}
			row, err := tabs.withHdr.Row(fde, pc)
			if err != nil {
				t.Errorf("Row(%#x): %v", pc, err)
				continue
			}
			checked++
			if s {
				nSigned++
			}
			if row.RASigned != s {
				t.Errorf("FDE %#x pc %#x: RASigned %v, readelf's negate_ra_state sequence says %v", fde.Off, pc, row.RASigned, s)
			}
		}
	}
	reTo := regexp.MustCompile(` to ([0-9a-f]+)$`)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if m := reEntryLine.FindStringSubmatch(line); m != nil || strings.Contains(line, "ZERO terminator") {
			flush()
			fde, want, signed, stack = nil, map[uint64]bool{}, false, nil
			if m != nil && m[4] == "FDE" {
				off, _ := strconv.ParseUint(m[1], 16, 64)
				f, err := tabs.withHdr.fdeAt(off)
				if err != nil {
					t.Fatalf("FDE %#x: %v", off, err)
				}
				fde, loc = f, f.Start
			}
			continue
		}
		if fde == nil {
			continue
		}
		ins := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(ins, "DW_CFA_advance_loc"), strings.HasPrefix(ins, "DW_CFA_set_loc"):
			m := reTo.FindStringSubmatch(ins)
			if m == nil {
				t.Fatalf("cannot parse %q", ins)
			}
			want[loc] = signed
			loc, _ = strconv.ParseUint(m[1], 16, 64)
		case ins == "DW_CFA_AARCH64_negate_ra_state":
			signed = !signed
		case ins == "DW_CFA_remember_state":
			stack = append(stack, signed)
		case ins == "DW_CFA_restore_state":
			if len(stack) > 0 {
				signed, stack = stack[len(stack)-1], stack[:len(stack)-1]
			}
		}
	}
	flush()
	t.Logf("pac-ret: RA signing state matched at %d locations (%d signed)", checked, nSigned)
	if nSigned == 0 {
		t.Error("no location with a signed RA: was pac-ret applied?")
	}
}
