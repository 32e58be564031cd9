package cfi

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/unwound-dev/unwound/handler/regs"
)

// fakeMem answers every read with a pattern derived from the address.
type fakeMem struct{}

func (fakeMem) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		p[i] = byte(off) + byte(i)
	}
	return len(p), nil
}

// realEHFrame returns the first bytes of a real .eh_frame (and its hdr),
// as seeds; nil when the library is not there.
func realEHFrame(path string, n int) (eh []byte, ehAddr uint64, hdr []byte, hdrAddr uint64) {
	ef, err := elf.Open(path)
	if err != nil {
		return
	}
	defer ef.Close()
	if s := ef.Section(".eh_frame"); s != nil {
		eh, _ = s.Data()
		ehAddr = s.Addr
		if len(eh) > n {
			eh = eh[:n]
		}
	}
	if s := ef.Section(".eh_frame_hdr"); s != nil {
		hdr, _ = s.Data()
		hdrAddr = s.Addr
		if len(hdr) > n {
			hdr = hdr[:n]
		}
	}
	return
}

// exercise runs everything a handler would run on a table: never a panic,
// never a hang, whatever the bytes.
func exercise(t *Table, a Arch) {
	fdes, _ := t.All()
	for i, f := range fdes {
		if i > 64 {
			break
		}
		for _, pc := range []uint64{f.Start, f.Start + 1, (f.Start + f.End) / 2, f.End - 1} {
			if fde, err := t.Lookup(pc); err == nil {
				if row, err := t.Row(fde, pc); err == nil {
					var rs regs.Set
					for r := 0; r < 32; r++ {
						rs.Set(r, 0x7fff0000+uint64(r)*8)
					}
					row.Step(&rs, fakeMem{}, 7, a)
				}
			}
		}
	}
	t.Lookup(0)
	t.Lookup(^uint64(0))
}

func FuzzEHFrame(f *testing.F) {
	eh, ehAddr, hdr, hdrAddr := realEHFrame("/lib/x86_64-linux-gnu/libc.so.6", 2048)
	if eh != nil {
		f.Add(eh, ehAddr, hdr, hdrAddr, false)
	}
	eh, ehAddr, hdr, hdrAddr = realEHFrame("/usr/aarch64-linux-gnu/lib/libc.so.6", 2048)
	if eh != nil {
		f.Add(eh, ehAddr, hdr, hdrAddr, true)
	}
	// A minimal CIE "zR" + one FDE, and the same cut short.
	cie := []byte{0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0}
	fde := []byte{0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0xe0, 0xff, 0xff, 0xff, 0x10, 0, 0, 0, 0, 0x41, 0x0e, 0x10, 0, 0, 0, 0}
	min := append(append([]byte(nil), cie...), fde...)
	f.Add(min, uint64(0x1000), []byte(nil), uint64(0), false)
	f.Add(min[:30], uint64(0x1000), []byte(nil), uint64(0), false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}, uint64(0), []byte{1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 2, 0, 0, 0}, uint64(0x2000), false)
	f.Fuzz(func(t *testing.T, eh []byte, ehAddr uint64, hdr []byte, hdrAddr uint64, arm64 bool) {
		a := Arch{PtrSize: 8, Order: binary.LittleEndian, AArch64: arm64}
		if tab, err := NewEHFrame(eh, ehAddr, hdr, hdrAddr, a); err == nil {
			exercise(tab, a)
		}
	})
}

func FuzzDebugFrame(f *testing.F) {
	cie := []byte{0x10, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x78, 0x10, 0x0c, 7, 8}
	fde := []byte{0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0}
	f.Add(append(append([]byte(nil), cie...), append(fde, 0, 0, 0, 0, 0, 0, 0, 0)...), false)
	f.Add(cie, true)
	f.Fuzz(func(t *testing.T, data []byte, arm64 bool) {
		a := Arch{PtrSize: 8, Order: binary.LittleEndian, AArch64: arm64}
		if tab, err := NewDebugFrame(data, a); err == nil {
			exercise(tab, a)
		}
	})
}

func FuzzEval(f *testing.F) {
	f.Add([]byte{0x77, 0x08}, uint8(8))                         // DW_OP_breg7 8 (x86 rsp+8)
	f.Add([]byte{0x70, 0x10, 0x06}, uint8(8))                   // breg0 16; deref
	f.Add([]byte{0x30, 0x31, 0x22, 0x2f, 0xfd, 0xff}, uint8(8)) // lit0 lit1 plus; skip back: a loop
	f.Add([]byte{0x11, 0x80, 0x7f, 0x12, 0x1b}, uint8(4))       // consts, dup, div
	f.Add(bytes.Repeat([]byte{0x12}, 2000), uint8(8))           // dup forever: stack bound
	f.Fuzz(func(t *testing.T, expr []byte, ps uint8) {
		var rs regs.Set
		for r := 0; r < 40; r++ {
			rs.Set(r, uint64(r)*0x1000)
		}
		size := 8
		if ps%2 == 1 {
			size = 4
		}
		Eval(expr, &EvalContext{Regs: &rs, Mem: fakeMem{}, PtrSize: size, Order: binary.LittleEndian, Initial: []uint64{0x7fff0000}})
	})
}
