// Package prologue recovers a frame from its function's prologue, for code
// the unwind tables leave out: glibc's abort on armhf has no .ARM.exidx
// entry of its own, and Debian's riscv64 libc has CFI for a quarter of its
// functions. It decodes the few instructions compilers use to set up and
// tear down a frame (push/stp-like stores, stack adjustments, pops and
// reloads) from the function's start up to the PC, as gdb's prologue
// analyzers do. The function start comes from the caller (symbols, or the
// target of a direct call).
//
// The code between the start and the PC is not one straight line: an
// early return (GCC's shrink-wrapping puts one before the frame setup) or
// an epilogue in the middle of the function ends a path, and the code
// after it is reached by a branch. So the analyzers follow the control
// flow: each instruction runs with the frame of the path that reaches it,
// and a return, an unconditional jump or a tail call passes nothing on to
// the instruction after it. A PC that no path from the start reaches says
// the start is not its function's.
//
// This is a medium-trust method: frames it recovers are marked "prologue".
package prologue

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// Frame is what a prologue did by the time the PC was reached.
type Frame struct {
	// Size is how far SP moved down: the CFA is SP + Size.
	Size uint64
	// Saved maps DWARF register numbers to their save slot, as an offset
	// from the CFA (negative).
	Saved map[int]int64
	// Dynamic: SP moved by an amount the code computed (alloca, a
	// variable-length array), so SP + Size is not the CFA: it is
	// FP + FPOff, from the frame pointer the function set up for that.
	Dynamic bool
	// HasFP: the function pointed FP (a DWARF register number) at its
	// frame, the CFA being FP + FPOff.
	HasFP bool
	FP    int
	FPOff int64
}

// CFA returns the frame's CFA from the values of SP and, for a dynamic
// frame, of its frame pointer (get reads a register).
func (f *Frame) CFA(sp uint64, get func(reg int) (uint64, bool)) (uint64, error) {
	if !f.Dynamic {
		return sp + f.Size, nil
	}
	if !f.HasFP {
		return 0, errDynamic
	}
	fp, ok := get(f.FP)
	if !ok {
		return 0, errors.New("prologue: frame pointer unknown")
	}
	return uint64(int64(fp) + f.FPOff), nil
}

var errDynamic = errors.New("prologue: SP moved by a computed amount, and no frame pointer")

// ErrNoPrologue: no frame-setup instruction was found before the PC.
var ErrNoPrologue = errors.New("prologue: no frame setup before the pc")

// ErrWrongStart: no path from the start reaches the PC: a return (or an
// unconditional jump) lies between them and no branch leads past it, so
// the start belongs to an earlier function (stripped files give no
// symbols, and unwind tables cover up to the next entry). Better no frame
// than a wrong one.
var ErrWrongStart = errors.New("prologue: no path from the start reaches the pc: start unknown")

// MaxCode is how many bytes from a function's start the analyzers look
// at: the PC of a caller frame may lie far into its function, past early
// returns and error paths.
const MaxCode = 4096

// maxInsns bounds the scan. Instructions are at least 2 bytes.
const maxInsns = MaxCode / 2

func newFrame() *Frame { return &Frame{Saved: map[int]int64{}} }

//go:noinline
func (f *Frame) clone() *Frame {
	c := *f
	c.Saved = make(map[int]int64, len(f.Saved))
	for r, o := range f.Saved {
		if o != restored {
			c.Saved[r] = o
		}
	}
	return &c
}

// restored marks a register in Frame.Saved whose caller's value a reload
// put back (save slots are below the CFA, never at +1). A mark, not a
// delete: map deletion would link another runtime routine into the
// handler. clone drops the marks.
const restored = 1

// adjust moves SP by delta (negative: a frame grows).
//
//go:noinline
func (f *Frame) adjust(delta int64) {
	if delta < 0 {
		f.Size += uint64(-delta)
		return
	}
	if uint64(delta) > f.Size {
		f.Size = 0
		return
	}
	f.Size -= uint64(delta)
}

