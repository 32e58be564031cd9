// Package prologue recovers a frame from its function's prologue, for code
// the unwind tables leave out: glibc's abort on armhf has no .ARM.exidx
// entry of its own, and Debian's riscv64 libc has CFI for a quarter of its
// functions. It decodes the few instructions compilers use to set up a
// frame (push/stp-like stores, stack adjustments) from the function's start
// up to the PC, as gdb's prologue analyzers do. The function start comes
// from the caller (symbols, or an unwind-table entry).
//
// This is a low-trust method: frames it recovers are marked "prologue".
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
}

// ErrNoPrologue: no frame-setup instruction was found before the PC.
var ErrNoPrologue = errors.New("prologue: no frame setup before the pc")

// ErrWrongStart: a return instruction lies between the start and the PC,
// so the start belongs to an earlier function (stripped files give no
// symbols, and unwind tables cover up to the next entry). Better no frame
// than a wrong one.
var ErrWrongStart = errors.New("prologue: a return lies between the start and the pc: start unknown")

// maxInsns bounds the scan: prologues are a handful of instructions, and
// long scans on the wrong start only invent frames.
const maxInsns = 64

func newFrame() *Frame { return &Frame{Saved: map[int]int64{}} }

// push records n registers stored at the new SP in ascending order.
func (f *Frame) push(regs []int) {
	f.Size += 4 * uint64(len(regs))
	for i, r := range regs {
		if _, ok := f.Saved[r]; !ok {
			f.Saved[r] = -int64(f.Size) + 4*int64(i)
		}
	}
}

func maskRegs(mask uint32) []int {
	var rs []int
	for mask != 0 {
		r := bits.TrailingZeros32(mask)
		rs = append(rs, r)
		mask &^= 1 << r
	}
	return rs
}

// thumbExpandImm is ThumbExpandImm of the Arm ARM (A7.4.2).
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

// ARM analyses 32-bit ARM code (Thumb-2 when thumb) from start to pc;
// code holds the bytes at start.
func ARM(code []byte, start, pc uint64, thumb bool) (*Frame, error) {
	f := newFrame()
	le := binary.LittleEndian
	found := false
	for off, n := uint64(0), 0; start+off < pc && n < maxInsns; n++ {
		if thumb {
			if off+2 > uint64(len(code)) {
				break
			}
			hw := uint32(le.Uint16(code[off:]))
			if hw>>11 >= 0x1d { // 32-bit Thumb-2
				if off+4 > uint64(len(code)) {
					break
				}
				hw2 := uint32(le.Uint16(code[off+2:]))
				switch {
				case hw == 0xe92d: // push.w {mask}
					f.push(maskRegs(hw2 & 0x5fff))
					found = true
				case hw == 0xf84d && hw2&0x0fff == 0x0d04: // str.w rt, [sp, #-4]!
					f.push([]int{int(hw2 >> 12)})
					found = true
				case hw&0xfbef == 0xf1ad && hw2&0x8f00 == 0x0d00: // sub.w sp, sp, #const
					f.Size += uint64(thumbExpandImm((hw&0x400)<<1 | (hw2&0x7000)>>4 | hw2&0xff))
					found = true
				case hw&0xfbff == 0xf2ad && hw2&0x8f00 == 0x0d00: // subw sp, sp, #imm12
					f.Size += uint64((hw&0x400)<<1 | (hw2&0x7000)>>4 | hw2&0xff)
					found = true
				case hw&0xffbf == 0xed2d && hw2&0x0e00 == 0x0a00: // vpush
					f.Size += 4 * uint64(hw2&0xff)
					found = true
				case hw == 0xe8bd && hw2&0x8000 != 0, hw == 0xf85d && hw2 == 0xfb04: // pop.w {…, pc}; ldr pc, [sp], #4
					return nil, ErrWrongStart
				}
				off += 4
				continue
			}
			switch {
			case hw&0xfe00 == 0xb400: // push {r0-r7[, lr]}
				m := hw & 0xff
				if hw&0x100 != 0 {
					m |= 1 << 14
				}
				f.push(maskRegs(m))
				found = true
			case hw&0xff80 == 0xb080: // sub sp, #imm7*4
				f.Size += uint64(hw&0x7f) * 4
				found = true
			case hw&0xff00 == 0xbd00, hw == 0x4770: // pop {…, pc}; bx lr
				return nil, ErrWrongStart
			}
			off += 2
			continue
		}
		if off+4 > uint64(len(code)) {
			break
		}
		w := le.Uint32(code[off:])
		switch {
		case w&0xffff0000 == 0xe92d0000: // push {mask} (stmdb sp!)
			f.push(maskRegs(w & 0xffff))
			found = true
		case w&0xffff0fff == 0xe52d0004: // str rt, [sp, #-4]!
			f.push([]int{int(w>>12) & 0xf})
			found = true
		case w&0xfffff000 == 0xe24dd000: // sub sp, sp, #imm
			f.Size += uint64(bits.RotateLeft32(w&0xff, -int(2*((w>>8)&0xf))))
			found = true
		case w&0xffbf0e00 == 0xed2d0a00: // vpush
			f.Size += 4 * uint64(w&0xff)
			found = true
		case w&0xffff8000 == 0xe8bd8000, w == 0xe12fff1e, w == 0xe49df004: // pop {…, pc}; bx lr; ldr pc, [sp], #4
			return nil, ErrWrongStart
		}
		off += 4
	}
	if !found {
		return nil, ErrNoPrologue
	}
	return f, nil
}

