package install

import (
	"testing"

	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// TestSelfTestEveryArch runs the install self-test for every architecture
// the handler supports (the board runs only its own).
func TestSelfTestEveryArch(t *testing.T) {
	for _, name := range []string{"x86_64", "aarch64", "arm", "riscv64"} {
		t.Run(name, func(t *testing.T) {
			a, err := arch.ByName(name)
			if err != nil {
				t.Fatal(err)
			}
			st, err := SelfTest(a)
			if err != nil {
				t.Fatal(err)
			}
			if st.Arch != name || st.Frames != 3 || st.ReportSize == 0 {
				t.Errorf("self-test result %+v", st)
			}
		})
	}
}