// setFP records FP = SP + off: the frame pointer that a dynamic frame's
// CFA is found from.
//
//go:noinline
func (f *Frame) setFP(reg int, off int64) {
	if !f.Dynamic {
		f.HasFP, f.FP, f.FPOff = true, reg, int64(f.Size)-off
	}
}

// fromFP records SP = FP - off (an epilogue undoing a dynamic frame).
func (f *Frame) fromFP(reg int, off int64) {
	if f.HasFP && f.FP == reg {
		f.Dynamic = false
		f.Size = uint64(f.FPOff + off)
	}
}

// save records reg stored at SP + off. The first save wins: later stores
// of the same register spill a value the function made itself.
//
//go:noinline
func (f *Frame) save(reg int, off int64) {
	if o, ok := f.Saved[reg]; !ok || o == restored {
		f.Saved[reg] = -int64(f.Size) + off
	}
}

// restore records reg loaded from SP + off: if that is its save slot, the
// register holds the caller's value again.
//
//go:noinline
func (f *Frame) restore(reg int, off int64) {
	if s, ok := f.Saved[reg]; ok && s == -int64(f.Size)+off {
		f.Saved[reg] = restored
	}
}

// push records the registers of mask stored at the new SP in ascending
// order (STMDB SP!).
//
//go:noinline
func (f *Frame) push(mask uint32) {
	f.Size += 4 * uint64(bits.OnesCount32(mask))
	for i := int64(0); mask != 0; i += 4 {
		r := bits.TrailingZeros32(mask)
		mask &^= 1 << r
		f.save(r, i)
	}
}

// pop records the registers of mask loaded from SP in ascending order, SP
// moving up (LDMIA SP!).
//
//go:noinline
func (f *Frame) pop(mask uint32) {
	for mask != 0 {
		r := bits.TrailingZeros32(mask)
		mask &^= 1 << r
		f.restore(r, 0)
		f.adjust(4)
	}
}

// insn is how one decoded instruction moves control.
type insn struct {
	target uint64
	size   uint8
	// end: no fall-through (a return, an unconditional or indirect jump).
	end bool
	// indirect: an indirect jump that is not a return: a switch through a
	// jump table, whose targets follow it, or a tail call.
	indirect bool
	// branch: a direct branch, conditional or not, to target.
	branch bool
	// call: a call (decoded for A64 only), which may not return.
	call bool
}

// decoder decodes the instruction at off (file address addr) and applies
// its effect to f. ok is false when the code ends before the instruction
// does. One type for the three instruction sets keeps the handler small.
type decoder struct {
	riscv, thumb, a64 bool
	it                int // Thumb-2: instructions left in the current IT block
	// A64: the register a movz/movk just built a constant in, and the
	// constant (a large frame: mov x12, #8576; sub sp, sp, x12).
	constReg int
	constVal uint64
}

func (d *decoder) decode(code []byte, off, addr uint64, f *Frame) (insn, bool) {
	switch {
	case d.a64:
		return d.decodeA64(code, off, addr, f)
	case d.riscv:
		return decodeRISCV(code, off, addr, f)
	case d.thumb:
		return d.decodeThumb(code, off, addr, f)
	}
	return decodeA32(code, off, addr, f)
}