// RISCV analyses RV64GC code from start to pc. x2 is sp.
func RISCV(code []byte, start, pc uint64) (*Frame, error) {
	f := newFrame()
	le := binary.LittleEndian
	found := false
	save := func(reg int, off int64) {
		if _, ok := f.Saved[reg]; !ok {
			f.Saved[reg] = -int64(f.Size) + off
		}
	}
	for off, n := uint64(0), 0; start+off < pc && n < maxInsns; n++ {
		if off+2 > uint64(len(code)) {
			break
		}
		hw := uint32(le.Uint16(code[off:]))
		if hw&3 != 3 { // compressed
			switch {
			case hw&0xef83 == 0x6101: // c.addi16sp
				imm := int32(hw>>12&1)<<9 | int32(hw>>6&1)<<4 | int32(hw>>5&1)<<6 | int32(hw>>3&3)<<7 | int32(hw>>2&1)<<5
				imm = imm << 22 >> 22
				if imm < 0 {
					f.Size += uint64(-imm)
					found = true
				}
			case hw&0xef83 == 0x0101: // c.addi sp, imm
				imm := int32(hw>>12&1)<<5 | int32(hw>>2&0x1f)
				imm = imm << 26 >> 26
				if imm < 0 {
					f.Size += uint64(-imm)
					found = true
				}
			case hw&0xe003 == 0xe002: // c.sdsp rs2, uimm(sp)
				rs2 := int(hw >> 2 & 0x1f)
				uimm := int64(hw>>10&7)<<3 | int64(hw>>7&7)<<6
				save(rs2, uimm)
			case hw == 0x8082: // c.jr ra (ret)
				return nil, ErrWrongStart
			}
			off += 2
			continue
		}
		if off+4 > uint64(len(code)) {
			break
		}
		w := le.Uint32(code[off:])
		switch {
		case w&0x000fffff == 0x00010113: // addi sp, sp, imm
			if imm := int32(w) >> 20; imm < 0 {
				f.Size += uint64(-imm)
				found = true
			}
		case w&0x707f == 0x3023 && (w>>15)&0x1f == 2: // sd rs2, imm(sp)
			imm := int64(int32(w)>>25)<<5 | int64(w>>7&0x1f)
			save(int(w>>20&0x1f), imm)
		case w == 0x00008067: // jalr x0, 0(ra) (ret)
			return nil, ErrWrongStart
		}
		off += 4
	}
	if !found {
		return nil, ErrNoPrologue
	}
	return f, nil
}
