package guest

import (
	"strings"
	"syscall"
)

// KmsgRecords returns the text of the kernel log records (/dev/kmsg) that
// keep accepts, given the whole record ("6,812,3141592,-;text\n"), and
// never waits for new ones. The guest programs of the labs read the
// handler's log this way.
func KmsgRecords(keep func(rec string) bool) []string {
	// Raw syscalls: an *os.File opened O_NONBLOCK goes through Go's
	// poller, whose Read waits for more instead of returning EAGAIN.
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EPIPE {
			continue // records overwritten meanwhile
		}
		if err != nil || n <= 0 {
			break
		}
		rec := string(buf[:n])
		if i := strings.IndexByte(rec, ';'); i >= 0 && keep(rec) {
			out = append(out, strings.TrimSpace(rec[i+1:]))
		}
	}
	return out
}
