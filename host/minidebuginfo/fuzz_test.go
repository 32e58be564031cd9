package minidebuginfo

import (
	"encoding/binary"
	"testing"

	"github.com/unwound-dev/unwound/handler/cfi"
)

// FuzzFilterDebugFrame: whatever .debug_frame an unstripped file holds,
// the filter fails cleanly or writes a section whose kept FDEs still find
// their CIE.
func FuzzFilterDebugFrame(f *testing.F) {
	le := binary.LittleEndian
	seed := le.AppendUint32(nil, 12)
	seed = append(seed, 0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x7c, 14, 0x0c, 13, 0)
	seed = le.AppendUint32(seed, 12)
	seed = le.AppendUint32(seed, 0)
	seed = le.AppendUint32(seed, 0x1000)
	seed = le.AppendUint32(seed, 0x10)
	f.Add(seed, false)
	f.Add(seed[:20], true)
	f.Fuzz(func(t *testing.T, df []byte, dropAll bool) {
		out, _, kept, err := FilterDebugFrame(df, 4, le, func(lo, hi uint64) bool { return dropAll || lo&1 == 1 })
		if err != nil || kept == 0 {
			return
		}
		if _, _, kept2, err := FilterDebugFrame(out, 4, le, func(uint64, uint64) bool { return false }); err != nil || kept2 != kept {
			t.Fatalf("the filtered section does not read back: %v, %d of %d FDEs", err, kept2, kept)
		}
		if tab, err := cfi.NewDebugFrame(out, cfi.Arch{PtrSize: 4, Order: le}); err == nil {
			tab.All()
		}
	})
}
