package arch

import (
	"bytes"
	"encoding/binary"
)

// Call is the call instruction found just before a return address.
type Call struct {
	// Direct calls name their target; indirect ones (through a register or
	// memory) do not, and cannot be checked against the callee.
	Direct bool
	Target uint64 // direct calls: the callee's address, Thumb bit clear
	Size   int    // bytes of the call instruction: it starts at RA − Size
	// TargetThumb: ARM32, the callee is Thumb code (BL from Thumb, BLX
	// from A32).
	TargetThumb bool
}

// CallBefore decodes the call instruction ending at the return address
// ra. before holds the bytes just before ra (its last byte is at ra−1; it
// may be shorter near the start of a segment); thumb is the caller's
// instruction set (ARM32: bit 0 of the return address).
type CallBefore func(before []byte, ra uint64, thumb bool) (Call, bool)

// MaxCallSize is the most bytes any CallBefore looks at.
const MaxCallSize = 8

func sext(v uint64, bits uint) int64 {
	return int64(v<<(64-bits)) >> (64 - bits)
}

func tailU32(b []byte, back int) (uint32, bool) {
	if len(b) < back {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b[len(b)-back:]), true
}

func tailU16(b []byte, back int) (uint16, bool) {
	if len(b) < back {
		return 0, false
	}
	return binary.LittleEndian.Uint16(b[len(b)-back:]), true
}

// callAArch64 decodes BL, BLR and the pointer-authenticating BLRAA, BLRAB,
// BLRAAZ, BLRABZ (Arm ARM C6.2).
func callAArch64(b []byte, ra uint64, _ bool) (Call, bool) {
	w, ok := tailU32(b, 4)
	if !ok {
		return Call{}, false
	}
	switch {
	case w&0xFC000000 == 0x94000000: // BL imm26
		return Call{Direct: true, Target: uint64(int64(ra-4) + sext(uint64(w&0x03FFFFFF), 26)*4), Size: 4}, true
	case w&0xFFFFFC1F == 0xD63F0000, // BLR Xn
		w&0xFFFFF800 == 0xD73F0800, // BLRAA, BLRAB Xn, Xm
		w&0xFFFFF81F == 0xD63F081F: // BLRAAZ, BLRABZ Xn
		return Call{Size: 4}, true
	}
	return Call{}, false
}

// callARM decodes A32 BL, BLX (immediate), BLX (register) and, in Thumb
// state, the 32-bit BL/BLX and the 16-bit BLX (register) (Arm ARM A8.8.25,
// A8.8.26).
func callARM(b []byte, ra uint64, thumb bool) (Call, bool) {
	if !thumb {
		w, ok := tailU32(b, 4)
		if !ok || ra%4 != 0 {
			return Call{}, false
		}
		imm := sext(uint64(w&0x00FFFFFF), 24) * 4
		switch {
		case w&0xFE000000 == 0xFA000000: // BLX imm: to Thumb, H is bit 24
			return Call{Direct: true, Target: uint64(int64(ra+4)+imm+int64(w>>24&1)*2) & 0xffffffff, Size: 4, TargetThumb: true}, true
		case w>>28 == 0xF:
			return Call{}, false
		case w&0x0F000000 == 0x0B000000: // BL<c> imm
			return Call{Direct: true, Target: uint64(int64(ra+4)+imm) & 0xffffffff, Size: 4}, true
		case w&0x0FFFFFF0 == 0x012FFF30: // BLX<c> Rm
			return Call{Size: 4}, true
		}
		return Call{}, false
	}
	if hw1, ok := tailU16(b, 4); ok {
		hw2, _ := tailU16(b, 2)
		if hw1&0xF800 == 0xF000 && (hw2&0xD000 == 0xD000 || hw2&0xD001 == 0xC000) {
			s := uint32(hw1>>10) & 1
			j1, j2 := uint32(hw2>>13)&1, uint32(hw2>>11)&1
			i1, i2 := ^(j1^s)&1, ^(j2^s)&1
			imm := s<<24 | i1<<23 | i2<<22 | uint32(hw1&0x3FF)<<12 | uint32(hw2&0x7FF)<<1
			off := sext(uint64(imm), 25)
			if hw2&0xD000 == 0xD000 { // BL: stays in Thumb
				return Call{Direct: true, Target: uint64(int64(ra)+off) & 0xffffffff, Size: 4, TargetThumb: true}, true
			}
			// BLX imm: to ARM state, from Align(PC, 4).
			return Call{Direct: true, Target: uint64(int64(ra&^3)+off) & 0xfffffffc, Size: 4}, true
		}
	}
	if h, ok := tailU16(b, 2); ok && h&0xFF87 == 0x4780 { // BLX Rm
		return Call{Size: 2}, true
	}
	return Call{}, false
}

