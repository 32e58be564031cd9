package handler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The coredump socket server's pre-started worker (docs/kernel-modes.md,
// "The pre-started worker"). A supervised crash costs the pipe mode a
// fork and exec of the child, and the child's runtime start, while the
// crashed process is held. The server pays that before the crash instead:
// it keeps one supervised child already exec'd and idle, blocked on a
// socket pair, and a crash hands it the same descriptors a fresh child
// gets (the core stream, the hand-over, the status pipe, the pidfd) with
// SCM_RIGHTS. From there the worker is the supervised child (RunChild)
// and the parent supervises it as one (wait, kill past the deadline, the
// registers-only report): only the start differs. A worker serves one
// crash; the next is started in the background once that crash is
// handled and its process is gone (refillAfter). A crash
// that finds none idle (a storm) starts a child as the pipe mode does.

// workerArg, after ChildFlag, makes the child a pre-started worker: its
// control socket on fd 3, /dev/null on fds 4 and 5 to keep them free for
// what it is handed.
const workerArg = "--worker"

// workers keeps at most one idle worker.
type workers struct {
	self     string
	log      *Logger
	mu       sync.Mutex
	idle     *child
	starting bool
	closed   bool
	_        [0]func() // not comparable: no equality function linked
}

// take returns the idle worker, nil when there is none. The next one is
// started once the crash is handled (serveConn, refillAfter): started
// now, its exec and runtime start would take CPU from the crash held
// frozen.
func (ws *workers) take() *child {
	ws.mu.Lock()
	ch := ws.idle
	ws.idle = nil
	ws.mu.Unlock()
	return ch
}

// refill starts a worker in the background unless one is idle or
// starting. A worker that fails to start is not retried until the next
// crash: a broken binary costs one fork per crash, as the pipe mode's.
func (ws *workers) refill() {
	ws.mu.Lock()
	start := ws.idle == nil && !ws.starting && !ws.closed
	ws.starting = ws.starting || start
	ws.mu.Unlock()
	if !start {
		return
	}
	go func() {
		ch, err := ws.spawn()
		if err != nil {
			ws.log.Warnf("coredump socket: cannot pre-start a worker: %v", err)
		}
		ws.mu.Lock()
		ws.starting = false
		if ch != nil && ws.closed {
			ch.ctl.Close() // the worker exits when its socket closes
		} else if ch != nil {
			ws.idle = ch
		}
		ws.mu.Unlock()
	}()
}

