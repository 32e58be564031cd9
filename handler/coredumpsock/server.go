package coredumpsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultBacklog is the listen backlog: the kernel connects without
// blocking (O_NONBLOCK in fs/coredump.c), so a crash that finds the
// backlog full is dropped with nothing but a kernel log line ("receive
// queue full"). The kernel caps it at net.core.somaxconn (4096 since
// Linux 5.4), far above a storm of crashes that arrive faster than the
// accept loop takes them.
const DefaultBacklog = 4096

// DefaultMaxInFlight bounds the connections handled at once; beyond it a
// connection is closed at once (the kernel then drops that core and frees
// the task) and counted. Admission control (rate_limit.max_concurrent)
// turns most of them away earlier and cheaper; this bound only keeps a
// storm from piling up goroutines and descriptors.
const DefaultMaxInFlight = 256

// Conn is one crash: the kernel's connection, past the protocol.
type Conn struct {
	// File is the core stream, a blocking descriptor of its own, as the
	// kernel's pipe comes on stdin in pipe mode. Handle closes it; closing
	// it (with Wait, all copies of it) frees the task.
	File *os.File
	// PID is the crashed process (its thread-group leader) in the
	// server's pid namespace, from SO_PEERCRED.
	PID int
	// Pidfd is its pidfd (SO_PEERPIDFD), valid while Handle runs: the
	// server closes it after.
	Pidfd int
	// Info is what PIDFD_GET_INFO said at accept.
	Info PidfdInfo
	// DumpMode is core_pattern's %d: 1 dumped as the user, 2 as root
	// (the task changed credentials; fs.suid_dumpable = 2).
	DumpMode int
	// Request is the kernel's request under "@@", nil under "@".
	Request *Request
	// Accepted is when the connection was taken: the start of its
	// deadline.
	Accepted time.Time
}

// Server runs the accept loop.
type Server struct {
	// Handle handles one crash (in its own goroutine).
	Handle func(*Conn)
	// Deadline bounds each connection from accept, Grace after it: past
	// both, the server kills the crashed task through its pidfd, which
	// ends the dump and frees the kernel's side whatever Handle is stuck
	// on. Zero: no bound.
	Deadline, Grace time.Duration
	// MaxInFlight bounds the connections handled at once
	// (DefaultMaxInFlight when 0).
	MaxInFlight int
	// Logf logs (nil: nothing).
	Logf func(format string, args ...any)
	// Drop is told of each core the server turned away (busy, or not
	// from the kernel), after Dropped is counted.
	Drop func(reason string)
	// Dropped counts the cores turned away.
	Dropped atomic.Int64
	// IdleExit, when positive, makes Serve return once no connection has
	// been in hand for that long (socket activation: systemd keeps the
	// socket, and the backlog, for the next server).
	IdleExit time.Duration

	last atomic.Int64 // UnixNano when the last connection ended
	idle atomic.Bool

	wg       sync.WaitGroup
	inflight chan struct{}
	closing  atomic.Bool
	ln       atomic.Pointer[os.File]
}

// Idle says Serve returned for IdleExit.
func (s *Server) Idle() bool { return s.idle.Load() }

// idleUntil is when the server may exit for being idle.
func (s *Server) idleUntil() time.Time {
	last := s.last.Load()
	if len(s.inflight) > 0 {
		last = time.Now().UnixNano()
	}
	return time.Unix(0, last+int64(s.IdleExit))
}

// Close stops the accept loop; Serve returns once the connections in
// hand are done.
func (s *Server) Close() {
	s.closing.Store(true)
	if ln := s.ln.Load(); ln != nil {
		ln.Close()
	}
}

//go:noinline
func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (s *Server) drop(reason string) {
	s.Dropped.Add(1)
	if s.Drop != nil {
		s.Drop(reason)
	}
}