// walk follows the control flow from start to pc, the state of each path
// carried along, and returns the frame on the path that reaches the pc.
// Where paths join, the fall-through one is taken: a compiler keeps the
// frame the same on every path to an instruction. Backward branches are
// loops, whose heads the paths have reached already.
func walk(d *decoder, code []byte, start, pc uint64) (*Frame, error) {
	// at holds the frames forward branches carry to their targets.
	at := map[uint64]*Frame{}
	// scratch takes the effects of code that no path reaches.
	scratch := newFrame()
	f := newFrame()
	// afterJump: the frame at the latest indirect jump, for the code after
	// it that no branch reaches (a switch's cases).
	var afterJump *Frame
	afterCall := false
	off := uint64(0)
	for n := 0; start+off < pc && n < maxInsns; n++ {
		if b := at[start+off]; f != nil && afterCall && b != nil && (b.Size != f.Size || b.Dynamic != f.Dynamic) {
			// A branch and the code after a call join with different
			// frames: the call does not return (abort, a noreturn error
			// path set up its own frame): the branch's frame holds.
			f = b.clone()
		}
		if f == nil {
			if f = at[start+off]; f == nil && afterJump != nil {
				f = afterJump.clone()
			}
		}
		cur := f
		if cur == nil {
			cur = scratch
		}
		in, ok := d.decode(code, off, start+off, cur)
		if !ok {
			break
		}
		if f != nil && in.branch && in.target > start+off && in.target <= pc && at[in.target] == nil {
			at[in.target] = f.clone()
		}
		afterCall = in.call
		if in.end {
			afterJump = nil
			if in.indirect {
				afterJump = f
			}
			f = nil
		}
		off += uint64(in.size)
	}
	if b := at[pc]; f != nil && afterCall && b != nil && start+off == pc && (b.Size != f.Size || b.Dynamic != f.Dynamic) {
		f = b // the PC follows a call that does not return (see above)
	}
	if f == nil && start+off == pc {
		f = at[pc]
	}
	if f == nil {
		return nil, ErrWrongStart
	}
	if f.Size == 0 && !f.Dynamic && len(f.Saved) == 0 {
		return nil, ErrNoPrologue
	}
	return f.clone(), nil
}

// thumbExpandImm is ThumbExpandImm of the Arm ARM (A7.4.2).
//
//go:noinline
func thumbExpandImm(imm12 uint32) uint32 {
	if imm12>>10 == 0 {
		b := imm12 & 0xff
		switch (imm12 >> 8) & 3 {
		case 0:
			return b
		case 1:
			return b<<16 | b
		case 2:
			return b<<24 | b<<8
		default:
			return b<<24 | b<<16 | b<<8 | b
		}
	}
	v := 0x80 | imm12&0x7f
	return bits.RotateLeft32(v, -int(imm12>>7))
}

// sext sign-extends the low n bits of v.
func sext(v uint32, n int) int64 {
	return int64(int32(v<<(32-n)) >> (32 - n))
}

// ARM analyses 32-bit ARM code (Thumb-2 when thumb) from start to pc;
// code holds the bytes at start.
func ARM(code []byte, start, pc uint64, thumb bool) (*Frame, error) {
	if thumb {
		return walk(&decoder{thumb: true}, code, start, pc)
	}
	return walk(&decoder{}, code, start, pc)
}

// RISCV analyses RV64GC code from start to pc. x2 is sp.
func RISCV(code []byte, start, pc uint64) (*Frame, error) {
	return walk(&decoder{riscv: true}, code, start, pc)
}

// AArch64 analyses A64 code from start to pc. x29 is the frame pointer,
// x30 the link register, 31 sp.
func AArch64(code []byte, start, pc uint64) (*Frame, error) {
	return walk(&decoder{a64: true, constReg: -1}, code, start, pc)
}