// callRISCV decodes JAL ra, JALR ra and C.JALR (RISC-V unprivileged ISA
// §2.5, §16.4). Only calls that link into ra count: JAL with rd = t0 is a
// millicode call, not a frame.
func callRISCV(b []byte, ra uint64, _ bool) (Call, bool) {
	if w, ok := tailU32(b, 4); ok {
		switch {
		case w&0xFFF == 0x0EF: // JAL ra, imm
			imm := uint64(w>>31&1)<<20 | uint64(w>>21&0x3FF)<<1 | uint64(w>>20&1)<<11 | uint64(w>>12&0xFF)<<12
			return Call{Direct: true, Target: uint64(int64(ra-4) + sext(imm, 21)), Size: 4}, true
		case w&0x7FFF == 0x00E7: // JALR ra, rs1, imm
			return Call{Size: 4}, true
		}
	}
	if h, ok := tailU16(b, 2); ok && h&0xF07F == 0x9002 && h>>7&0x1F != 0 { // C.JALR rs1
		return Call{Size: 2}, true
	}
	return Call{}, false
}

// callX86 decodes CALL rel32 (E8) and CALL r/m64 (FF /2) with any ModRM
// form, optionally after a REX prefix (Intel SDM vol. 2A, "CALL").
func callX86(b []byte, ra uint64, _ bool) (Call, bool) {
	if len(b) >= 5 && b[len(b)-5] == 0xE8 {
		rel := int32(binary.LittleEndian.Uint32(b[len(b)-4:]))
		return Call{Direct: true, Target: uint64(int64(ra) + int64(rel)), Size: 5}, true
	}
	for n := 2; n <= 7 && n <= len(b); n++ {
		i := len(b) - n
		if b[i] != 0xFF || modrmLen(b[i+1:]) != n-1 || b[i+1]>>3&7 != 2 {
			continue
		}
		size := n
		if i > 0 && b[i-1]&0xF0 == 0x40 {
			size++
		}
		return Call{Size: size}, true
	}
	return Call{}, false
}

// modrmLen is the length of a ModRM byte with its SIB and displacement, in
// 64-bit mode.
func modrmLen(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	mod, rm := b[0]>>6, b[0]&7
	n := 1
	if mod != 3 && rm == 4 {
		n++ // SIB
		if mod == 0 && len(b) > 1 && b[1]&7 == 5 {
			n += 4 // SIB with no base: disp32
		}
	}
	switch {
	case mod == 0 && rm == 5:
		n += 4 // RIP-relative
	case mod == 1:
		n++
	case mod == 2:
		n += 4
	}
	return n
}

// PLT stubs are where direct calls to another module land: the stub jumps
// on through the GOT. A call whose target is a stub cannot be checked
// against the callee any further.

func pltAArch64(code []byte) bool {
	w, ok := headU32(code)
	return ok && w&0x9F00001F == 0x90000010 // adrp x16, …
}

