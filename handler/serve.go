package handler

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/coredumpsock"
	"github.com/unwound-dev/unwound/sysctl"
	"golang.org/x/sys/unix"
)

// The coredump socket server (core_pattern "@@/path" on Linux 6.17+, "@/path"
// on 6.16: docs/kernel-modes.md). It is the pipe mode without a fork and
// exec per crash: each connection goes, in this process, through RunKernel
// as a pipe would, with the connection as the core stream and the peer's
// pid and pidfd as the kernel's arguments, so the queue, admission control,
// rate limits, deadline, freeze budget and supervision are the same.

// ServeOptions are the server's inputs.
type ServeOptions struct {
	ConfigPath string
	// Socket is where to listen when systemd passed no socket.
	Socket string
	// Self is the handler's own binary, for the supervised child.
	Self string
	Log  *Logger
	// ProcSys is where drift is checked (default /proc/sys).
	ProcSys string
	// Ready, when set, is told the server listens (tests).
	Ready func(*coredumpsock.Server)
}

// Serve runs the coredump socket server. SIGTERM ends it as it ends any
// process (no handler: os/signal would cost the handler binary flash):
// the connections in hand close, which frees their tasks, and a socket
// it bound stays behind, replaced by the next server (systemd's socket
// unit keeps its own). It returns the exit status.
func Serve(o ServeOptions) int {
	lg := o.Log
	// Never dump core: the kernel would connect to this very socket for
	// it, and no goroutine of a dumping process answers (fs/coredump.c
	// asks the server to mark itself non-dumpable).
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	cfg, err := config.LoadOrDefault(o.ConfigPath)
	if err != nil {
		lg.Errorf("%v", err)
	}
	ln := coredumpsock.FromSystemd()
	activated := ln != nil
	var idle time.Duration
	if activated {
		// systemd keeps the socket and its backlog while the server is
		// gone, and starts it again for the next crash: an idle server
		// need not stay resident.
		idle = cfg.Handler.SocketIdleExit.D()
	} else {
		if ln, err = coredumpsock.Listen(o.Socket, coredumpsock.DefaultBacklog); err != nil {
			lg.Errorf("coredump socket: %v", err)
			return 1
		}
	}
	// The drift check after each crash (here, or in the supervised child)
	// takes this socket as unwound's.
	os.Setenv(sysctl.SocketEnv, o.Socket)
	pol := admitPolicy(cfg)
	var ws *workers
	if o.Self != "" && cfg.Handler.Supervise {
		ws = &workers{self: o.Self, log: lg}
		if !activated {
			// Activated, the server was started by a crash that waits:
			// a worker's exec now would compete with it. The first
			// comes once that crash is handled (serveConn).
			ws.refill()
		}
		defer ws.close()
	}
	srv := &coredumpsock.Server{
		Handle:   func(c *coredumpsock.Conn) { serveConn(o, c, ws) },
		IdleExit: idle,
		Deadline: cfg.Handler.Deadline.D(),
		Grace:    2 * time.Second,
		Logf:     lg.Warnf,
		Drop: func(reason string) {
			if os.MkdirAll(pol.Dir, 0o700) == nil {
				admit.Drop(pol, reason)
			}
		},
	}
	lg.Infof("coredump socket server listening on %s", ln.Name())
	if o.Ready != nil {
		o.Ready(srv)
	}
	if err := srv.Serve(ln); err != nil {
		lg.Errorf("coredump socket: %v", err)
		return 1
	}
	if n := srv.Dropped.Load(); n > 0 {
		lg.Warnf("coredump socket server: %d cores dropped", n)
	}
	if srv.Idle() {
		lg.Infof("coredump socket server: idle for %v, exiting (systemd keeps the socket)", idle)
	}
	return 0
}

// serveConn hands one connection to the pipe mode's path: the arguments
// core_pattern's specifiers would give (sysctl.PatternSpecifiers), as far
// as the peer tells them, and its pidfd.
func serveConn(o ServeOptions, c *coredumpsock.Conn, ws *workers) {
	RunKernel(KernelOptions{
		ConfigPath: o.ConfigPath,
		Args:       connArgs(c),
		Stdin:      c.File,
		Log:        o.Log,
		ProcSys:    o.ProcSys,
		Pidfd:      strconv.Itoa(c.Pidfd),
		Self:       o.Self,
		inProcess:  true,
		workers:    ws,
	})
	if ws != nil {
		ws.refillAfter(c.Pidfd)
	}
}

// connArgs are %P %I %s %t %d %c %E %e for the peer. The crashing
// thread (%I) and the signal (%s) are left 0: the core's first thread is
// the one that crashed, and its NT_SIGINFO has the signal. %c is the
// task's RLIMIT_CORE (the kernel ignores it for a socket, as for a pipe:
// handler.honor_rlimit_core decides), %E and %e come from /proc while
// the kernel holds the task.
func connArgs(c *coredumpsock.Conn) []string {
	pid := strconv.Itoa(c.PID)
	exe, _ := os.Readlink("/proc/" + pid + "/exe")
	comm, _ := os.ReadFile("/proc/" + pid + "/comm")
	rlimit := "18446744073709551615"
	var rl unix.Rlimit
	if unix.Prlimit(c.PID, unix.RLIMIT_CORE, nil, &rl) == nil {
		rlimit = strconv.FormatUint(rl.Cur, 10)
	}
	return []string{pid, "0", "0", strconv.FormatInt(time.Now().Unix(), 10),
		strconv.Itoa(c.DumpMode), rlimit,
		strings.ReplaceAll(exe, "/", "!"), strings.TrimSuffix(string(comm), "\n")}
}