// refillAfter starts the next worker once the crashed process is gone
// (its pidfd turns readable when it exits), at most 10 s later: its exec
// and runtime start would otherwise compete for the CPUs with the
// kernel's teardown of the crashed process (a 1 GiB one took 50-60 ms
// longer to reap on 2 cores), after its report is written. A storm's
// crashes meanwhile start their own children.
func (ws *workers) refillAfter(pidfd int) {
	fd, err := unix.FcntlInt(uintptr(pidfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		ws.refill()
		return
	}
	go func() {
		pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		ts := unix.Timespec{Sec: 10}
		unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		unix.Close(fd)
		ws.refill()
	}()
}

// close ends the idle worker (its control socket closes: it exits).
func (ws *workers) close() {
	ws.mu.Lock()
	ws.closed = true
	if ws.idle != nil {
		ws.idle.ctl.Close()
		ws.idle = nil
	}
	ws.mu.Unlock()
}

// spawn starts a worker and waits until it says it is ready.
func (ws *workers) spawn() (*child, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ctl, peer := os.NewFile(uintptr(fds[0]), "worker control"), os.NewFile(uintptr(fds[1]), "worker control")
	null, err := os.Open(os.DevNull)
	if err != nil {
		closeAll(ctl, peer)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(ctl, peer, null)
		return nil, err
	}
	ch := &child{ctl: ctl, stderr: &headWriter{max: 8 << 10}, done: make(chan waitResult, 1)}
	ch.proc, err = os.StartProcess(ws.self, []string{ws.self, ChildFlag, workerArg}, &os.ProcAttr{
		Files: []*os.File{null, null, errW, peer, null, null},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	closeAll(peer, null, errW)
	if err != nil {
		closeAll(ctl, errR)
		return nil, err
	}
	ch.collect(errR, ws.log)
	// Ready: its runtime is up and it waits for work. A worker that
	// dies, or hangs, before that is given up.
	unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10})
	var b [1]byte
	if n, err := unix.Read(fds[0], b[:]); n != 1 {
		if err == nil {
			err = errors.New("it exited")
		}
		ch.proc.Kill()
		ctl.Close()
		return nil, fmt.Errorf("the worker did not start: %v %s", err, strings.TrimSpace(string(ch.stderr.Bytes())))
	}
	return ch, nil
}

// assign hands a crash to the worker: what a started child gets on fds
// 0, 3, 4 and 5 and in its arguments. It returns why not on failure (the
// caller then starts a child instead).
func (ch *child) assign(c *crash, o KernelOptions) error {
	defer ch.ctl.Close()
	core := c.in.fd()
	if core == nil {
		return errors.New("no core descriptor")
	}
	hand, handW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer hand.Close()
	statusR, status, err := os.Pipe()
	if err != nil {
		handW.Close()
		return err
	}
	defer status.Close()
	rights := []int{int(core.Fd()), int(hand.Fd()), int(status.Fd())}
	if c.proc.pidfd != nil {
		rights = append(rights, c.proc.pidfd.fd)
	}
	// The words: whether to skip the drift check (noDriftEnv), the
	// config, the kernel's arguments.
	drift := "1"
	if c.env.drift == nil {
		drift = "0"
	}
	words := strings.Join(append([]string{drift, o.ConfigPath}, o.Args...), "\x00")
	if _, _, _, err := msg(unix.SYS_SENDMSG, int(ch.ctl.Fd()), []byte(words), unix.UnixRights(rights...), unix.MSG_NOSIGNAL); err != nil {
		handW.Close()
		statusR.Close()
		return err
	}
	ch.handW, ch.statusR = handW, statusR
	return nil
}

// collect copies the child's stderr into ch.stderr (and the log when it
// is a plain stream), then waits for it.
func (ch *child) collect(errR *os.File, lg *Logger) {
	var sink io.Writer = ch.stderr
	if w := lg.passthrough(); w != nil {
		sink = io.MultiWriter(ch.stderr, w)
	}
	go func() {
		io.Copy(sink, errR)
		errR.Close()
		st, err := ch.proc.Wait()
		ch.done <- waitResult{st, err}
	}()
}

// awaitWork is the worker's idle state: it says it is ready on ctl, then
// waits for a crash, moves the descriptors it is handed to where a
// started child has them, and returns the child's arguments (CONFIG
// KERNEL-ARGS...). io.EOF: the server closed the socket (it exits, or
// gave the worker up).
func awaitWork(ctl *os.File) ([]string, error) {
	fd := int(ctl.Fd())
	if _, err := unix.Write(fd, []byte{'r'}); err != nil {
		return nil, err
	}
	buf := make([]byte, 16<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, err := msg(unix.SYS_RECVMSG, fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, io.EOF
	}
	// One SCM_RIGHTS message (x/sys's parser is 0.7 KB of flash).
	var got []int
	if h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0])); oobn >= unix.CmsgLen(0) && h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_RIGHTS {
		for off := unix.CmsgLen(0); off+4 <= int(h.Len) && off+4 <= oobn; off += 4 {
			got = append(got, int(*(*int32)(unsafe.Pointer(&oob[off]))))
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(got) < 3 {
		return nil, errors.New("the worker was handed too much, or too few descriptors")
	}
	// The received descriptors are above 5 (0 to 5 are held), so none is
	// overwritten before it is moved.
	for i, to := range []int{0, 3, 4, ChildPidfd} {
		if i < len(got) {
			err = unix.Dup3(got[i], to, unix.O_CLOEXEC)
			unix.Close(got[i])
		} else {
			err = unix.Close(to)
		}
		if err != nil {
			return nil, err
		}
	}
	w := strings.Split(string(buf[:n]), "\x00")
	if len(w) < 2 {
		return nil, errors.New("the worker was handed no config")
	}
	if w[0] == "0" {
		os.Setenv(noDriftEnv, "1")
	}
	return w[1:], nil
}

// msg is sendmsg(2) or recvmsg(2) (sysno) of p with the control bytes
// oob, without an address: x/sys unix's own would link every socket
// address type (coredumpsock.accept says the same).
func msg(sysno uintptr, fd int, p, oob []byte, flags uintptr) (n, oobn, mflags int, err error) {
	var iov unix.Iovec
	iov.Base = &p[0]
	iov.SetLen(len(p))
	var m unix.Msghdr
	m.Iov = &iov
	m.SetIovlen(1)
	m.Control = &oob[0]
	m.SetControllen(len(oob))
	for {
		r, _, e := unix.Syscall(sysno, uintptr(fd), uintptr(unsafe.Pointer(&m)), flags)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, 0, 0, e
		}
		return int(r), int(m.Controllen), int(m.Flags), nil
	}
}
