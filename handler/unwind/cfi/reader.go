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

func (r *reader) u16() (uint16, error) {
	b, err := r.bytes(2)
	if err != nil {
		return 0, err
	}
	return r.order.Uint16(b), nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return r.order.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return r.order.Uint64(b), nil
}

func (r *reader) addr() (uint64, error) {
	if r.ptr == 4 {
		v, err := r.u32()
		return uint64(v), err
	}
	return r.u64()
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

// encSize is the size of a fixed-size encoding, 0 for LEB128 or omit.
func encSize(enc byte, ptr int) int {
	switch enc & 0x0f {
	case dwEHPEabsptr:
		return ptr
	case dwEHPEudata2, dwEHPEsdata2:
		return 2
	case dwEHPEudata4, dwEHPEsdata4:
		return 4
	case dwEHPEudata8, dwEHPEsdata8:
		return 8
	}
	return 0
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
	var v uint64
	var err error
	switch enc & 0x0f {
	case dwEHPEabsptr:
		v, err = r.addr()
	case dwEHPEuleb128:
		v, err = r.uleb()
	case dwEHPEudata2:
		var x uint16
		x, err = r.u16()
		v = uint64(x)
	case dwEHPEudata4:
		var x uint32
		x, err = r.u32()
		v = uint64(x)
	case dwEHPEudata8, dwEHPEsdata8:
		v, err = r.u64()
	case dwEHPEsleb128:
		var x int64
		x, err = r.sleb()
		v = uint64(x)
	case dwEHPEsdata2:
		var x uint16
		x, err = r.u16()
		v = uint64(int64(int16(x)))
	case dwEHPEsdata4:
		var x uint32
		x, err = r.u32()
		v = uint64(int64(int32(x)))
	default:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
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
