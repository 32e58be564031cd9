// Package ehabi unwinds ARM32 frames with the ARM Exception Handling ABI
// tables: .ARM.exidx, a sorted index of {function start, unwind data}, and
// .ARM.extab, which holds the longer entries ("Exception Handling ABI for
// the Arm Architecture", EHABI, §6 and §9–§10).
//
// Debian's armhf libc and libstdc++ carry only these tables (their
// .eh_frame is empty), so on ARM32 EHABI is the primary unwinder.
package ehabi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sort"
)

// Errors a caller acts on.
var (
	ErrNoEntry     = errors.New("ehabi: no .ARM.exidx entry covers the pc")
	ErrCantUnwind  = errors.New("ehabi: EXIDX_CANTUNWIND (function marked as not unwindable)")
	ErrRefuse      = errors.New("ehabi: the entry refuses to unwind")
	ErrPersonality = errors.New("ehabi: unsupported personality routine")
)

// FormatError says what is wrong with a table, and where.
type FormatError struct {
	Section string
	Off     uint64
	Msg     string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("ehabi: %s offset %#x: %s", e.Section, e.Off, e.Msg)
}

// Table is a module's .ARM.exidx and .ARM.extab, at their link-time
// addresses.
type Table struct {
	exidx     []byte
	exidxAddr uint64
	extab     []byte
	extabAddr uint64
	order     binary.ByteOrder
	n         int
	cant      int // EXIDX_CANTUNWIND entries
}

// New indexes the tables. exidx must be a whole number of 8-byte entries;
// extab may be nil (inline entries only).
func New(exidx []byte, exidxAddr uint64, extab []byte, extabAddr uint64, order binary.ByteOrder) (*Table, error) {
	if len(exidx)%8 != 0 {
		return nil, &FormatError{".ARM.exidx", uint64(len(exidx)), "size is not a multiple of 8"}
	}
	t := &Table{exidx: exidx, exidxAddr: exidxAddr, extab: extab, extabAddr: extabAddr, order: order, n: len(exidx) / 8}
	for i := 0; i < t.n; i++ {
		if t.word(i, 1) == 1 {
			t.cant++
		}
	}
	return t, nil
}

// MostlyCantUnwind reports whether most entries are EXIDX_CANTUNWIND: the
// module was built without unwind tables, and GNU ld covered its code with
// such entries (elf32-arm.c, elf32_arm_fix_exidx_coverage). There an
// EXIDX_CANTUNWIND says nothing of the function; elsewhere it marks an
// outermost frame (_start, clone, thread starts).
func (t *Table) MostlyCantUnwind() bool { return 2*t.cant >= t.n }

// prel31 decodes a place-relative 31-bit offset at address at.
func prel31(w uint32, at uint64) uint64 {
	off := int64(int32(w<<1) >> 1)
	return uint64(int64(at)+off) & 0xffffffff
}

func (t *Table) word(i int, k int) uint32 {
	return t.order.Uint32(t.exidx[8*i+4*k:])
}

// fn is the start of entry i's function.
func (t *Table) fn(i int) uint64 { return prel31(t.word(i, 0), t.exidxAddr+uint64(8*i)) }

// Entry is the unwinding program for one function.
type Entry struct {
	Start uint64 // function start (link-time address)
	End   uint64 // the next entry's start: where this entry's cover ends
	Ops   []byte // unwinding instructions
}

// Lookup finds the entry covering pc (a link-time address, Thumb bit
// clear). Entries cover from their function start to the next entry's:
// ranges are open-ended, so callers must sanity-check the result.
func (t *Table) Lookup(pc uint64) (*Entry, error) {
	i := sort.Search(t.n, func(i int) bool { return t.fn(i) > pc }) - 1
	if i < 0 {
		return nil, ErrNoEntry
	}
	e := &Entry{Start: t.fn(i), End: ^uint64(0)}
	if i+1 < t.n {
		e.End = t.fn(i + 1)
	}
	w := t.word(i, 1)
	switch {
	case w == 1:
		return e, ErrCantUnwind
	case w&0x80000000 != 0:
		// Inline compact entry: personality 0, three opcode bytes.
		if (w>>24)&0x0f != 0 {
			return e, &FormatError{".ARM.exidx", uint64(8*i + 4), fmt.Sprintf("inline entry with personality %d", (w>>24)&0x0f)}
		}
		e.Ops = []byte{byte(w >> 16), byte(w >> 8), byte(w)}
		return e, nil
	}
	at := prel31(w, t.exidxAddr+uint64(8*i+4))
	ops, err := t.extabOps(at)
	e.Ops = ops
	return e, err
}