func pltARM(code []byte) bool {
	if len(code) >= 2 && binary.LittleEndian.Uint16(code) == 0x4778 {
		return true // Thumb entry veneer: bx pc; nop (then the ARM entry)
	}
	w, ok := headU32(code)
	// GNU ld and lld: add ip, pc, #…, or the long form movw ip, #…
	if ok && (w&0xFFFFF000 == 0xE28FC000 || w&0xFFF0F000 == 0xE300C000) {
		return true
	}
	// mold: ldr ip, [pc, #4]; add ip, ip, pc; ldr pc, [ip]
	return len(code) >= 12 && w == 0xE59FC004 &&
		binary.LittleEndian.Uint32(code[4:]) == 0xE08CC00F &&
		binary.LittleEndian.Uint32(code[8:]) == 0xE59CF000
}

func pltRISCV(code []byte) bool {
	w, ok := headU32(code)
	return ok && w&0xFFF == 0xE17 // auipc t3, …
}

func pltX86(code []byte) bool {
	if len(code) >= 4 && code[0] == 0xF3 && code[1] == 0x0F && code[2] == 0x1E && code[3] == 0xFA {
		code = code[4:] // endbr64
	}
	if len(code) >= 1 && code[0] == 0xF2 {
		code = code[1:] // bnd
	}
	return len(code) >= 2 && code[0] == 0xFF && code[1] == 0x25 // jmp *rel32(%rip)
}

// entryX86 reports whether code begins as x86-64 functions do: endbr64,
// push of rbp, rbx or r12–r15, or sub from rsp. The instruction after a
// call rarely does.
func entryX86(code []byte) bool {
	switch {
	case bytes.HasPrefix(code, []byte{0xf3, 0x0f, 0x1e, 0xfa}):
		return true
	case len(code) >= 1 && (code[0] == 0x55 || code[0] == 0x53):
		return true
	case len(code) >= 2 && code[0] == 0x41 && code[1] >= 0x54 && code[1] <= 0x57:
		return true
	case bytes.HasPrefix(code, []byte{0x48, 0x83, 0xec}), bytes.HasPrefix(code, []byte{0x48, 0x81, 0xec}):
		return true
	}
	return false
}

// pltPushesX86 decodes a PLT stub from its start up to the PC (code holds
// those bytes) and counts the pushes executed: a lazy stub pushes the
// relocation index before it jumps to the resolver, which pushes the
// GOT's link map (mold passes the index in r11, pushed by its resolver). The instructions are those GNU ld, lld and mold write
// (with IBT and without); any other, or a PC inside an instruction, is
// refused.
func pltPushesX86(code []byte) (int, bool) {
	n := 0
	for i := 0; i < len(code); {
		c := code[i:]
		size, push := 0, false
		for _, in := range x86StubInsns {
			if bytes.HasPrefix(c, in.op) {
				size, push = in.size, in.push
				break
			}
		}
		if size == 0 || i+size > len(code) {
			return 0, false
		}
		if push {
			n++
		}
		i += size
	}
	return n, true
}

