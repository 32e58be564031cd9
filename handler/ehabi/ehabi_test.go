package ehabi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

var le = binary.LittleEndian

// stack is a fake stack: word i at base+4i holds base+4i+1000.
type stack struct{ base uint32 }

func (s stack) ReadAt(p []byte, off int64) (int, error) {
	if uint32(off) < s.base || uint32(off) > s.base+0x10000 {
		return 0, errors.New("not mapped")
	}
	for i := 0; i < len(p); i += 4 {
		le.PutUint32(p[i:], uint32(off)+uint32(i)+1000)
	}
	return len(p), nil
}

func run(t *testing.T, ops []byte) (State, error) {
	t.Helper()
	var s State
	for r := range s.R {
		s.R[r] = uint32(0x100 * r)
	}
	s.R[13] = 0x8000
	s.Valid = 0xffff
	err := Exec(ops, &s, stack{0x8000}, le)
	return s, err
}

// One case per opcode of EHABI §10.3's table.
func TestOpcodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      []byte
		sp, pc   uint32
		regs     map[int]uint32
		finished bool
	}{
		{"vsp += (x<<2)+4", []byte{0x02}, 0x800c, 0xe00, nil, false},
		{"vsp -= (x<<2)+4", []byte{0x04, 0x40}, 0x8010, 0xe00, nil, false},
		{"pop r4-r15 by mask: r4, r14", []byte{0x84, 0x01}, 0x8008, 0x8004 + 1000, map[int]uint32{4: 0x8000 + 1000, 14: 0x8004 + 1000}, false},
		{"pop with pc", []byte{0x88, 0x00}, 0x8004, 0x8000 + 1000, nil, false},
		{"pop sp replaces vsp", []byte{0x82, 0x00}, 0x8000 + 1000, 0xe00, nil, false},
		{"vsp = r[n]", []byte{0x97}, 0x700, 0xe00, nil, false},
		{"pop r4-r[4+nnn]", []byte{0xa1}, 0x8008, 0xe00, map[int]uint32{5: 0x8004 + 1000}, false},
		{"pop r4-r[4+nnn], r14", []byte{0xa9}, 0x800c, 0x8008 + 1000, map[int]uint32{14: 0x8008 + 1000}, false},
		{"finish", []byte{0xb0, 0x02}, 0x8000, 0xe00, nil, true},
		{"pop r0-r3 by mask", []byte{0xb1, 0x05}, 0x8008, 0xe00, map[int]uint32{0: 0x8000 + 1000, 2: 0x8004 + 1000}, false},
		{"vsp += 0x204 + (uleb128<<2)", []byte{0xb2, 0x81, 0x01}, 0x8000 + 0x204 + 129*4, 0xe00, nil, false},
		{"VFP FSTMFDX d[s]-d[s+c]", []byte{0xb3, 0x12}, 0x8000 + 3*8 + 4, 0xe00, nil, false},
		{"VFP FSTMFDX d8-d[8+n]", []byte{0xba}, 0x8000 + 3*8 + 4, 0xe00, nil, false},
		{"iWMMXt wR10-wR[10+n]", []byte{0xc2}, 0x8000 + 3*8, 0xe00, nil, false},
		{"iWMMXt wR[s]-wR[s+c]", []byte{0xc6, 0x21}, 0x8000 + 2*8, 0xe00, nil, false},
		{"iWMMXt wCGR by mask", []byte{0xc7, 0x0b}, 0x8000 + 3*4, 0xe00, nil, false},
		{"VFP FSTMFDD d[16+s]-", []byte{0xc8, 0x03}, 0x8000 + 4*8, 0xe00, nil, false},
		{"VFP FSTMFDD d[s]-", []byte{0xc9, 0x01}, 0x8000 + 2*8, 0xe00, nil, false},
		{"VFP FSTMFDD d8-d[8+n]", []byte{0xd7}, 0x8000 + 8*8, 0xe00, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := run(t, tc.ops)
			if err != nil {
				t.Fatal(err)
			}
			if s.R[13] != tc.sp || s.R[15] != tc.pc || s.Finish != tc.finished {
				t.Errorf("sp %#x pc %#x finish %v, want sp %#x pc %#x finish %v", s.R[13], s.R[15], s.Finish, tc.sp, tc.pc, tc.finished)
			}
			for r, v := range tc.regs {
				if s.R[r] != v {
					t.Errorf("r%d = %#x, want %#x", r, s.R[r], v)
				}
			}
		})
	}
}

func TestOpcodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []byte
		want error
	}{
		{"refuse to unwind", []byte{0x80, 0x00}, ErrRefuse},
		{"reserved vsp = r13", []byte{0x9d}, nil},
		{"reserved vsp = r15", []byte{0x9f}, nil},
		{"spare b1 00", []byte{0xb1, 0x00}, nil},
		{"spare b1 1x", []byte{0xb1, 0x10}, nil},
		{"spare b4", []byte{0xb4}, nil},
		{"spare c7 00", []byte{0xc7, 0x00}, nil},
		{"spare ca", []byte{0xca}, nil},
		{"spare d8", []byte{0xd8}, nil},
		{"spare f0", []byte{0xf0}, nil},
		{"truncated", []byte{0x84}, nil},
		{"unterminated uleb128", []byte{0xb2, 0x80, 0x80, 0x80, 0x80, 0x80}, nil},
		{"stack unreadable", []byte{0x40, 0x40, 0x40, 0x84, 0x01}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.ops)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// exidx builds a table: entries for functions at 0x1000 (inline: pop
// {r4, lr}), 0x1100 (CANTUNWIND), 0x1200 (extab, personality 1 with one
// extra word), 0x1300 (extab, generic personality).
func exidx(t *testing.T) *Table {
	const exidxAddr, extabAddr = 0x8000, 0x9000
	p31 := func(target, at uint64) uint32 { return uint32(int64(target)-int64(at)) & 0x7fffffff }
	var x []byte
	add := func(fn uint64, w uint32) {
		at := exidxAddr + uint64(len(x))
		x = le.AppendUint32(x, p31(fn, at))
		x = le.AppendUint32(x, w)
	}
	add(0x1000, 0x80a8b0b0)
	add(0x1100, 1)
	add(0x1200, p31(extabAddr, exidxAddr+8*2+4))
	add(0x1300, p31(extabAddr+8, exidxAddr+8*3+4))
	var e []byte
	e = le.AppendUint32(e, 0x81_01_a8_02) // personality 1, 1 more word, ops a8 02
	e = le.AppendUint32(e, 0xb0b0b0b0)
	e = le.AppendUint32(e, p31(0x5000, extabAddr+8)) // generic: personality routine
	e = le.AppendUint32(e, 0x00_84_01_b0)            // 0 more words, ops 84 01 b0
	tab, err := New(x, exidxAddr, e, extabAddr, le)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestLookup(t *testing.T) {
	tab := exidx(t)
	for _, tc := range []struct {
		pc   uint64
		ops  []byte
		err  error
		from uint64
	}{
		{0x0fff, nil, ErrNoEntry, 0},
		{0x1000, []byte{0xa8, 0xb0, 0xb0}, nil, 0x1000},
		{0x10ff, []byte{0xa8, 0xb0, 0xb0}, nil, 0x1000},
		{0x1104, nil, ErrCantUnwind, 0x1100},
		{0x1200, []byte{0xa8, 0x02, 0xb0, 0xb0, 0xb0, 0xb0}, nil, 0x1200},
		{0x9999, []byte{0x84, 0x01, 0xb0}, nil, 0x1300}, // open-ended: the last entry covers the rest
	} {
		e, err := tab.Lookup(tc.pc)
		if !errors.Is(err, tc.err) || (err == nil && (string(e.Ops) != string(tc.ops) || e.Start != tc.from)) {
			t.Errorf("pc %#x: %+v %v, want ops % x from %#x err %v", tc.pc, e, err, tc.ops, tc.from, tc.err)
		}
	}
}

// Every entry of real ARM libraries decodes, and agrees with readelf's own
// decoding of .ARM.exidx (readelf -u) on which functions are CANTUNWIND.
func TestRealLibraries(t *testing.T) {
	for _, lib := range []string{"/usr/arm-linux-gnueabihf/lib/libc.so.6", "/usr/arm-linux-gnueabihf/lib/libstdc++.so.6"} {
		ef, err := elf.Open(lib)
		if err != nil {
			t.Skip(err)
		}
		x, xt := ef.Section(".ARM.exidx"), ef.Section(".ARM.extab")
		xd, _ := x.Data()
		var td []byte
		var taddr uint64
		if xt != nil {
			td, _ = xt.Data()
			taddr = xt.Addr
		}
		tab, err := New(xd, x.Addr, td, taddr, le)
		if err != nil {
			t.Fatal(err)
		}
		cant := map[uint64]bool{}
		n, bad := 0, 0
		for i := 0; i < tab.n; i++ {
			e, err := tab.Lookup(tab.fn(i))
			switch {
			case errors.Is(err, ErrCantUnwind):
				cant[e.Start] = true
			case err != nil:
				bad++
				t.Logf("%s: entry %d at %#x: %v", lib, i, tab.fn(i), err)
			default:
				var s State
				for r := range s.R {
					s.R[r] = 0x8000 // vsp = r[n] must land on the stack too
				}
				s.Valid = 0xffff
				if err := Exec(e.Ops, &s, stack{0x8000 - 0x1000}, le); err != nil && !errors.Is(err, ErrRefuse) {
					bad++
					t.Logf("%s: %#x ops % x: %v", lib, e.Start, e.Ops, err)
				}
			}
			n++
		}
		ef.Close()
		out, err := exec.Command("readelf", "-u", lib).Output()
		if err != nil {
			t.Skip("readelf -u:", err)
		}
		// readelf -u prints each entry as "0xFN: word" and then its
		// opcodes, one per line, as "0xNN [0xNN] meaning".
		got := map[uint64][]byte{}
		for i := 0; i < tab.n; i++ {
			if e, err := tab.Lookup(tab.fn(i)); err == nil {
				got[e.Start] = e.Ops
			}
		}
		var fn uint64
		want := map[uint64][]byte{}
		readelfCant := 0
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "0x") {
				f := strings.Fields(l)
				fn, _ = strconv.ParseUint(strings.TrimSuffix(f[0], ":"), 0, 64)
				if strings.Contains(l, "[cantunwind]") {
					readelfCant++
					if !cant[fn] {
						t.Errorf("%s: %#x: readelf says cantunwind", lib, fn)
					}
				}
				continue
			}
			f := strings.Fields(l)
			for _, tok := range f {
				if len(tok) != 4 || !strings.HasPrefix(tok, "0x") {
					break
				}
				b, err := strconv.ParseUint(tok, 0, 8)
				if err != nil {
					break
				}
				want[fn] = append(want[fn], byte(b))
			}
		}
		same := 0
		for f, w := range want {
			if string(got[f]) == string(w) {
				same++
			} else if len(got[f]) > 0 {
				t.Errorf("%s: %#x: ops % x, readelf % x", lib, f, got[f], w)
			}
		}
		t.Logf("%s: %d entries, %d bad, %d CANTUNWIND (readelf %d), %d of %d opcode programs equal readelf's", lib, n, bad, len(cant), readelfCant, same, len(want))
		if bad > 0 || readelfCant != len(cant) || same != len(want) {
			t.Errorf("%s: %d failed, cantunwind %d vs %d, %d/%d programs equal", lib, bad, len(cant), readelfCant, same, len(want))
		}
	}
}

