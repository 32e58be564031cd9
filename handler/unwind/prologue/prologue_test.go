package prologue

import (
	"encoding/binary"
	"errors"
	"testing"
)

func hw(h ...uint16) []byte {
	var b []byte
	for _, x := range h {
		b = binary.LittleEndian.AppendUint16(b, x)
	}
	return b
}

func words(w ...uint32) []byte {
	var b []byte
	for _, x := range w {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func TestThumb(t *testing.T) {
	// glibc armhf abort: ldr…; push {r7, lr}; add r0, pc; ldr; sub sp, #144
	code := hw(0x4b4e, 0xf5a4, 0x64a0, 0x447a, 0x484d, 0xb580, 0x4478, 0x58d3, 0xb0a4, 0x681b)
	f, err := ARM(code, 0x1000, 0x1000+uint64(len(code)), true)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != 8+144 || f.Saved[14] != -4 || f.Saved[7] != -8 {
		t.Errorf("size %d saved %v", f.Size, f.Saved)
	}
	// Stopping before the sub: only the push has happened.
	f, _ = ARM(code, 0x1000, 0x1000+16, true)
	if f.Size != 8 {
		t.Errorf("at the push: size %d", f.Size)
	}
	// push.w {r4-r11, lr}; sub.w sp, sp, #0x100; vpush {d8-d9}
	code = hw(0xe92d, 0x4ff0, 0xf5ad, 0x7d80, 0xed2d, 0x8b04)
	f, err = ARM(code, 0, 12, true)
	if err != nil || f.Size != 36+256+16 || f.Saved[14] != -4 || f.Saved[4] != -36 {
		t.Errorf("push.w/sub.w/vpush: %v %+v", err, f)
	}
}

func TestARMMode(t *testing.T) {
	// push {r4, r11, lr}; sub sp, sp, #16
	code := words(0xe92d4810, 0xe24dd010)
	f, err := ARM(code, 0, 8, false)
	if err != nil || f.Size != 12+16 || f.Saved[14] != -4 || f.Saved[11] != -8 || f.Saved[4] != -12 {
		t.Errorf("%v %+v", err, f)
	}
}

func TestWrongStartIsRefused(t *testing.T) {
	// The end of an earlier function (pop {r7, pc}) before our push.
	code := hw(0xbd80, 0xb580, 0xb082)
	if _, err := ARM(code, 0, 6, true); !errors.Is(err, ErrWrongStart) {
		t.Errorf("thumb: %v", err)
	}
	if _, err := RISCV(hw(0x8082, 0x1141), 0, 4); !errors.Is(err, ErrWrongStart) {
		t.Errorf("riscv: %v", err)
	}
	if _, err := ARM(hw(0x4770), 0, 2, true); !errors.Is(err, ErrWrongStart) {
		t.Errorf("bx lr: %v", err)
	}
}

func TestRISCV(t *testing.T) {
	// c.addi16sp sp, -64; c.sdsp ra, 56(sp); c.sdsp s0, 48(sp)
	code := hw(0x7139, 0xfc06, 0xf822)
	f, err := RISCV(code, 0, 6)
	if err != nil || f.Size != 64 || f.Saved[1] != -8 || f.Saved[8] != -16 {
		t.Errorf("compressed: %v %+v", err, f)
	}
	// addi sp, sp, -2032; sd ra, 2024(sp)
	code = words(0x81010113, 0x7e113423)
	f, err = RISCV(code, 0, 8)
	if err != nil || f.Size != 2032 || f.Saved[1] != -8 {
		t.Errorf("full-size: %v %+v", err, f)
	}
	if _, err := RISCV(hw(0x0001), 0, 2); !errors.Is(err, ErrNoPrologue) {
		t.Errorf("no prologue: %v", err)
	}
}

func FuzzAnalyzers(f *testing.F) {
	f.Add(hw(0xb580, 0xb0a4), true)
	f.Add(words(0xe92d4810, 0xe24dd010), false)
	f.Add(hw(0x7139, 0xfc06), true)
	f.Fuzz(func(t *testing.T, code []byte, thumb bool) {
		ARM(code, 0, uint64(len(code)), thumb)
		RISCV(code, 0, uint64(len(code)))
	})
}