// decodeThumb decodes Thumb-2. Instructions inside an IT block are
// conditional: they neither change the frame nor end a path (it eq;
// popeq {r4, pc} is a conditional return).
func (d *decoder) decodeThumb(code []byte, off, addr uint64, f *Frame) (insn, bool) {
	le := binary.LittleEndian
	if off+2 > uint64(len(code)) {
		return insn{}, false
	}
	hw := uint32(le.Uint16(code[off:]))
	cond := d.it > 0
	if cond {
		d.it--
		f = newFrame() // a conditional instruction changes no frame
	}
	if hw>>11 >= 0x1d { // 32-bit Thumb-2
		if off+4 > uint64(len(code)) {
			return insn{}, false
		}
		hw2 := uint32(le.Uint16(code[off+2:]))
		// i:imm3:imm8 of the data-processing (modified/plain immediate)
		// encodings.
		imm12 := (hw&0x400)<<1 | (hw2&0x7000)>>4 | hw2&0xff
		in := insn{size: 4}
		switch {
		case hw == 0xe92d: // push.w {mask}
			f.push(hw2 & 0x5fff)
		case hw == 0xf84d && hw2&0x0fff == 0x0d04: // str.w rt, [sp, #-4]!
			f.push(1 << (hw2 >> 12))
		case hw&0xfbef == 0xf1ad && hw2&0x8f00 == 0x0d00: // sub.w sp, sp, #const
			f.adjust(-int64(thumbExpandImm(imm12)))
		case hw&0xfbff == 0xf2ad && hw2&0x8f00 == 0x0d00: // subw sp, sp, #imm12
			f.adjust(-int64(imm12))
		case hw&0xfbef == 0xf10d && hw2&0x8f00 == 0x0d00: // add.w sp, sp, #const
			f.adjust(int64(thumbExpandImm(imm12)))
		case hw&0xfbff == 0xf20d && hw2&0x8f00 == 0x0d00: // addw sp, sp, #imm12
			f.adjust(int64(imm12))
		case hw == 0xebad && hw2&0x8f00 == 0x0d00: // sub.w sp, sp, rm
			f.Dynamic = true
		case hw&0xfbef == 0xf10d && hw2&0x8f00 == 0x0700, hw&0xfbef == 0xf10d && hw2&0x8f00 == 0x0b00: // add.w r7/r11, sp, #const
			f.setFP(int(hw2>>8&0xf), int64(thumbExpandImm(imm12)))
		case hw&0xffbf == 0xed2d && hw2&0x0e00 == 0x0a00: // vpush
			f.adjust(-4 * int64(hw2&0xff))
		case hw == 0xe8bd: // pop.w {mask}
			if hw2&0x8000 != 0 {
				in.end = !cond
				break
			}
			f.pop(hw2 & 0x5fff)
		case hw == 0xf85d && hw2 == 0xfb04: // ldr pc, [sp], #4
			in.end = !cond
		case hw&0xf800 == 0xf000 && hw2&0xd000 == 0x9000: // b.w (T4)
			s := hw >> 10 & 1
			i1 := ^(hw2>>13 ^ s) & 1
			i2 := ^(hw2>>11 ^ s) & 1
			imm := s<<24 | i1<<23 | i2<<22 | (hw&0x3ff)<<12 | (hw2&0x7ff)<<1
			in.branch, in.target, in.end = true, uint64(int64(addr)+4+sext(imm, 25)), !cond
		case hw&0xf800 == 0xf000 && hw2&0xd000 == 0x8000 && hw>>6&0xe != 0xe: // b<c>.w (T3)
			s := hw >> 10 & 1
			imm := s<<20 | (hw2>>11&1)<<19 | (hw2>>13&1)<<18 | (hw&0x3f)<<12 | (hw2&0x7ff)<<1
			in.branch, in.target = true, uint64(int64(addr)+4+sext(imm, 21))
		}
		return in, true
	}
	in := insn{size: 2}
	switch {
	case hw&0xfe00 == 0xb400: // push {r0-r7[, lr]}
		m := hw & 0xff
		if hw&0x100 != 0 {
			m |= 1 << 14
		}
		f.push(m)
	case hw&0xff80 == 0xb080: // sub sp, #imm7*4
		f.adjust(-int64(hw&0x7f) * 4)
	case hw&0xff80 == 0xb000: // add sp, #imm7*4
		f.adjust(int64(hw&0x7f) * 4)
	case hw&0xff00 == 0xaf00: // add r7, sp, #imm8*4
		f.setFP(7, int64(hw&0xff)*4)
	case hw == 0x46bd: // mov sp, r7
		f.fromFP(7, 0)
	case hw&0xff00 == 0xbd00, hw == 0x4770: // pop {…, pc}; bx lr
		in.end = !cond
	case hw&0xff00 == 0xbc00: // pop {r0-r7}
		f.pop(hw & 0xff)
	case hw&0xff87 == 0x4700: // bx rm: a tail call
		in.end, in.indirect = !cond, true
	case hw&0xff00 == 0xbf00 && hw&0xf != 0: // it
		d.it = 4 - bits.TrailingZeros32(hw&0xf)
	case hw&0xf500 == 0xb100: // cbz, cbnz
		in.branch, in.target = true, addr+4+(uint64(hw>>9&1)<<6|uint64(hw>>3&0x1f)<<1)
	case hw&0xf000 == 0xd000 && hw&0xe00 != 0xe00: // b<c>
		in.branch, in.target = true, uint64(int64(addr)+4+sext((hw&0xff)<<1, 9))
	case hw&0xf800 == 0xe000: // b
		in.branch, in.target, in.end = true, uint64(int64(addr)+4+sext((hw&0x7ff)<<1, 12)), !cond
	}
	return in, true
}

