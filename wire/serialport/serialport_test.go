package serialport

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFlowControlSetting: serial.flow_control = "rtscts" really sets
// CRTSCTS on the port (read back through another descriptor), "none"
// clears it, anything else is refused. A pty keeps the flag but has no
// modem lines, so this proves the setting, not that a UART honours it.
func TestFlowControlSetting(t *testing.T) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skip("no /dev/ptmx:", err)
	}
	defer m.Close()
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	cflag := func() uint32 {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		tio, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		return tio.Cflag
	}
	for _, tc := range []struct {
		flow string
		want bool
	}{{"rtscts", true}, {"none", false}, {"", false}, {"rtscts", true}} {
		p, err := Open(path, 115200, tc.flow)
		if err != nil {
			t.Fatalf("%q: %v", tc.flow, err)
		}
		got := cflag()&unix.CRTSCTS != 0
		// Raw mode: no software flow control, no line discipline.
		if cflag()&unix.CREAD == 0 {
			t.Errorf("%q: CREAD off", tc.flow)
		}
		p.Close()
		if got != tc.want {
			t.Errorf("flow %q: CRTSCTS %v, want %v", tc.flow, got, tc.want)
		}
	}
	if _, err := Open(path, 115200, "xonxoff"); err == nil {
		t.Error("flow xonxoff accepted")
	}
}