// Listen binds an AF_UNIX stream socket at path, mode 0600 (the kernel
// looks the path up with its own credentials and checks no permission,
// so the crashed process's user needs none; nobody else may connect).
// The path must hold no symbolic link: the kernel refuses to follow any
// (LOOKUP_NO_SYMLINKS). A socket left there by a server that died is
// replaced; one a live server listens on is an error.
func Listen(path string, backlog int) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if listening(path) {
			return nil, fmt.Errorf("%s: another server listens there", path)
		}
		os.Remove(path)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	// bind creates the socket file with the umask applied: 0600 from the
	// start, never briefly open to others.
	old := syscall.Umask(0o177)
	err = unix.Bind(fd, &unix.SockaddrUnix{Name: path})
	syscall.Umask(old)
	if err == nil {
		err = unix.Listen(fd, backlog)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// listening says whether a server accepts connections at path.
func listening(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) == nil
}

// FromSystemd returns the listening socket systemd passed (socket
// activation, sd_listen_fds(3): LISTEN_PID is this process, LISTEN_FDS at
// least 1, the socket on fd 3), nil when there is none. The variables are
// removed, so children do not take the socket for theirs.
func FromSystemd() *os.File {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	if pid != strconv.Itoa(os.Getpid()) {
		return nil
	}
	if n, err := strconv.Atoi(fds); err != nil || n < 1 {
		return nil
	}
	const fd = 3
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		return nil
	}
	unix.CloseOnExec(fd)
	if unix.SetNonblock(fd, true) != nil {
		return nil
	}
	return os.NewFile(fd, "coredump socket")
}

// Serve accepts connections on ln (a listening socket, non-blocking)
// until ln is closed, then waits for the connections in hand.
func (s *Server) Serve(ln *os.File) error {
	if s.MaxInFlight <= 0 {
		s.MaxInFlight = DefaultMaxInFlight
	}
	s.inflight = make(chan struct{}, s.MaxInFlight)
	s.ln.Store(ln)
	if s.closing.Load() {
		ln.Close()
	}
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	defer s.wg.Wait()
	s.last.Store(time.Now().UnixNano())
	for {
		if s.IdleExit > 0 {
			ln.SetReadDeadline(s.idleUntil())
		}
		var nfd int
		var aerr error
		err := rc.Read(func(fd uintptr) bool {
			nfd, aerr = accept(int(fd))
			return aerr != unix.EAGAIN
		})
		if err != nil {
			if s.closing.Load() {
				return nil
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// Past the deadline with nothing in hand: whatever
				// connects from now on waits in the backlog.
				if len(s.inflight) == 0 && !time.Now().Before(s.idleUntil()) {
					s.idle.Store(true)
					return nil
				}
				continue
			}
			return err
		}
		switch aerr {
		case nil:
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			// Out of descriptors or memory: the backlog holds the
			// connections until some are free.
			s.logf("coredump socket: accept: %v", aerr)
			time.Sleep(10 * time.Millisecond)
			continue
		default:
			continue // ECONNABORTED, EINTR: the next one
		}
		accepted := time.Now()
		select {
		case s.inflight <- struct{}{}:
		default:
			unix.Close(nfd)
			s.drop("server_busy")
			s.logf("coredump socket: %d connections in hand, dropping a core", s.MaxInFlight)
			continue
		}
		s.wg.Add(1)
		go func() {
			defer func() { s.last.Store(time.Now().UnixNano()); <-s.inflight; s.wg.Done() }()
			s.serve(nfd, accepted)
		}()
	}
}

