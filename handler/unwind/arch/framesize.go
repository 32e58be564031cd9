package arch

import "encoding/binary"

// x86 frames without unwind tables (musl's own code, programs built with
// -fno-asynchronous-unwind-tables): calls push the return address, and the
// scan cannot tell a return address left in a frame's locals by an earlier
// call through a pointer from the live one above it. The size of the frame
// can: these decode the start of a function whose address a program takes
// (main, handed to __libc_start_main) and the pushes and stack adjustment
// its prologue makes.

// takenX86 emits the code addresses a sweep of code (at file address vaddr)
// finds loaded as constants: `mov $imm32, %r` (non-PIE) and
// `lea rel32(%rip), %r` (PIE). Most are functions whose address is taken
// (main, callbacks), some data or a jump table: callers keep those whose
// bytes open a frame (entryX86).
func takenX86(code []byte, vaddr uint64, emit func(uint64)) {
	for i := 0; i+7 <= len(code); i++ {
		c := code[i:]
		switch {
		case c[0]&0xf8 == 0x48 && c[1] == 0xc7 && c[2]&0xf8 == 0xc0:
			// REX.W C7 /0 id: mov $simm32, %r64.
			emit(uint64(int64(int32(binary.LittleEndian.Uint32(c[3:])))))
		case c[0]&0xfb == 0x48 && c[1] == 0x8d && c[2]&0xc7 == 0x05:
			// REX.W 8D /r, mod 00 rm 101: lea rel32(%rip), %r64.
			next := int64(vaddr) + int64(i) + 7
			emit(uint64(next + int64(int32(binary.LittleEndian.Uint32(c[3:])))))
		case c[0]&0xf8 == 0xb8 && (i == 0 || code[i-1]&0xf0 != 0x40):
			// B8+r id: mov $imm32, %r32 (zero-extended), without a REX
			// prefix (which would make it a 64-bit immediate).
			emit(uint64(binary.LittleEndian.Uint32(c[1:])))
		}
	}
}

// frameX86 decodes a function's prologue from its start (code holds the
// bytes from the start up to the PC, at most MaxPrologue) and returns the
// bytes it put on the stack below the return address: its pushes and its
// `sub $n, %rsp`. It stops at the first instruction that is not one of
// those, an endbr64 or a move between registers (which compilers schedule
// among the pushes); ok is false when nothing was pushed or subtracted.
func frameX86(code []byte) (size uint64, ok bool) {
	for i := 0; i < len(code); {
		c := code[i:]
		switch {
		case len(c) >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa:
			i += 4 // endbr64
		case c[0]&0xf8 == 0x50:
			size += 8 // push %r
			i++
		case len(c) >= 2 && c[0]&0xfe == 0x40 && c[1]&0xf8 == 0x50:
			size += 8 // push %r8-r15
			i += 2
		case len(c) >= 3 && c[0]&0xf0 == 0x40 && (c[1] == 0x89 || c[1] == 0x8b) && c[2]&0xc0 == 0xc0:
			if movToRSP(c[0], c[1], c[2]) {
				return size, false // the frame is not one this decodes
			}
			i += 3 // mov %r, %r, with a REX prefix
		case len(c) >= 2 && (c[0] == 0x89 || c[0] == 0x8b) && c[1]&0xc0 == 0xc0:
			if movToRSP(0, c[0], c[1]) {
				return size, false
			}
			i += 2 // mov %r32, %r32
		case len(c) >= 4 && c[0] == 0x48 && c[1] == 0x83 && c[2] == 0xec:
			size += uint64(c[3]) // sub $imm8, %rsp (imm8 is sign-extended: 0-127 here)
			if c[3] >= 0x80 {
				return size, false
			}
			return size, true
		case len(c) >= 7 && c[0] == 0x48 && c[1] == 0x81 && c[2] == 0xec:
			n := binary.LittleEndian.Uint32(c[3:])
			if n >= 1<<24 {
				return size, false
			}
			return size + uint64(n), true
		default:
			return size, size > 0
		}
	}
	return size, size > 0
}

// MaxPrologue bounds the bytes FrameSize decodes.
const MaxPrologue = 64

// movToRSP reports whether the register move op (89 or 8B, ModRM mod 11,
// after the REX prefix rex or 0) writes %rsp.
func movToRSP(rex, op, modrm byte) bool {
	if op == 0x89 { // r/m <- reg: the destination is rm, extended by REX.B
		return modrm&7 == 4 && rex&1 == 0
	}
	return modrm>>3&7 == 4 && rex&4 == 0 // reg <- r/m: reg, extended by REX.R
}
