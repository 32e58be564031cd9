package arch

import (
	"testing"

	"github.com/unwound-dev/unwound/testkit/le"
)

// FuzzCallBefore feeds every architecture's call-site decoder and PLT
// matcher arbitrary code bytes (they come from the files a crashed
// process mapped): no panic, sizes within the bytes given.
func FuzzCallBefore(f *testing.F) {
	f.Add(le.W32(0x940000f0), uint64(0x8b8), false)
	f.Add(le.H16(0xf7ff, 0xefee), uint64(0x61c), true)
	f.Add(le.H16(0x4798), uint64(0x972), true)
	f.Add(le.W32(0xf65ff0ef), uint64(0x940), false)
	f.Add([]byte{0x41, 0xff, 0x54, 0x24, 0x30}, uint64(0xfc40), false)
	f.Add([]byte{0xff, 0x14, 0x25, 0, 0, 0, 0}, uint64(0x1007), false)
	f.Add([]byte{}, uint64(0), false)
	f.Fuzz(func(t *testing.T, b []byte, ra uint64, thumb bool) {
		if len(b) > MaxCallSize {
			b = b[len(b)-MaxCallSize:]
		}
		for _, a := range all {
			if c, ok := a.Call(b, ra, thumb); ok && (c.Size <= 0 || c.Size > MaxCallSize) {
				t.Errorf("%s: call of %d bytes", a.Name, c.Size)
			}
			a.PLT(b)
		}
	})
}

// FuzzTailBranch feeds the tail-jump decoders arbitrary code bytes (a
// function's start, read from a mapped file): no panic on any length.
func FuzzTailBranch(f *testing.F) {
	f.Add(le.W32(0xd2800002, 0x14000040), uint64(0x1000))
	f.Add(append(le.H16(0x4601), le.W32(0x0200006f)...), uint64(0x1000))
	f.Add(le.H16(0xa801), uint64(0x1000))
	f.Add([]byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xf7, 0xe9, 0, 1, 0, 0}, uint64(0x1000))
	f.Add([]byte{0x48}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, at uint64) {
		if len(b) > MaxTailCode {
			b = b[:MaxTailCode]
		}
		for _, a := range all {
			if a.TailBranch != nil {
				a.TailBranch(b, at)
			}
		}
	})
}

// FuzzCallTargets feeds the direct-call sweeps arbitrary code (a mapped
// file's executable segment): no panic on any length or address.
func FuzzCallTargets(f *testing.F) {
	f.Add(le.W32(0x940000f0, 0xd503201f), uint64(0x1000))
	f.Add([]byte{0x90, 0xe8, 0x10, 0, 0, 0, 0xe8}, uint64(0x1000))
	f.Add(append(le.H16(0x4601), le.W32(0xf65ff0ef)...), uint64(0x1000))
	f.Add([]byte{0xe8}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, vaddr uint64) {
		for _, a := range all {
			if a.CallTargets != nil {
				a.CallTargets(b, vaddr, func(uint64) {})
			}
		}
	})
}

// FuzzTailIndirect feeds the indirect-tail decoder arbitrary code bytes:
// no panic on any length, in either instruction set.
func FuzzTailIndirect(f *testing.F) {
	f.Add(le.H16(0x1c4b, 0xb570, 0x460d, 0xf7ff, 0xff10, 0xe8bd, 0x4070, 0x4718), true)
	f.Add(le.W32(0xe92d4010, 0xebfffffe, 0xe8bd4010, 0xe12fff13), false)
	f.Add(le.H16(0xf7ff), true)
	f.Add([]byte{0x13}, false)
	f.Fuzz(func(t *testing.T, b []byte, thumb bool) {
		if len(b) > MaxIndirectTail {
			b = b[:MaxIndirectTail]
		}
		tailIndirectARM(b, thumb)
	})
}

// FuzzFrameSize feeds the x86 prologue and address-taken decoders
// arbitrary code (a function's start, a mapped executable segment): no
// panic on any length, and no frame larger than the bytes could push.
func FuzzFrameSize(f *testing.F) {
	f.Add([]byte{0x41, 0x54, 0x55, 0x53, 0x89, 0xfb, 0x48, 0x81, 0xec, 0xc0, 0, 0, 0}, uint64(0x401050))
	f.Add([]byte{0x48, 0xc7, 0xc7, 0x50, 0x10, 0x40, 0x00, 0x48, 0x8d, 0x3d, 0x10}, uint64(0x1000))
	f.Add([]byte{0x48, 0x81, 0xec}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, vaddr uint64) {
		for _, a := range all {
			if a.Taken != nil {
				a.Taken(b, vaddr, func(uint64) {})
			}
			if a.FrameSize != nil {
				if len(b) > MaxPrologue {
					b = b[:MaxPrologue]
				}
				if n, ok := a.FrameSize(b); ok && n > 8*MaxPrologue+1<<24 {
					t.Errorf("%s: frame of %#x bytes", a.Name, n)
				}
			}
		}
	})
}