// extabOps reads the opcodes of the .ARM.extab entry at address at.
func (t *Table) extabOps(at uint64) ([]byte, error) {
	rd := func(a uint64) (uint32, error) {
		if a < t.extabAddr || a+4 > t.extabAddr+uint64(len(t.extab)) {
			return 0, &FormatError{".ARM.extab", a - t.extabAddr, "entry outside the section"}
		}
		return t.order.Uint32(t.extab[a-t.extabAddr:]), nil
	}
	w, err := rd(at)
	if err != nil {
		return nil, err
	}
	var ops []byte
	var more int
	if w&0x80000000 != 0 {
		// Compact model (EHABI §6.3): personality index in bits 24–27.
		switch (w >> 24) & 0x0f {
		case 0:
			return []byte{byte(w >> 16), byte(w >> 8), byte(w)}, nil
		case 1, 2:
			more = int((w >> 16) & 0xff)
			ops = []byte{byte(w >> 8), byte(w)}
		default:
			return nil, ErrPersonality
		}
	} else {
		// Generic model: a prel31 to the personality routine, then, for
		// GCC's __gxx_personality_v0 and __gcc_personality_v0, the same
		// word layout as personality 1.
		at += 4
		if w, err = rd(at); err != nil {
			return nil, err
		}
		more = int(w >> 24)
		ops = []byte{byte(w >> 16), byte(w >> 8), byte(w)}
	}
	if more > 255 {
		return nil, &FormatError{".ARM.extab", at - t.extabAddr, "too many words"}
	}
	for k := 0; k < more; k++ {
		at += 4
		if w, err = rd(at); err != nil {
			return nil, err
		}
		ops = append(ops, byte(w>>24), byte(w>>16), byte(w>>8), byte(w))
	}
	return ops, nil
}

// Memory reads the stack.
type Memory interface {
	ReadAt(p []byte, off int64) (int, error)
}

// State is the virtual register set the opcodes act on (EHABI §9.1).
type State struct {
	R      [16]uint32
	Valid  uint16 // bit n: R[n] is known
	Popped uint16 // bit n: R[n] was read from the stack
	PCSet  bool   // an opcode popped r15
	Finish bool
}

// maxOps bounds a program: a real one has a handful of opcodes.
const maxOps = 1024

// Exec runs an unwinding program on s. vsp starts as r13; at the end r13
// holds the caller's SP and, unless an opcode popped r15, r15 is taken from
// r14 (EHABI §9.3, "if r15 was not popped, the return address is lr").
func Exec(ops []byte, s *State, mem Memory, order binary.ByteOrder) error {
	m := machine{s: s, ops: ops, vsp: s.R[13]}
	sm := &stackMem{mem, order}
	for steps := 0; m.i < len(ops); steps++ {
		if steps > maxOps {
			return errors.New("ehabi: opcode program too long")
		}
		op := ops[m.i]
		m.i++
		// The commonest opcodes, here rather than through a call.
		switch {
		case op&0xc0 == 0x00: // 00xxxxxx: vsp += (x<<2) + 4
			m.vsp += uint32(op&0x3f)<<2 + 4
		case op&0xc0 == 0x40: // 01xxxxxx: vsp -= (x<<2) + 4
			m.vsp -= uint32(op&0x3f)<<2 + 4
		case op == 0xb0: // finish
			s.Finish = true
			m.i = len(ops)
		default:
			if err := m.step(op, sm); err != nil {
				return err
			}
		}
	}
	s.R[13] = m.vsp
	s.Valid |= 1 << 13
	if !s.PCSet {
		if s.Valid&(1<<14) == 0 {
			return errors.New("ehabi: no return address (lr unknown)")
		}
		s.R[15] = s.R[14]
		s.Valid |= 1 << 15
	}
	return nil
}

// machine is Exec's state between opcodes.
type machine struct {
	s   *State
	ops []byte
	i   int // next byte of ops
	vsp uint32
}

// stackMem is the stack the opcodes pop from. It is passed to the
// machine's methods rather than held: escape analysis does not tell
// fields apart, and interfaces held in the machine would send the
// caller's State to the heap.
type stackMem struct {
	mem   Memory
	order binary.ByteOrder
}