// serve checks the peer, speaks the protocol and hands the core over.
func (s *Server) serve(nfd int, accepted time.Time) {
	c := &Conn{Pidfd: -1, Accepted: accepted}
	f := os.NewFile(uintptr(nfd), "coredump connection")
	defer f.Close()
	cred, err := unix.GetsockoptUcred(nfd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		s.logf("coredump socket: SO_PEERCRED: %v", err)
		return
	}
	c.PID = int(cred.Pid)
	pfd, err := unix.GetsockoptInt(nfd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		s.drop("not_coredump")
		s.logf("coredump socket: pid %d: no pidfd for the peer (SO_PEERPIDFD, Linux 6.5+): %v", c.PID, err)
		return
	}
	c.Pidfd = pfd
	// The pidfd is closed once nothing can signal through it any more.
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		unix.Close(pfd)
		c.Pidfd = -1
		mu.Unlock()
	}()
	c.Info, err = GetInfo(pfd, infoCoredump)
	if err == nil {
		c.DumpMode, err = dumpMode(pfd, c.PID, c.Info)
	}
	if err != nil {
		// Only the kernel connects for a task that is dumping core:
		// anything else (a local client, a replay) gets nothing.
		s.drop("not_coredump")
		s.logf("coredump socket: pid %d: %v: closing", c.PID, err)
		return
	}
	if s.Deadline > 0 {
		t := time.AfterFunc(time.Until(accepted.Add(s.Deadline+s.Grace)), func() {
			mu.Lock()
			defer mu.Unlock()
			if c.Pidfd >= 0 && unix.PidfdSendSignal(c.Pidfd, unix.SIGKILL, nil, 0) == nil {
				s.logf("coredump socket: pid %d: its handling overran the deadline; killed it to end the dump", c.PID)
			}
		})
		defer t.Stop()
		f.SetDeadline(accepted.Add(s.Deadline))
	}
	c.Request, err = handshake(f)
	if err != nil {
		s.logf("coredump socket: pid %d: %v", c.PID, err)
		return
	}
	// The handler gets a blocking descriptor of its own, as stdin in pipe
	// mode; this one (in the poller) is closed first.
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	var dfd int
	var derr error
	rc.Control(func(fd uintptr) { dfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	if derr != nil {
		s.logf("coredump socket: pid %d: %v", c.PID, derr)
		return
	}
	f.Close()
	unix.SetNonblock(dfd, false)
	c.File = os.NewFile(uintptr(dfd), "coredump connection")
	defer c.File.Close()
	s.Handle(c)
}

// handshake reads the start of the connection: under "@" the core's
// ELF header (left in the stream), under "@@" the kernel's request,
// which it answers (Request.Choose) and whose verdict it reads. An error
// means no core comes: closing the connection frees the task.
func handshake(f *os.File) (*Request, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var head [4]byte
	if err := peek(rc, head[:]); err != nil {
		return nil, err
	}
	if string(head[:]) == "\x7fELF" {
		return nil, nil // "@": the core itself
	}
	size := binary.NativeEndian.Uint32(head[:])
	if size < 4 || size > MaxReqSize {
		_, err := ParseRequest(head[:])
		if err == nil {
			err = fmt.Errorf("coredump request of %d bytes", size)
		}
		return nil, err
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("reading the coredump request: %w", err)
	}
	req, err := ParseRequest(b)
	if err != nil {
		return nil, err
	}
	mask := req.Choose()
	ack, err := req.Ack(mask)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(ack); err != nil {
		return nil, fmt.Errorf("answering the coredump request: %w", err)
	}
	var mark [MarkSize]byte
	if _, err := io.ReadFull(f, mark[:]); err != nil {
		return nil, fmt.Errorf("reading the kernel's verdict: %w", err)
	}
	if err := ParseMark(mark[:]); err != nil {
		return nil, err
	}
	if mask&Kernel == 0 {
		return nil, fmt.Errorf("the kernel offers no core stream (request mask %#x)", req.Mask)
	}
	return &req, nil
}

// peek waits until len(b) bytes can be read and copies them, leaving
// them in the stream.
func peek(rc syscall.RawConn, b []byte) error {
	for {
		var n int
		var perr error
		err := rc.Read(func(fd uintptr) bool {
			n, perr = peekFD(int(fd), b)
			return perr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the kernel: %w", err)
		case perr != nil:
			return fmt.Errorf("waiting for the kernel: %w", perr)
		case n == 0:
			return errors.New("the kernel closed the connection before sending anything")
		case n == len(b):
			return nil
		}
		// A part: the kernel sends its first message whole, so the rest
		// is on its way.
		time.Sleep(time.Millisecond)
	}
}

// PidfdInfo is struct pidfd_info (include/uapi/linux/pidfd.h), its first
// 64 bytes (PIDFD_INFO_SIZE_VER0), which hold coredump_mask since 6.16.
type PidfdInfo struct {
	Mask     uint64
	CgroupID uint64
	PID      uint32
	TGID     uint32
	PPID     uint32
	RUID     uint32
	RGID     uint32
	EUID     uint32
	EGID     uint32
	SUID     uint32
	SGID     uint32
	FSUID    uint32
	FSGID    uint32
	ExitCode int32
	Coredump uint32
	_        uint32
}

// PIDFD_INFO_* request bits, and the coredump_mask bits.
const (
	infoPID      = 1 << 0
	infoCgroupID = 1 << 2
	infoCoredump = 1 << 4

	// Coredumped: the task is dumping core (or did).
	Coredumped = 1 << 0
	// CoredumpSkip: the kernel skipped the core.
	CoredumpSkip = 1 << 1
	// CoredumpUser: dumped as the user (%d = 1).
	CoredumpUser = 1 << 2
	// CoredumpRoot: dumped as root, the task changed credentials (%d = 2).
	CoredumpRoot = 1 << 3

	// _IOWR(0xFF, 11, struct pidfd_info): read|write in the top bits,
	// the size in bits 16..29, alike on every architecture Go builds for
	// (handler/pidfd.go says why).
	ioctlGetInfo = 0xC0000000 | 64<<16 | 0xFF<<8 | 11
)

// GetInfo is PIDFD_GET_INFO on pidfd, asking for the bits in mask as
// well as those always returned.
func GetInfo(pidfd int, mask uint64) (PidfdInfo, error) {
	info := PidfdInfo{Mask: mask | infoPID | infoCgroupID}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(pidfd), ioctlGetInfo, uintptr(unsafe.Pointer(&info)))
	if e != 0 {
		return PidfdInfo{}, fmt.Errorf("PIDFD_GET_INFO: %w", e)
	}
	return info, nil
}

// dumpMode checks that the peer is dumping core and returns its %d.
// PIDFD_INFO_COREDUMP says both (Linux 6.16), when its mask is filled:
// the 6.18.44 kernel this was developed on answers with the bit set and
// an empty mask while the dump runs, so then /proc/<pid>/status says
// whether the task dumps (CoreDumping: 1, mm->core_state) and
// /proc/<pid>'s owner whether it dumps as root: the kernel gives the
// /proc files of a task that is not dumpable as the user to root
// (task_dump_owner). /proc/<pid> is the peer's as long as the pidfd's
// task still has that pid, checked after reading it.
func dumpMode(pidfd, pid int, info PidfdInfo) (int, error) {
	if info.Mask&infoCoredump != 0 && info.Coredump&Coredumped != 0 {
		if info.Coredump&CoredumpRoot != 0 {
			return 2, nil
		}
		return 1, nil
	}
	dir := "/proc/" + strconv.Itoa(pid)
	st, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0, fmt.Errorf("not dumping core: %w", err)
	}
	if !coreDumping(st) {
		return 0, fmt.Errorf("not dumping core (PIDFD_INFO_COREDUMP mask %#x, /proc status CoreDumping not 1)", info.Coredump)
	}
	mode := 1
	var fi unix.Stat_t
	if (unix.Stat(dir, &fi) == nil && fi.Uid == 0 && info.EUID != 0) || info.RUID != info.EUID || info.RGID != info.EGID {
		mode = 2
	}
	if again, err := GetInfo(pidfd, 0); err != nil || int(again.PID) != pid {
		return 0, fmt.Errorf("the peer is gone (%v)", err)
	}
	return mode, nil
}

// coreDumping reads the CoreDumping: line of /proc/<pid>/status.
func coreDumping(status []byte) bool {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "CoreDumping:"); ok {
			return strings.TrimSpace(v) == "1"
		}
	}
	return false
}

// accept is accept4(2) without the peer's address (SO_PEERCRED names
// it): unix.Accept4 would link every socket address type into the
// handler (x/sys/unix's anyToSockaddr).
func accept(fd int) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// peekFD is recv(2) with MSG_PEEK (unix.Recvfrom would link every socket
// address type, as unix.Accept4).
func peekFD(fd int, b []byte) (int, error) {
	r, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), unix.MSG_PEEK, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