var x86StubInsns = []struct {
	op   []byte
	size int
	push bool
}{
	{[]byte{0xf3, 0x0f, 0x1e, 0xfa}, 4, false},             // endbr64
	{[]byte{0xff, 0x25}, 6, false},                         // jmp *rel32(%rip)
	{[]byte{0xf2, 0xff, 0x25}, 7, false},                   // bnd jmp *rel32(%rip)
	{[]byte{0xff, 0x35}, 6, true},                          // push rel32(%rip)
	{[]byte{0x68}, 5, true},                                // push $imm32
	{[]byte{0x41, 0xbb}, 6, false},                         // mov $imm32, %r11d (mold: the index)
	{[]byte{0x41, 0x53}, 2, true},                          // push %r11 (mold's resolver entry)
	{[]byte{0xe9}, 5, false},                               // jmp rel32
	{[]byte{0xf2, 0xe9}, 6, false},                         // bnd jmp rel32
	{[]byte{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, 6, false}, // nopw 0(%rax,%rax)
	{[]byte{0x0f, 0x1f, 0x80, 0, 0, 0, 0}, 7, false},       // nopl 0(%rax)
	{[]byte{0x0f, 0x1f, 0x44, 0x00, 0x00}, 5, false},       // nopl 0(%rax,%rax)
	{[]byte{0x0f, 0x1f, 0x40, 0x00}, 4, false},             // nopl 0(%rax)
	{[]byte{0x0f, 0x1f, 0x00}, 3, false},                   // nopl (%rax)
	{[]byte{0x66, 0x90}, 2, false},                         // xchg %ax,%ax
	{[]byte{0x90}, 1, false},                               // nop
	{[]byte{0xcc}, 1, false},                               // int3 (padding)
}

func headU32(b []byte) (uint32, bool) {
	if len(b) < 4 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b), true
}

// MaxTailCode is the most bytes a TailBranch decoder looks at.
const MaxTailCode = 16

// tailAArch64 finds B imm26 among the first four instructions, none of
// them a branch, call, return or system instruction before it (Arm ARM
// C4.1: the "branches, exception generating and system instructions"
// encoding group is op0 = 101x).
func tailAArch64(code []byte, at uint64) (uint64, bool) {
	for i := 0; i+4 <= len(code) && i < 16; i += 4 {
		w := binary.LittleEndian.Uint32(code[i:])
		if w&0xFC000000 == 0x14000000 { // B imm26
			return uint64(int64(at) + int64(i) + sext(uint64(w&0x03FFFFFF), 26)*4), true
		}
		if w>>26&0x7 == 0x5 {
			return 0, false
		}
	}
	return 0, false
}

// tailRISCV finds J (JAL x0) or C.J among the first four instructions,
// none of them another control transfer (RISC-V unprivileged ISA §2.5,
// §16.4).
func tailRISCV(code []byte, at uint64) (uint64, bool) {
	i := 0
	for n := 0; n < 4 && i+2 <= len(code); n++ {
		h := binary.LittleEndian.Uint16(code[i:])
		if h&3 != 3 { // compressed
			switch {
			case h&0xE003 == 0xA001: // C.J
				imm := uint64(h>>12&1)<<11 | uint64(h>>11&1)<<4 | uint64(h>>9&3)<<8 | uint64(h>>8&1)<<10 |
					uint64(h>>7&1)<<6 | uint64(h>>6&1)<<7 | uint64(h>>3&7)<<1 | uint64(h>>2&1)<<5
				return uint64(int64(at) + int64(i) + sext(imm, 12)), true
			case h&0xC003 == 0xC001, // C.BEQZ, C.BNEZ
				h&0xE07F == 0x8002 && h>>7&0x1F != 0, // C.JR
				h&0xF07F == 0x9002 && h>>7&0x1F != 0, // C.JALR
				h == 0x9002:                          // C.EBREAK
				return 0, false
			}
			i += 2
			continue
		}
		if i+4 > len(code) {
			return 0, false
		}
		w := binary.LittleEndian.Uint32(code[i:])
		switch w & 0x7F {
		case 0x6F: // JAL
			if w>>7&0x1F != 0 {
				return 0, false // a call, not a jump
			}
			imm := uint64(w>>31&1)<<20 | uint64(w>>21&0x3FF)<<1 | uint64(w>>20&1)<<11 | uint64(w>>12&0xFF)<<12
			return uint64(int64(at) + int64(i) + sext(imm, 21)), true
		case 0x63, 0x67, 0x73: // branches, JALR, SYSTEM
			return 0, false
		}
		i += 4
	}
	return 0, false
}

