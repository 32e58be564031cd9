package cfi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Pointer encodings, LSB 5.0 §10.5 "DWARF Exception Header Encoding".
const (
	dwEHPEabsptr   = 0x00
	dwEHPEuleb128  = 0x01
	dwEHPEudata2   = 0x02
	dwEHPEudata4   = 0x03
	dwEHPEudata8   = 0x04
	dwEHPEsleb128  = 0x09
	dwEHPEsdata2   = 0x0a
	dwEHPEsdata4   = 0x0b
	dwEHPEsdata8   = 0x0c
	dwEHPEpcrel    = 0x10
	dwEHPEtextrel  = 0x20
	dwEHPEdatarel  = 0x30
	dwEHPEfuncrel  = 0x40
	dwEHPEaligned  = 0x50
	dwEHPEindirect = 0x80
	dwEHPEomit     = 0xff
)

var errTruncated = errors.New("truncated")

// reader is a cursor over little- or big-endian bytes.
type reader struct {
	b     []byte
	off   int
	order binary.ByteOrder
	ptr   int
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, errTruncated
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) u8() (byte, error) {
	b, err := r.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// operand is the form of an instruction's operand.
type operand uint8

// The fixed-width forms are their size, plus fSigned for signed ones.
const (
	fNone   operand = 0
	fU1     operand = 1
	fU2     operand = 2
	fU4     operand = 4
	fU8     operand = 8
	fSigned operand = 0x10
	fS1             = fSigned | fU1
	fS2             = fSigned | fU2
	fS4             = fSigned | fU4
	fS8             = fSigned | fU8
	fAddr   operand = 0x20 // target address size (CIE or file)
	fULEB   operand = 0x21
	fSLEB   operand = 0x22
	fBlock  operand = 0x24 // a ULEB128 length; the block's bytes follow
	// In the opcode itself (or its table entry): nothing to read. A bit of
	// its own, so that decodes is one mask and two compares.
	fImplicit operand = 0x40
)

// operand decodes one operand of form f: the one place fixed-width and
// LEB128 operands of CFA instructions, DWARF operators and pointer
// encodings are decoded. A block's length is checked against what is
// left; its bytes are left for the caller to take. An implicit operand
// is not decoded (it is 0 here).
func (r *reader) operand(f operand) (uint64, error) {
	switch f {
	case fImplicit:
		return 0, nil
	case fULEB:
		return r.uleb()
	case fSLEB:
		v, err := r.sleb()
		return uint64(v), err
	case fBlock:
		n, err := r.uleb()
		if err == nil && n > uint64(len(r.b)-r.off) {
			err = errTruncated
		}
		return n, err
	case fAddr:
		f = fU8
		if r.ptr == 4 {
			f = fU4
		}
	}
	n := int(f &^ fSigned)
	if n > len(r.b)-r.off {
		return 0, errTruncated
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	switch f {
	case fU1:
		return uint64(b[0]), nil
	case fS1:
		return uint64(int8(b[0])), nil
	case fU2:
		return uint64(r.order.Uint16(b)), nil
	case fS2:
		return uint64(int16(r.order.Uint16(b))), nil
	case fU4:
		return uint64(r.order.Uint32(b)), nil
	case fS4:
		return uint64(int32(r.order.Uint32(b))), nil
	}
	return r.order.Uint64(b), nil
}

func (r *reader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) sleb() (int64, error) {
	var v int64
	var shift uint
	for {
		c, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

func (r *reader) cstring() (string, error) {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s, nil
		}
	}
	return "", errTruncated
}

// operands decodes an instruction's operands of forms f (fNone ends them)
// into args. An implicit operand keeps the value args has. A block operand
// comes last: its bytes are returned.
func (r *reader) operands(f *[2]operand, args *[2]uint64) (blk []byte, err error) {
	for i, form := range f {
		switch form {
		case fNone:
			return blk, nil
		case fImplicit:
			continue
		}
		if args[i], err = r.operand(form); err != nil {
			return nil, err
		}
		if form == fBlock {
			blk, _ = r.bytes(int(args[i])) // operand checked the length
		}
	}
	return blk, nil
}

// decodes says whether forms f have an operand to read: a check the
// interpreters make inline, since most operators have none.
func decodes(f *[2]operand) bool {
	return f[0]&^fImplicit != fNone || f[1] != fNone
}

// encForm is the operand form of each pointer encoding's low nibble
// (fNone where the nibble is undefined).
var encForm = [16]operand{
	dwEHPEabsptr:  fAddr,
	dwEHPEuleb128: fULEB,
	dwEHPEudata2:  fU2,
	dwEHPEudata4:  fU4,
	dwEHPEudata8:  fU8,
	dwEHPEsleb128: fSLEB,
	dwEHPEsdata2:  fS2,
	dwEHPEsdata4:  fS4,
	dwEHPEsdata8:  fS8,
}

// encSize is the size of a fixed-size encoding, 0 for LEB128 or omit.
func encSize(enc byte, ptr int) int {
	switch f := encForm[enc&0x0f]; f {
	case fAddr:
		return ptr
	case fULEB, fSLEB:
		return 0
	default:
		return int(f &^ fSigned)
	}
}

// encoded reads a pointer in encoding enc. secAddr is the address of
// r.b[0] (for pcrel), dataBase the base of datarel (the .eh_frame_hdr
// start for its table). The indirect bit is refused: resolving it needs the
// process's memory, and no unwind table we read uses it for locations.
func (r *reader) encoded(enc byte, secAddr, dataBase uint64, _ any) (uint64, error) {
	if enc == dwEHPEomit {
		return 0, nil
	}
	if enc&dwEHPEindirect != 0 {
		return 0, fmt.Errorf("indirect pointer encoding %#x", enc)
	}
	fieldAddr := secAddr + uint64(r.off)
	if enc&0x70 == dwEHPEaligned {
		a := r.ptr
		if pad := (a - r.off%a) % a; pad > 0 {
			if _, err := r.bytes(pad); err != nil {
				return 0, err
			}
		}
	}
	f := encForm[enc&0x0f]
	if f == fNone {
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
	v, err := r.operand(f)
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0, dwEHPEaligned:
	case dwEHPEpcrel:
		v += fieldAddr
	case dwEHPEdatarel:
		v += dataBase
	default:
		return 0, fmt.Errorf("pointer encoding %#x (text/func-relative)", enc)
	}
	if r.ptr == 4 {
		v &= 0xffffffff
	}
	return v, nil
}