func FuzzExec(f *testing.F) {
	f.Add([]byte{0x84, 0x01, 0xb0})
	f.Add([]byte{0xb2, 0x81, 0x01, 0xa9})
	f.Add([]byte{0xc7, 0x0b, 0xd7, 0xb3, 0x12})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s State
		s.R[13], s.Valid = 0x8000, 0xffff
		Exec(ops, &s, stack{0x8000}, le)
	})
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0}, []byte{})
	f.Add([]byte{0, 0, 0, 0, 0x10, 0x10, 0, 0}, []byte{0x01, 0x02, 0x03, 0x81, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, x, e []byte) {
		x = x[:len(x)/8*8]
		tab, err := New(x, 0x8000, e, 0x9000, le)
		if err != nil {
			return
		}
		for _, pc := range []uint64{0, 0x1000, 0x8000, 0x9000, 0xffffffff} {
			if en, err := tab.Lookup(pc); err == nil {
				var s State
				s.R[13], s.Valid = 0x8000, 0xffff
				Exec(en.Ops, &s, stack{0x8000}, le)
			}
		}
	})
}

// Crafted opcode streams end with an error: a long run of vsp += 4 (an
// EHABI program has no jumps, so "looping" means being long), a program
// that keeps popping past the readable stack, and the refuse-to-unwind
// and spare codes.
func TestCraftedPrograms(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []byte
	}{
		{"vsp += 4, a million times", bytes.Repeat([]byte{0x00}, 1_000_000)},
		{"pops past the stack", bytes.Repeat([]byte{0x8f, 0xff}, 600)},
		{"refuse to unwind", []byte{0x80, 0x00}},
		{"spare", []byte{0xb4}},
	} {
		var s State
		s.R[13], s.Valid = 0x8000, 0xffff
		if err := Exec(tc.ops, &s, stack{0x8000}, le); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// A32 code built with -fno-omit-frame-pointer saves {fp, lr} and returns
// through lr: the return address then comes from the stack although no
// opcode pops pc, which is what tells a recursion from a rule that keeps
// giving the same pc (the unwinder's loop check).
func TestPoppedRegisters(t *testing.T) {
	s, err := run(t, []byte{0x84, 0x80, 0xb0}) // pop {r11, lr}; finish
	if err != nil {
		t.Fatal(err)
	}
	if s.PCSet {
		t.Error("PCSet after popping lr only")
	}
	if want := uint16(1<<11 | 1<<14); s.Popped != want {
		t.Errorf("Popped = %#x, want %#x", s.Popped, want)
	}
	if s.R[15] != s.R[14] || s.R[14] != 0x8000+4+1000 {
		t.Errorf("pc %#x, lr %#x: want both the popped lr %#x", s.R[15], s.R[14], 0x8000+4+1000)
	}
	s, err = run(t, []byte{0xb0}) // finish: pc from the lr register
	if err != nil || s.Popped != 0 {
		t.Errorf("finish alone: Popped = %#x, err %v", s.Popped, err)
	}
}
