package cfi

import (
	"encoding/binary"
	"testing"
)

func TestEHFramePtr(t *testing.T) {
	le := binary.LittleEndian
	a64 := Arch{PtrSize: 8, Order: le}
	a32 := Arch{PtrSize: 4, Order: binary.BigEndian}
	for _, tc := range []struct {
		name string
		hdr  []byte
		a    Arch
		want uint64
		bad  bool
	}{
		// pcrel|sdata4 -0x100 from the field at 0x1004: 0xf04.
		{"pcrel sdata4", []byte{1, 0x1b, 0x03, 0x3b, 0x00, 0xff, 0xff, 0xff}, a64, 0xf04, false},
		{"udata4", []byte{1, 0x03, 0x03, 0x3b, 0x78, 0x56, 0x34, 0x12}, a64, 0x12345678, false},
		{"absptr 64", []byte{1, 0x00, 0x03, 0x3b, 8, 7, 6, 5, 4, 3, 2, 1}, a64, 0x0102030405060708, false},
		{"absptr 32 big-endian", []byte{1, 0x00, 0x03, 0x3b, 0x00, 0x01, 0x02, 0x03}, a32, 0x10203, false},
		{"version 2", []byte{2, 0x1b, 0x03, 0x3b, 0, 0, 0, 0}, a64, 0, true},
		{"truncated", []byte{1, 0x03, 0x03, 0x3b, 0}, a64, 0, true},
		{"indirect", []byte{1, 0x9b, 0x03, 0x3b, 0, 0, 0, 0}, a64, 0, true},
	} {
		got, err := EHFramePtr(tc.hdr, 0x1000, tc.a)
		if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
			t.Errorf("%s: %#x, %v; want %#x (error %v)", tc.name, got, err, tc.want, tc.bad)
		}
	}
}
