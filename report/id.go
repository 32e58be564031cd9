package report

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/internal/sha256"
)

// NewID returns a random 128-bit report id as 32 hex digits. It never
// blocks: at early boot the kernel's pool may not be initialised, and
// crypto/rand would wait for it while the crashed process stays frozen.
// Then the id is a hash of what differs between crashes: the boot id, the
// pid, the monotonic and wall clocks, and the kernel's per-process
// auxiliary vector. Ids only need to be unique, not secret.
func NewID() string {
	var b [16]byte
	if n, err := unix.Getrandom(b[:], unix.GRND_NONBLOCK); err == nil && n == len(b) {
		return hex.EncodeToString(b[:])
	}
	h := sha256.New()
	if boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.Write(boot)
	}
	if auxv, err := os.ReadFile("/proc/self/auxv"); err == nil {
		h.Write(auxv) // AT_RANDOM's and the stack's addresses differ per exec (ASLR)
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	var w [32]byte
	binary.LittleEndian.PutUint64(w[0:], uint64(ts.Sec))
	binary.LittleEndian.PutUint64(w[8:], uint64(ts.Nsec))
	binary.LittleEndian.PutUint64(w[16:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(w[24:], uint64(time.Now().UnixNano()))
	h.Write(w[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// TrustedTime reports whether a wall-clock time looks set: boards without
// an RTC start in 1970 and jump at NTP sync. Anything before this file was
// written is not a real crash time.
func TrustedTime(unix int64) bool {
	return unix >= 1767225600 // 2026-01-01T00:00:00Z
}