// tailX86 finds JMP rel32 or rel8 as the first instruction, after an
// optional ENDBR64 and at most three register-to-register MOV or XOR
// (with or without REX.W: argument shuffles and zeroing).
func tailX86(code []byte, at uint64) (uint64, bool) {
	i := 0
	if len(code) >= 4 && code[0] == 0xF3 && code[1] == 0x0F && code[2] == 0x1E && code[3] == 0xFA {
		i = 4
	}
	for n := 0; n <= 3 && i < len(code); n++ {
		switch code[i] {
		case 0xE9:
			if i+5 > len(code) {
				return 0, false
			}
			rel := int32(binary.LittleEndian.Uint32(code[i+1:]))
			return uint64(int64(at) + int64(i) + 5 + int64(rel)), true
		case 0xEB:
			if i+2 > len(code) {
				return 0, false
			}
			return uint64(int64(at) + int64(i) + 2 + int64(int8(code[i+1]))), true
		}
		j := i
		if code[j]&0xF0 == 0x40 { // REX
			j++
		}
		if j+2 > len(code) || (code[j] != 0x89 && code[j] != 0x31 && code[j] != 0x8B) || code[j+1]>>6 != 3 {
			return 0, false
		}
		i = j + 2
	}
	return 0, false
}

// Direct-call sweeps: every position a call may start at (x86_64: any
// byte; AArch64: every word; RISC-V: every halfword, for the C
// extension). Their targets are function starts.

func sweepX86(code []byte, vaddr uint64, emit func(uint64)) {
	for i := 0; i+5 <= len(code); i++ {
		j := bytes.IndexByte(code[i:len(code)-4], 0xE8)
		if j < 0 {
			return
		}
		i += j
		if rel := int32(binary.LittleEndian.Uint32(code[i+1:])); rel != 0 { // call +0 reads the PC
			emit(uint64(int64(vaddr) + int64(i) + 5 + int64(rel)))
		}
	}
}

func sweepAArch64(code []byte, vaddr uint64, emit func(uint64)) {
	for i := 0; i+4 <= len(code); i += 4 {
		if w := binary.LittleEndian.Uint32(code[i:]); w&0xFC000000 == 0x94000000 {
			emit(uint64(int64(vaddr) + int64(i) + sext(uint64(w&0x03FFFFFF), 26)*4))
		}
	}
}

func sweepRISCV(code []byte, vaddr uint64, emit func(uint64)) {
	for i := 0; i+4 <= len(code); i += 2 {
		if w := binary.LittleEndian.Uint32(code[i:]); w&0xFFF == 0x0EF {
			imm := uint64(w>>31&1)<<20 | uint64(w>>21&0x3FF)<<1 | uint64(w>>20&1)<<11 | uint64(w>>12&0xFF)<<12
			emit(uint64(int64(vaddr) + int64(i) + sext(imm, 21)))
		}
	}
}

// sweepARM emits the targets of BL and BLX imm, read both as Thumb-2
// halfword pairs and as A32 words: stripped files keep no mapping symbols
// to tell the two apart, and programs mix them (an -marm program links
// glibc's Thumb-2 objects). Thumb-2 code read as A32 words is full of
// words that decode as BL (add.w and its kin begin 0xeb): an A32 target
// is kept only where it opens a frame as A32 code does (a32Opens); A32
// leaves are not found. A pair that starts inside another instruction may
// still decode as a call: its target is a false start, which only makes
// validation refuse more.
func sweepARM(code []byte, vaddr uint64, emit func(uint64)) {
	for i := 0; i+4 <= len(code); i += 2 {
		if i%4 == 0 && vaddr%4 == 0 {
			if c, ok := callARM(code[i:i+4], vaddr+uint64(i)+4, false); ok && c.Direct && !c.TargetThumb {
				if t := c.Target - vaddr; t < uint64(len(code)) && a32Opens(code[t:]) {
					emit(c.Target)
				}
			}
		}
		if binary.LittleEndian.Uint16(code[i:])&0xF800 != 0xF000 {
			continue
		}
		if c, ok := callARM(code[i:i+4], vaddr+uint64(i)+4, true); ok && c.Direct {
			emit(c.Target &^ 1)
		}
	}
}

