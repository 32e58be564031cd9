package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// This file holds the helpers the tests use to hand-assemble CFI: LEB128
// encoders, a section builder for .eh_frame / .debug_frame, and a fake
// memory.

func uleb(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		out = append(out, c)
		if v == 0 {
			return out
		}
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		done := (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0)
		if !done {
			c |= 0x80
		}
		out = append(out, c)
		if done {
			return out
		}
	}
}

// cat joins byte pieces; each argument is a byte, an int (taken as one
// byte), or a []byte.
func cat(parts ...any) []byte {
	var out []byte
	for _, p := range parts {
		switch v := p.(type) {
		case byte:
			out = append(out, v)
		case int:
			if v < 0 || v > 0xff {
				panic(fmt.Sprintf("cat: %d is not a byte", v))
			}
			out = append(out, byte(v))
		case []byte:
			out = append(out, v...)
		default:
			panic(fmt.Sprintf("cat: %T", p))
		}
	}
	return out
}

// cieSpec describes a CIE to assemble.
type cieSpec struct {
	version   byte
	aug       string
	codeAlign uint64
	dataAlign int64
	ra        uint64
	augData   []byte // written (with its ULEB length) when aug starts with 'z'
	initial   []byte
	is64      bool   // 64-bit DWARF length
	extra     []byte // after the augmentation string ("eh" data)
}

// fdeSpec describes an FDE to assemble.
type fdeSpec struct {
	start, length uint64
	augData       []byte // written (with its length) when the CIE has 'z'
	insns         []byte
	is64          bool
}

// section assembles a CFI section.
type section struct {
	b        []byte
	order    binary.ByteOrder
	ptr      int
	addr     uint64 // address of b[0], for pcrel
	dataBase uint64 // base for datarel
	debug    bool   // .debug_frame: CIE id 0xffffffff, absolute CIE pointers
	noPad    bool
}

func newSection(debug bool, ptr int, order binary.ByteOrder, addr uint64) *section {
	return &section{order: order, ptr: ptr, addr: addr, debug: debug}
}

func (s *section) u8(v byte) { s.b = append(s.b, v) }
func (s *section) u16(v uint16) {
	var b [2]byte
	s.order.PutUint16(b[:], v)
	s.b = append(s.b, b[:]...)
}
func (s *section) u32(v uint32) {
	var b [4]byte
	s.order.PutUint32(b[:], v)
	s.b = append(s.b, b[:]...)
}
func (s *section) u64(v uint64) {
	var b [8]byte
	s.order.PutUint64(b[:], v)
	s.b = append(s.b, b[:]...)
}
func (s *section) raw(b []byte) { s.b = append(s.b, b...) }

// ptrEnc writes v in pointer encoding enc.
func (s *section) ptrEnc(enc byte, v uint64) {
	switch enc & 0x70 {
	case dwEHPEpcrel:
		v -= s.addr + uint64(len(s.b))
	case dwEHPEdatarel:
		v -= s.dataBase
	}
	switch enc & 0x0f {
	case dwEHPEabsptr:
		if s.ptr == 4 {
			s.u32(uint32(v))
		} else {
			s.u64(v)
		}
	case dwEHPEuleb128:
		s.raw(uleb(v))
	case dwEHPEsleb128:
		s.raw(sleb(int64(v)))
	case dwEHPEudata2, dwEHPEsdata2:
		s.u16(uint16(v))
	case dwEHPEudata4, dwEHPEsdata4:
		s.u32(uint32(v))
	case dwEHPEudata8, dwEHPEsdata8:
		s.u64(v)
	default:
		panic(fmt.Sprintf("ptrEnc %#x", enc))
	}
}

// begin writes a length placeholder and returns a function that patches it
// after padding the entry to the pointer size with DW_CFA_nop.
func (s *section) begin(is64 bool) (start int, end func()) {
	lenOff := len(s.b)
	if is64 {
		s.u32(0xffffffff)
		s.u64(0)
	} else {
		s.u32(0)
	}
	start = len(s.b)
	return start, func() {
		if !s.noPad {
			for (len(s.b)-lenOff)%s.ptr != 0 {
				s.u8(0)
			}
		}
		n := uint64(len(s.b) - start)
		if is64 {
			s.order.PutUint64(s.b[lenOff+4:], n)
		} else {
			s.order.PutUint32(s.b[lenOff:], uint32(n))
		}
	}
}