// decodeA32 decodes ARM (A32) code. Only unconditional forms change the
// frame or end a path.
func decodeA32(code []byte, off, addr uint64, f *Frame) (insn, bool) {
	if off+4 > uint64(len(code)) {
		return insn{}, false
	}
	w := binary.LittleEndian.Uint32(code[off:])
	in := insn{size: 4}
	switch {
	case w&0xffff0000 == 0xe92d0000: // push {mask} (stmdb sp!)
		f.push(w & 0xffff)
	case w&0xffff0fff == 0xe52d0004: // str rt, [sp, #-4]!
		f.push(1 << (w >> 12 & 0xf))
	case w&0xfffff000 == 0xe24dd000: // sub sp, sp, #imm
		f.adjust(-int64(bits.RotateLeft32(w&0xff, -int(2*((w>>8)&0xf)))))
	case w&0xfffff000 == 0xe28dd000: // add sp, sp, #imm
		f.adjust(int64(bits.RotateLeft32(w&0xff, -int(2*((w>>8)&0xf)))))
	case w&0xfffff000 == 0xe04dd000: // sub sp, sp, rm
		f.Dynamic = true
	case w&0xfffff000 == 0xe28db000, w&0xfffff000 == 0xe28d7000: // add fp/r7, sp, #imm
		f.setFP(int(w>>12&0xf), int64(bits.RotateLeft32(w&0xff, -int(2*((w>>8)&0xf)))))
	case w&0xfffff000 == 0xe24bd000: // sub sp, fp, #imm
		f.fromFP(11, int64(bits.RotateLeft32(w&0xff, -int(2*((w>>8)&0xf)))))
	case w&0xffbf0e00 == 0xed2d0a00: // vpush
		f.adjust(-4 * int64(w&0xff))
	case w&0xffff8000 == 0xe8bd8000, w == 0xe12fff1e, w == 0xe49df004: // pop {…, pc}; bx lr; ldr pc, [sp], #4
		in.end = true
	case w&0xffff0000 == 0xe8bd0000: // pop {mask}
		f.pop(w & 0xffff)
	case w&0xfffffff0 == 0xe12fff10: // bx rm: a tail call
		in.end, in.indirect = true, true
	case w&0x0f000000 == 0x0a000000 && w>>28 != 0xf: // b<c>
		in.branch, in.target = true, uint64(int64(addr)+8+sext(w&0xffffff, 24)*4)
		in.end = w>>28 == 0xe
	}
	return in, true
}

