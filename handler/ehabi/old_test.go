package ehabi

// Temporary: Exec before the table, for the differential test.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"testing"
)

func oldExec(ops []byte, s *State, mem Memory, order binary.ByteOrder) error {
	vsp := s.R[13]
	pop := func(reg int) error {
		var b [4]byte
		if _, err := mem.ReadAt(b[:], int64(vsp)); err != nil {
			return fmt.Errorf("ehabi: reading the stack at %#x: %w", vsp, err)
		}
		s.R[reg] = order.Uint32(b[:])
		s.Valid |= 1 << reg
		s.Popped |= 1 << reg
		vsp += 4
		return nil
	}
	popMask := func(mask uint16, first int) error {
		spSet := false
		for r := 0; r < 16; r++ {
			if mask&(1<<r) == 0 {
				continue
			}
			if err := pop(first + r); err != nil {
				return err
			}
			if first+r == 13 {
				spSet = true
			}
			if first+r == 15 {
				s.PCSet = true
			}
		}
		if spSet {
			// Popping sp replaces vsp (EHABI §10.1 note).
			vsp = s.R[13]
		}
		return nil
	}
	for i, steps := 0, 0; i < len(ops); steps++ {
		if steps > maxOps {
			return errors.New("ehabi: opcode program too long")
		}
		op := ops[i]
		i++
		next := func() (byte, error) {
			if i >= len(ops) {
				return 0, fmt.Errorf("ehabi: opcode %#02x truncated", op)
			}
			b := ops[i]
			i++
			return b, nil
		}
		switch {
		case op&0xc0 == 0x00: // 00xxxxxx: vsp += (x<<2) + 4
			vsp += uint32(op&0x3f)<<2 + 4
		case op&0xc0 == 0x40: // 01xxxxxx: vsp -= (x<<2) + 4
			vsp -= uint32(op&0x3f)<<2 + 4
		case op&0xf0 == 0x80: // 1000iiii iiiiiiii: pop r4–r15 by mask
			b, err := next()
			if err != nil {
				return err
			}
			mask := uint16(op&0x0f)<<8 | uint16(b)
			if mask == 0 {
				return ErrRefuse
			}
			if err := popMask(mask, 4); err != nil {
				return err
			}
		case op&0xf0 == 0x90: // 1001nnnn: vsp = r[nnnn]
			n := op & 0x0f
			if n == 13 || n == 15 {
				return fmt.Errorf("ehabi: reserved opcode %#02x", op)
			}
			vsp = s.R[n]
		case op&0xf8 == 0xa0, op&0xf8 == 0xa8: // pop r4–r[4+nnn] (+ r14)
			mask := uint16(1)<<(op&0x07+1) - 1
			if op&0x08 != 0 {
				mask |= 1 << 10 // r14 relative to r4
			}
			if err := popMask(mask, 4); err != nil {
				return err
			}
		case op == 0xb0: // finish
			s.Finish = true
			i = len(ops)
		case op == 0xb1: // 10110001 0000iiii: pop r0–r3 by mask
			b, err := next()
			if err != nil {
				return err
			}
			if b == 0 || b&0xf0 != 0 {
				return fmt.Errorf("ehabi: spare opcode b1 %02x", b)
			}
			if err := popMask(uint16(b), 0); err != nil {
				return err
			}
		case op == 0xb2: // vsp += 0x204 + (uleb128 << 2)
			var v uint32
			var shift uint
			for {
				b, err := next()
				if err != nil {
					return err
				}
				if shift > 28 {
					return errors.New("ehabi: uleb128 too long")
				}
				v |= uint32(b&0x7f) << shift
				shift += 7
				if b&0x80 == 0 {
					break
				}
			}
			vsp += 0x204 + v<<2
		case op == 0xb3: // pop VFP d[ssss]–d[ssss+cccc], FSTMFDX
			b, err := next()
			if err != nil {
				return err
			}
			vsp += uint32(b&0x0f+1)*8 + 4
		case op&0xfc == 0xb4: // 101101nn: spare
			return fmt.Errorf("ehabi: spare opcode %#02x", op)
		case op&0xf8 == 0xb8: // pop VFP d8–d[8+nnn], FSTMFDX
			vsp += uint32(op&0x07+1)*8 + 4
		case op == 0xc6: // iWMMXt wR[ssss]–wR[ssss+cccc]
			b, err := next()
			if err != nil {
				return err
			}
			vsp += uint32(b&0x0f+1) * 8
		case op == 0xc7: // iWMMXt wCGR0–3 by mask
			b, err := next()
			if err != nil {
				return err
			}
			if b == 0 || b&0xf0 != 0 {
				return fmt.Errorf("ehabi: spare opcode c7 %02x", b)
			}
			vsp += 4 * uint32(bits.OnesCount8(b))
		case op&0xf8 == 0xc0: // iWMMXt wR10–wR[10+nnn]
			vsp += uint32(op&0x07+1) * 8
		case op == 0xc8, op == 0xc9: // VFP d[16+ssss]… / d[ssss]…, FSTMFDD
			b, err := next()
			if err != nil {
				return err
			}
			vsp += uint32(b&0x0f+1) * 8
		case op&0xf8 == 0xd0: // VFP d8–d[8+nnn], FSTMFDD
			vsp += uint32(op&0x07+1) * 8
		default: // 11001yyy (yyy ≥ 2), 11xxxyyy: spare
			return fmt.Errorf("ehabi: spare opcode %#02x", op)
		}
	}
	s.R[13] = vsp
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

func diffExec(t *testing.T, ops []byte, s0 State, mem Memory) {
	t.Helper()
	s, o := s0, s0
	err := Exec(ops, &s, mem, le)
	oerr := oldExec(ops, &o, mem, le)
	if s != o || fmt.Sprint(err) != fmt.Sprint(oerr) {
		t.Fatalf("Exec(% x) = %+v, %v; old %+v, %v", ops, s, err, o, oerr)
	}
}