// cie assembles a CIE and returns its offset.
func (s *section) cie(c cieSpec) uint64 {
	off := uint64(len(s.b))
	_, end := s.begin(c.is64)
	// With a 64-bit length the id is 8 bytes in both sections, as readelf
	// and GDB read it (LLVM's libunwind keeps .eh_frame ids 4 bytes; no
	// toolchain emits 64-bit .eh_frame entries).
	switch {
	case !s.debug && c.is64:
		s.u64(0)
	case !s.debug:
		s.u32(0)
	case c.is64:
		s.u64(^uint64(0))
	default:
		s.u32(0xffffffff)
	}
	v := c.version
	if v == 0 {
		v = 1
	}
	s.u8(v)
	s.raw([]byte(c.aug))
	s.u8(0)
	s.raw(c.extra) // "eh": the exception table pointer
	if v == 4 {
		s.u8(byte(s.ptr))
		s.u8(0)
	}
	s.raw(uleb(c.codeAlign))
	s.raw(sleb(c.dataAlign))
	if v == 1 {
		s.u8(byte(c.ra))
	} else {
		s.raw(uleb(c.ra))
	}
	if len(c.aug) > 0 && c.aug[0] == 'z' {
		s.raw(uleb(uint64(len(c.augData))))
		s.raw(c.augData)
	}
	s.raw(c.initial)
	end()
	return off
}

// fde assembles an FDE for the CIE at cieOff, its addresses in encoding
// enc (ignored in .debug_frame, which always uses absolute addresses), and
// returns its offset.
func (s *section) fde(cieOff uint64, enc byte, hasZ bool, f fdeSpec) uint64 {
	off := uint64(len(s.b))
	idField, end := s.begin(f.is64)
	switch {
	case s.debug && f.is64:
		s.u64(cieOff)
	case s.debug:
		s.u32(uint32(cieOff))
	case f.is64:
		s.u64(uint64(idField) - cieOff)
	default:
		s.u32(uint32(uint64(idField) - cieOff))
	}
	if s.debug {
		enc = dwEHPEabsptr
	}
	s.ptrEnc(enc, f.start)
	s.ptrEnc(enc&0x0f, f.length)
	if hasZ {
		s.raw(uleb(uint64(len(f.augData))))
		s.raw(f.augData)
	}
	s.raw(f.insns)
	end()
	return off
}

// terminator writes .eh_frame's zero terminator.
func (s *section) terminator() { s.u32(0) }

// ehHdr builds an .eh_frame_hdr at hdrAddr for an .eh_frame at ehAddr,
// with a datarel sdata4 search table over (start, fde offset) pairs.
func ehHdr(order binary.ByteOrder, hdrAddr, ehAddr uint64, entries [][2]uint64) []byte {
	h := &section{order: order, ptr: 8, addr: hdrAddr, dataBase: hdrAddr}
	h.u8(1)
	h.u8(dwEHPEpcrel | dwEHPEsdata4)
	h.u8(dwEHPEudata4)
	h.u8(dwEHPEdatarel | dwEHPEsdata4)
	h.ptrEnc(dwEHPEpcrel|dwEHPEsdata4, ehAddr)
	h.u32(uint32(len(entries)))
	for _, e := range entries {
		h.ptrEnc(dwEHPEdatarel|dwEHPEsdata4, e[0])
		h.ptrEnc(dwEHPEdatarel|dwEHPEsdata4, ehAddr+e[1])
	}
	return h.b
}

// fakeMem is sparse memory: a map from address to byte. Reading a byte it
// does not hold fails.
type fakeMem map[uint64]byte

var errUnmapped = errors.New("unmapped")

func (m fakeMem) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		b, ok := m[uint64(off)+uint64(i)]
		if !ok {
			return i, errUnmapped
		}
		p[i] = b
	}
	return len(p), nil
}

func (m fakeMem) put64(order binary.ByteOrder, addr, v uint64) {
	var b [8]byte
	order.PutUint64(b[:], v)
	for i, c := range b {
		m[addr+uint64(i)] = c
	}
}

func (m fakeMem) put32(order binary.ByteOrder, addr uint64, v uint32) {
	var b [4]byte
	order.PutUint32(b[:], v)
	for i, c := range b {
		m[addr+uint64(i)] = c
	}
}

var (
	archX86   = Arch{PtrSize: 8, Order: binary.LittleEndian}
	archARM64 = Arch{PtrSize: 8, Order: binary.LittleEndian, AArch64: true}
)

// x86-64 DWARF register numbers used in tests.
const (
	rRBX = 3
	rRBP = 6
	rRSP = 7
	rR12 = 12
	rRA  = 16
)