// decodeRISCV decodes RV64GC.
func decodeRISCV(code []byte, off, addr uint64, f *Frame) (insn, bool) {
	le := binary.LittleEndian
	if off+2 > uint64(len(code)) {
		return insn{}, false
	}
	hw := uint32(le.Uint16(code[off:]))
	if hw&3 != 3 { // compressed
		in := insn{size: 2}
		switch {
		case hw&0xef83 == 0x6101: // c.addi16sp
			imm := hw>>12&1<<9 | hw>>6&1<<4 | hw>>5&1<<6 | hw>>3&3<<7 | hw>>2&1<<5
			f.adjust(sext(imm, 10))
		case hw&0xef83 == 0x0101: // c.addi sp, imm
			f.adjust(sext(hw>>12&1<<5|hw>>2&0x1f, 6))
		case hw&0xe003 == 0xe002: // c.sdsp rs2, uimm(sp)
			f.save(int(hw>>2&0x1f), int64(hw>>10&7)<<3|int64(hw>>7&7)<<6)
		case hw&0xe003 == 0x6002 && hw>>7&0x1f != 0: // c.ldsp rd, uimm(sp)
			f.restore(int(hw>>7&0x1f), int64(hw>>12&1)<<5|int64(hw>>5&3)<<3|int64(hw>>2&7)<<6)
		case hw&0xf07f == 0x8002 && hw>>7&0x1f != 0: // c.jr rs1 (ret when ra)
			in.end, in.indirect = true, hw>>7&0x1f != 1
		case hw&0xe003 == 0xa001: // c.j
			imm := hw>>12&1<<11 | hw>>11&1<<4 | hw>>9&3<<8 | hw>>8&1<<10 | hw>>7&1<<6 | hw>>6&1<<7 | hw>>3&7<<1 | hw>>2&1<<5
			in.branch, in.target, in.end = true, uint64(int64(addr)+sext(imm, 12)), true
		case hw&0xc003 == 0xc001: // c.beqz, c.bnez
			imm := hw>>12&1<<8 | hw>>10&3<<3 | hw>>5&3<<6 | hw>>3&3<<1 | hw>>2&1<<5
			in.branch, in.target = true, uint64(int64(addr)+sext(imm, 9))
		}
		return in, true
	}
	if off+4 > uint64(len(code)) {
		return insn{}, false
	}
	w := le.Uint32(code[off:])
	in := insn{size: 4}
	switch {
	case w&0x000fffff == 0x00010113: // addi sp, sp, imm
		f.adjust(int64(int32(w) >> 20))
	case w&0x707f == 0x3023 && (w>>15)&0x1f == 2: // sd rs2, imm(sp)
		f.save(int(w>>20&0x1f), int64(int32(w)>>25)<<5|int64(w>>7&0x1f))
	case w&0xff07f == 0x13003: // ld rd, imm(sp)
		f.restore(int(w>>7&0x1f), int64(int32(w)>>20))
	case w&0x7f == 0x63: // beq, bne, blt, bge, bltu, bgeu
		imm := w>>31<<12 | w>>7&1<<11 | w>>25&0x3f<<5 | w>>8&0xf<<1
		in.branch, in.target = true, uint64(int64(addr)+sext(imm, 13))
	case w&0x7f == 0x6f && w>>7&0x1f == 0: // jal x0 (j)
		imm := w>>31<<20 | w>>12&0xff<<12 | w>>20&1<<11 | w>>21&0x3ff<<1
		in.branch, in.target, in.end = true, uint64(int64(addr)+sext(imm, 21)), true
	case w&0x707f == 0x67 && w>>7&0x1f == 0: // jalr x0, imm(rs1) (ret when ra, 0)
		in.end, in.indirect = true, w != 0x00008067
	}
	return in, true
}