// step runs opcode op, EHABI §10.3's table in its order, but for the
// vsp adjustments and finish, which Exec does itself.
func (m *machine) step(op byte, sm *stackMem) error {
	switch {
	case op&0xf0 == 0x80: // 1000iiii iiiiiiii: pop r4–r15 by mask
		b, err := m.next(op)
		if err != nil {
			return err
		}
		mask := uint16(op&0x0f)<<8 | uint16(b)
		if mask == 0 {
			return ErrRefuse
		}
		return m.popMask(sm, mask, 4)
	case op&0xf0 == 0x90: // 1001nnnn: vsp = r[nnnn]
		n := op & 0x0f
		if n == 13 || n == 15 {
			return fmt.Errorf("ehabi: reserved opcode %#02x", op)
		}
		m.vsp = m.s.R[n]
	case op&0xf8 == 0xa0, op&0xf8 == 0xa8: // pop r4–r[4+nnn] (+ r14)
		mask := uint16(1)<<(op&0x07+1) - 1
		if op&0x08 != 0 {
			mask |= 1 << 10 // r14 relative to r4
		}
		return m.popMask(sm, mask, 4)
	case op == 0xb1: // 10110001 0000iiii: pop r0–r3 by mask
		b, err := m.next(op)
		if err != nil {
			return err
		}
		if b == 0 || b&0xf0 != 0 {
			return fmt.Errorf("ehabi: spare opcode b1 %02x", b)
		}
		return m.popMask(sm, uint16(b), 0)
	case op == 0xb2: // vsp += 0x204 + (uleb128 << 2)
		v, err := m.uleb(op)
		if err != nil {
			return err
		}
		m.vsp += 0x204 + v<<2
	case op&0xfc == 0xb4: // 101101nn: spare
		return fmt.Errorf("ehabi: spare opcode %#02x", op)
	case op&0xf8 == 0xb8: // pop VFP d8–d[8+nnn], FSTMFDX
		m.vsp += uint32(op&0x07+1)*8 + 4
	case op == 0xc7: // iWMMXt wCGR0–3 by mask
		b, err := m.next(op)
		if err != nil {
			return err
		}
		if b == 0 || b&0xf0 != 0 {
			return fmt.Errorf("ehabi: spare opcode c7 %02x", b)
		}
		m.vsp += 4 * uint32(bits.OnesCount8(b))
	case op == 0xb3, op == 0xc6, op == 0xc8, op == 0xc9:
		// b3: VFP d[ssss]–d[ssss+cccc], FSTMFDX (one more word);
		// c6: iWMMXt wR[ssss]–wR[ssss+cccc]; c8, c9: VFP d[16+ssss]… and
		// d[ssss]…, FSTMFDD: 8 bytes a register.
		b, err := m.next(op)
		if err != nil {
			return err
		}
		m.vsp += uint32(b&0x0f+1) * 8
		if op == 0xb3 {
			m.vsp += 4
		}
	case op&0xf8 == 0xc0, op&0xf8 == 0xd0:
		// iWMMXt wR10–wR[10+nnn]; VFP d8–d[8+nnn], FSTMFDD.
		m.vsp += uint32(op&0x07+1) * 8
	default: // 11001yyy (yyy ≥ 2), 11xxxyyy: spare
		return fmt.Errorf("ehabi: spare opcode %#02x", op)
	}
	return nil
}

// next reads op's next operand byte.
func (m *machine) next(op byte) (byte, error) {
	if m.i >= len(m.ops) {
		return 0, fmt.Errorf("ehabi: opcode %#02x truncated", op)
	}
	b := m.ops[m.i]
	m.i++
	return b, nil
}

// uleb reads op's ULEB128 operand, which must fit 32 bits.
func (m *machine) uleb(op byte) (uint32, error) {
	var v uint32
	for shift := uint(0); ; shift += 7 {
		b, err := m.next(op)
		if err != nil {
			return 0, err
		}
		if shift > 28 {
			return 0, errors.New("ehabi: uleb128 too long")
		}
		v |= uint32(b&0x7f) << shift
		if b&0x80 == 0 {
			return v, nil
		}
	}
}

// pop reads register reg from the stack at vsp.
func (m *machine) pop(sm *stackMem, reg int) error {
	var b [4]byte
	if _, err := sm.mem.ReadAt(b[:], int64(m.vsp)); err != nil {
		return fmt.Errorf("ehabi: reading the stack at %#x: %w", m.vsp, err)
	}
	m.s.R[reg] = sm.order.Uint32(b[:])
	m.s.Valid |= 1 << reg
	m.s.Popped |= 1 << reg
	m.vsp += 4
	return nil
}

// popMask pops the registers of mask, bit 0 being register first.
func (m *machine) popMask(sm *stackMem, mask uint16, first int) error {
	spSet := false
	for r := 0; r < 16; r++ {
		if mask&(1<<r) == 0 {
			continue
		}
		if err := m.pop(sm, first+r); err != nil {
			return err
		}
		if first+r == 13 {
			spSet = true
		}
		if first+r == 15 {
			m.s.PCSet = true
		}
	}
	if spSet {
		// Popping sp replaces vsp (EHABI §10.1 note).
		m.vsp = m.s.R[13]
	}
	return nil
}

// StartBefore returns the highest entry start at or below pc (a link-time
// address): a function boundary, for call-site validation.
func (t *Table) StartBefore(pc uint64) (uint64, bool) {
	i := sort.Search(t.n, func(i int) bool { return t.fn(i) > pc }) - 1
	if i < 0 {
		return 0, false
	}
	return t.fn(i), true
}
