// Package serialport opens a UART the way both ends of the serial link
// want it: raw (no echo, no line discipline, no XON/XOFF), with optional
// RTS/CTS. The board's uploader and the host's receiver share it, so it
// sits on neutral ground beside the protocol (wire/serialproto).
package serialport

import (
	"fmt"
	"os"

	"go.bug.st/serial"
	"golang.org/x/sys/unix"
)

// Open opens a serial port raw at baud; flow is "none" or "rtscts".
func Open(path string, baud int, flow string) (serial.Port, error) {
	// go.bug.st/serial always clears CRTSCTS; set it afterwards through a
	// descriptor opened before the port takes TIOCEXCL (termios belongs to
	// the tty, not to the descriptor).
	var side *os.File
	if flow == "rtscts" {
		f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil, err
		}
		side = f
		defer side.Close()
	} else if flow != "" && flow != "none" {
		return nil, fmt.Errorf("flow control %q: want none or rtscts", flow)
	}
	p, err := serial.Open(path, &serial.Mode{BaudRate: baud, DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if side != nil {
		t, err := unix.IoctlGetTermios(int(side.Fd()), unix.TCGETS)
		if err == nil {
			t.Cflag |= unix.CRTSCTS
			err = unix.IoctlSetTermios(int(side.Fd()), unix.TCSETS, t)
		}
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("%s: setting RTS/CTS: %w", path, err)
		}
	}
	return p, nil
}
