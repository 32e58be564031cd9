package ehabi

import "testing"

// BenchmarkExec runs the programs ARM32 libraries carry: a compact
// push {r4-r7, lr}, a frame with VFP saves and a large stack adjustment,
// and a pop by mask with finish.
func BenchmarkExec(b *testing.B) {
	for _, bc := range []struct {
		name string
		ops  []byte
	}{
		{"compact", []byte{0xab, 0xb0, 0xb0}},
		{"vfp-big", []byte{0xb2, 0x81, 0x01, 0xc9, 0x03, 0xd1, 0x84, 0x0f, 0xb0}},
		{"mask", []byte{0x04, 0x88, 0x41, 0xb1, 0x03, 0x97, 0xb0}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			mem := stack{0x8000}
			for i := 0; i < b.N; i++ {
				var s State
				s.R[13], s.R[7], s.Valid = 0x8000, 0x8100, 0xffff
				if err := Exec(bc.ops, &s, mem, le); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
