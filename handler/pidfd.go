package handler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A pidfd for the crashed process: with %F in core_pattern (Linux 6.16,
// fs/coredump.c) the kernel installs one as fd 3 of the pipe helper and
// expands %F to that number. A pid names whatever process holds the number
// now; a pidfd names the one process, and says when it is gone. The
// handler checks through it that /proc/<pid> is still the crashed process
// before it trusts what it read there (live.go), and sends every signal
// for that process through it.

// ChildPidfd is the fd the supervising parent passes the pidfd on to its
// child (fd 3 is the hand-over there: supervise.go).
const ChildPidfd = 5

// From include/uapi/linux/pidfd.h (Linux 6.13+, PIDFD_GET_INFO):
// struct pidfd_info, its first version (PIDFD_INFO_SIZE_VER0, 64 bytes:
// mask, cgroupid, then pid, tgid, ppid, the credentials and exit_code as
// 32-bit words, then coredump_mask and a spare word in 6.16), the mask bit
// for the pid, and the ioctl: _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct
// pidfd_info). _IOWR encodes alike on every architecture Go builds for
// with a 64-byte argument (read|write in the top two bits, the size in
// bits 16..29: mips and powerpc have three direction bits at 29, and read|
// write is the same 0xC0000000 there).
const (
	pidfdInfoPID   = 1 << 0 // PIDFD_INFO_PID
	pidfdInfoSize  = 64     // PIDFD_INFO_SIZE_VER0
	pidfdIoctlInfo = 0xC0000000 | pidfdInfoSize<<16 | 0xFF<<8 | 11
)

type pidfdInfo struct {
	Mask     uint64
	CgroupID uint64
	PID      uint32
	TGID     uint32
	_        [10]uint32 // ppid, the credentials, exit_code
	Coredump uint32
	_        uint32
}

// errPidfdGone says the pidfd's process has exited and been reaped.
var errPidfdGone = errors.New("the process has exited")

// pidfdPID is the pid (in the handler's pid namespace) of the process the
// pidfd refers to: from PIDFD_GET_INFO on Linux 6.13+, else from the
// fdinfo's Pid: line. errPidfdGone when the process is gone. A fd that is
// no pidfd at all is an error that says so.
func pidfdPID(fd int) (int, error) {
	info := pidfdInfo{Mask: pidfdInfoPID}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), pidfdIoctlInfo, uintptr(unsafe.Pointer(&info)))
	switch {
	case e == 0 && info.Mask&pidfdInfoPID != 0 && info.PID > 0:
		return int(info.PID), nil
	case e == unix.ESRCH:
		return 0, errPidfdGone
	case e == unix.EBADF:
		return 0, fmt.Errorf("fd %d: %w", fd, e)
	}
	// Before 6.13 (ENOTTY, or EINVAL from a pidfd of an anonymous inode
	// before 6.9): the fdinfo.
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		return 0, err
	}
	pid, ok, err := parsePidfdInfo(b)
	switch {
	case err != nil:
		return 0, fmt.Errorf("fd %d: %w", fd, err)
	case !ok:
		return 0, fmt.Errorf("fd %d is not a pidfd (its fdinfo has no Pid: line)", fd)
	case pid == -1:
		return 0, errPidfdGone
	case pid == 0:
		return 0, fmt.Errorf("fd %d: the pidfd's process is not in the handler's pid namespace", fd)
	}
	return pid, nil
}

// parsePidfdInfo reads the Pid: line of a pidfd's /proc/self/fdinfo
// (kernel/pid.c, pidfd_show_fdinfo): the pid in the reader's namespace,
// 0 when the process is outside it, -1 once it has exited. ok is false
// when there is no Pid: line: the fd is not a pidfd.
func parsePidfdInfo(b []byte) (pid int, ok bool, err error) {
	for _, l := range strings.Split(string(b), "\n") {
		v, found := strings.CutPrefix(l, "Pid:")
		if !found {
			continue
		}
		v = strings.TrimSpace(v)
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return 0, true, fmt.Errorf("fdinfo Pid: %q", v)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// pidfd is the crashed process's pidfd, checked against its pid.
type pidfd struct {
	fd  int
	pid int
}

// openPidfd takes fd as the pidfd of pid: nil and why not when fd is no
// pidfd, or one of another process. A pidfd whose process is already gone
// is taken (with errPidfdGone): whatever holds pid now is not the crashed
// process, and same says so.
func openPidfd(fd, pid int) (*pidfd, error) {
	got, err := pidfdPID(fd)
	if errors.Is(err, errPidfdGone) {
		return &pidfd{fd: fd, pid: pid}, err
	}
	if err != nil {
		return nil, err
	}
	if got != pid {
		return nil, fmt.Errorf("fd %d is the pidfd of pid %d, the kernel's %%P is %d", fd, got, pid)
	}
	return &pidfd{fd: fd, pid: pid}, nil
}

// same checks that the pidfd's process is still alive with its pid: then
// the pid was never reused, and what /proc/<pid> gave since the last
// check came from the crashed process.
func (p *pidfd) same() error {
	got, err := pidfdPID(p.fd)
	if err == nil && got != p.pid {
		err = fmt.Errorf("pid %d is now %d", p.pid, got)
	}
	if err == nil {
		// Signal 0 checks that the task still exists, through the pidfd:
		// never kill(pid, 0), which would ask whoever has the pid now.
		err = p.signal(0)
	}
	if err != nil {
		return fmt.Errorf("pidfd of pid %d: %w", p.pid, err)
	}
	return nil
}

// signal sends sig to the crashed process through its pidfd.
func (p *pidfd) signal(sig unix.Signal) error {
	err := unix.PidfdSendSignal(p.fd, sig, nil, 0)
	if err == unix.ESRCH {
		return errPidfdGone
	}
	return err
}

// kernelPidfd takes the pidfd the kernel passed (--pidfd=%F): nil when
// there is none (a kernel before 6.16 expands %F to nothing), and nil with
// a log line when the fd is not the crashed process's pidfd (an fd the
// handler inherited by accident, or its own).
func kernelPidfd(lg *Logger, arg string, pid int) *pidfd {
	if arg == "" {
		return nil
	}
	fd, err := strconv.Atoi(arg)
	if err != nil || fd < 3 {
		lg.Warnf("--pidfd %q: not a file descriptor, identifying pid %d by number only", arg, pid)
		return nil
	}
	p, err := openPidfd(fd, pid)
	if p != nil {
		unix.CloseOnExec(fd)
		return p
	}
	if err != nil {
		// Left open: it may be the handler's own (its log, when the
		// kernel passed no fd 3).
		lg.Warnf("--pidfd %d ignored, identifying pid %d by number only: %v", fd, pid, err)
	}
	return nil
}

// childPidfd is the pidfd a supervising parent passed on as ChildPidfd:
// nil when it passed none.
func childPidfd(pid int) *pidfd {
	p, _ := openPidfd(ChildPidfd, pid)
	if p != nil {
		unix.CloseOnExec(ChildPidfd)
	}
	return p
}
