package arch

import "testing"

func TestFrameX86(t *testing.T) {
	for _, tc := range []struct {
		name string
		code []byte
		size uint64
		ok   bool
	}{
		// musl's static main, GCC 12 -O2 -fno-asynchronous-unwind-tables:
		// push %r12; push %rbp; push %rbx; mov %edi,%ebx; sub $0xc0,%rsp.
		{"main", []byte{0x41, 0x54, 0x55, 0x53, 0x89, 0xfb, 0x48, 0x81, 0xec, 0xc0, 0, 0, 0, 0x83, 0xff, 0x01}, 0xd8, true},
		// The same, the PC after the second push (frame 0 in a prologue).
		{"half", []byte{0x41, 0x54, 0x55}, 16, true},
		// endbr64; push %rbp; mov %rsp,%rbp; sub $0x10,%rsp.
		{"fp", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10}, 0x18, true},
		// mov %rdi,%rax; ret: a leaf that pushes nothing.
		{"leaf", []byte{0x48, 0x89, 0xf8, 0xc3}, 0, false},
		// push %rbp; mov %rdi,%rsp: a stack switch, not a frame.
		{"switch", []byte{0x55, 0x48, 0x89, 0xfc}, 8, false},
		// sub $-8,%rsp would be an add.
		{"negative", []byte{0x48, 0x83, 0xec, 0xf8}, 0xf8, false},
	} {
		size, ok := frameX86(tc.code)
		if ok != tc.ok || ok && size != tc.size {
			t.Errorf("%s: got %#x, %v; want %#x, %v", tc.name, size, ok, tc.size, tc.ok)
		}
	}
}

func TestTakenX86(t *testing.T) {
	code := []byte{
		0x48, 0xc7, 0xc7, 0x50, 0x10, 0x40, 0x00, // mov $0x401050,%rdi
		0x48, 0x8d, 0x3d, 0x10, 0x00, 0x00, 0x00, // lea 0x10(%rip),%rdi
		0xbf, 0x00, 0x20, 0x40, 0x00, 0x90, 0x90, // mov $0x402000,%edi
	}
	var got []uint64
	takenX86(code, 0x1000, func(a uint64) { got = append(got, a) })
	want := map[uint64]bool{0x401050: true, 0x1000 + 14 + 0x10: true, 0x402000: true}
	for _, a := range got {
		delete(want, a)
	}
	if len(want) != 0 {
		t.Errorf("targets %x: missing %v", got, want)
	}
}