// a32Opens reports whether code begins like an A32 function that opens a
// frame: within its first four words, all unconditional, a push/stmdb sp!
// with lr, str lr, [sp, #-4]!, mov ip, sp (APCS) or sub sp (the scheduler
// moves a few instructions above the push).
func a32Opens(code []byte) bool {
	for i := 0; i < 16 && i+4 <= len(code); i += 4 {
		w := binary.LittleEndian.Uint32(code[i:])
		switch {
		case w>>28 != 0xE:
			return false
		case w&0xFFFF4000 == 0xE92D4000, w == 0xE52DE004, w == 0xE1A0C00D, w&0xFFFFF000 == 0xE24DD000:
			return true
		}
	}
	return false
}

// MaxIndirectTail is the most bytes TailIndirect looks at.
const MaxIndirectTail = 64

// tailIndirectARM reports whether the function at the start of code
// (Thumb or A32) runs straight, through calls, to a jump through a
// register other than lr: it passes control on to a function its callers
// do not name (musl's __libc_start_main ends in bx r3 to
// libc_start_main_stage2). A return, any other branch or a conditional
// instruction that may write the PC ends the walk with false.
func tailIndirectARM(code []byte, thumb bool) bool {
	if !thumb {
		for i := 0; i+4 <= len(code); i += 4 {
			w := binary.LittleEndian.Uint32(code[i:])
			switch {
			case w&0x0FFFFFF0 == 0x012FFF10 || w&0x0FFFFFF0 == 0x01A0F000: // BX Rm, MOV pc, Rm
				return w>>28 == 0xE && w&0xF != 14
			case w&0x0F000000 == 0x0B000000 && w>>28 != 0xF, w&0x0FFFFFF0 == 0x012FFF30: // BL, BLX Rm: calls
			case w>>28 == 0xF, w&0x0E000000 == 0x0A000000, // BLX imm, B
				w&0x0E108000 == 0x08108000, // LDM with pc
				w&0x0000F000 == 0x0000F000: // anything else writing pc
				return false
			}
		}
		return false
	}
	for i := 0; i+2 <= len(code); {
		h := binary.LittleEndian.Uint16(code[i:])
		if h>>11 >= 0x1D { // 32-bit
			if i+4 > len(code) {
				return false
			}
			h2 := binary.LittleEndian.Uint16(code[i+2:])
			switch {
			case h&0xF800 == 0xF000 && (h2&0xD000 == 0xD000 || h2&0xD001 == 0xC000): // BL, BLX imm
			case h&0xF800 == 0xF000 && h2&0x8000 == 0x8000, // B, Bcc, other branches
				h&0xFFD0 == 0xE890 && h2&0x8000 != 0, h&0xFFD0 == 0xE910 && h2&0x8000 != 0, // LDM with pc
				h&0xFE50 == 0xE850 && h2&0xF000 == 0xF000, h&0xFF00 == 0xF800 && h2&0xF000 == 0xF000, // loads to pc
				h&0xFFF0 == 0xE8D0: // TBB, TBH
				return false
			}
			i += 4
			continue
		}
		switch {
		case h&0xFF87 == 0x4700: // BX Rm
			return h>>3&0xF != 14
		case h&0xFF87 == 0x4687: // MOV pc, Rm
			return h>>3&0xF != 14
		case h&0xFF87 == 0x4780: // BLX Rm: a call
		case h&0xFF00 == 0xBD00, h&0xF000 == 0xD000, h&0xF800 == 0xE000, // POP {pc}, Bcc/SVC, B
			h&0xF500 == 0xB100, h&0xFF00 == 0xBF00 && h&0xF != 0: // CBZ/CBNZ, IT
			return false
		}
		i += 2
	}
	return false
}