// decodeA64 decodes A64 (Arm ARM C4.1): the stores and loads of register
// pairs and single registers against sp that GCC and clang use to save
// and restore, sp adjustments, the frame pointer set from sp, and the
// branches and returns that shape the paths. Rt 31 in a pair is xzr.
func (d *decoder) decodeA64(code []byte, off, addr uint64, f *Frame) (insn, bool) {
	if off+4 > uint64(len(code)) {
		return insn{}, false
	}
	w := binary.LittleEndian.Uint32(code[off:])
	in := insn{size: 4}
	rt, rt2 := int(w&0x1f), int(w>>10&0x1f)
	imm7 := sext(w>>15&0x7f, 7) * 8
	imm9 := sext(w>>12&0x1ff, 9)
	imm12 := int64(w >> 10 & 0xfff)
	if w>>22&1 != 0 {
		imm12 <<= 12
	}
	// Only the callee-saved registers (x19-x30) count as saved: stores of
	// others are spills of values the function made.
	kept := func(r int) bool { return r >= 19 && r <= 30 }
	pair := func(base int64) {
		if kept(rt) {
			f.save(rt, base)
		}
		if kept(rt2) {
			f.save(rt2, base+8)
		}
	}
	unpair := func(base int64) {
		f.restore(rt, base)
		f.restore(rt2, base+8)
	}
	switch {
	case w&0xffc003e0 == 0xa98003e0: // stp xt, xt2, [sp, #imm]!
		f.adjust(imm7)
		pair(0)
	case w&0xffc003e0 == 0xa90003e0: // stp xt, xt2, [sp, #imm]
		pair(imm7)
	case w&0xffc003e0 == 0x6d8003e0: // stp dt, dt2, [sp, #imm]!
		f.adjust(imm7)
	case w&0xffe00fe0 == 0xf8000fe0: // str xt, [sp, #imm]!
		f.adjust(imm9)
		if kept(rt) {
			f.save(rt, 0)
		}
	case w&0xffc003e0 == 0xf90003e0 && kept(rt): // str xt, [sp, #imm]
		f.save(rt, int64(w>>10&0xfff)*8)
	case w&0xff8003ff == 0xd10003ff: // sub sp, sp, #imm
		f.adjust(-imm12)
	case w&0xff8003ff == 0x910003ff: // add sp, sp, #imm
		f.adjust(imm12)
	case w&0xff8003ff == 0x910003fd: // add x29, sp, #imm (mov x29, sp)
		f.setFP(29, imm12)
	case w == 0x910003bf: // mov sp, x29
		f.fromFP(29, 0)
	case w&0xffe0ffff == 0xcb2063ff: // sub sp, sp, xm
		if int(w>>16&0x1f) == d.constReg {
			f.adjust(-int64(d.constVal))
		} else {
			f.Dynamic = true
		}
	case w&0xffe0ffff == 0x8b2063ff: // add sp, sp, xm
		if int(w>>16&0x1f) == d.constReg {
			f.adjust(int64(d.constVal))
		}
	case w&0xff800000 == 0xd2800000: // movz xd, #imm16, lsl #hw
		d.constReg, d.constVal = rt, uint64(w>>5&0xffff)<<(16*(w>>21&3))
		return in, true
	case w&0xff800000 == 0xf2800000 && rt == d.constReg: // movk xd, #imm16, lsl #hw
		sh := 16 * (w >> 21 & 3)
		d.constVal = d.constVal&^(0xffff<<sh) | uint64(w>>5&0xffff)<<sh
		return in, true
	case w&0xffc003e0 == 0xa8c003e0: // ldp xt, xt2, [sp], #imm
		unpair(0)
		f.adjust(imm7)
	case w&0xffc003e0 == 0xa94003e0: // ldp xt, xt2, [sp, #imm]
		unpair(imm7)
	case w&0xffc003e0 == 0x6cc003e0: // ldp dt, dt2, [sp], #imm
		f.adjust(imm7)
	case w&0xffe00fe0 == 0xf84007e0: // ldr xt, [sp], #imm
		f.restore(rt, 0)
		f.adjust(imm9)
	case w&0xffc003e0 == 0xf94003e0: // ldr xt, [sp, #imm]
		f.restore(rt, int64(w>>10&0xfff)*8)
	case w&0xfffffc1f == 0xd65f0000, w == 0xd65f0bff, w == 0xd65f0fff: // ret, retaa, retab
		in.end = true
	case w&0xfc000000 == 0x94000000, w&0xfffffc1f == 0xd63f0000: // bl, blr
		in.call = true
	case w&0xfffffc1f == 0xd61f0000: // br xn: a tail call or a switch
		in.end, in.indirect = true, true
	case w&0xfc000000 == 0x14000000: // b
		in.branch, in.target, in.end = true, uint64(int64(addr)+sext(w&0x3ffffff, 26)*4), true
	case w&0xff000010 == 0x54000000: // b.cond
		in.branch, in.target = true, uint64(int64(addr)+sext(w>>5&0x7ffff, 19)*4)
	case w&0x7e000000 == 0x34000000: // cbz, cbnz
		in.branch, in.target = true, uint64(int64(addr)+sext(w>>5&0x7ffff, 19)*4)
	case w&0x7e000000 == 0x36000000: // tbz, tbnz
		in.branch, in.target = true, uint64(int64(addr)+sext(w>>5&0x3fff, 14)*4)
	}
	if w&0xff000000 != 0xd1000000 && w&0xff000000 != 0xcb000000 {
		d.constReg = -1 // a constant is used by the next instruction or lost
	}
	return in, true
}
