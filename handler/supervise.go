package handler

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/unwound-dev/unwound/internal/smallsort"
	"github.com/unwound-dev/unwound/report"
	"golang.org/x/sys/unix"
)

// Self-supervision (docs/design.md, "Self-supervision"). Go's fatal errors
// (out of memory, stack exhaustion, concurrent map writes) end the process
// whatever recover() does, and a handler that dies leaves no trace: its
// RLIMIT_CORE is 1. So the handler that the kernel starts reads the core's
// headers and notes (bounded, cheap), then re-executes itself as a child
// that does the rest: live memory, module files, unwinding, the report.
// When the child dies, or overruns the deadline, the parent still writes a
// minimal report from the notes it holds: the signal, the executable, each
// thread's PC and link register, and why the full unwind failed.

// ChildFlag, as the first argument, makes unwound-handler the supervised
// child: ChildFlag CONFIG KERNEL-ARGS..., the core pipe on fd 0, the
// hand-over (a line of words, handover.format, then the core bytes the
// parent already read) on fd 3, and fd 4 to say the report is stored.
const ChildFlag = "--unwind-child"

// childGrace is how long after the deadline a child is given before it is
// killed; its own hard deadline (deadline + 2 s) comes later.
const childGrace = 500 * time.Millisecond

// handover is the state a parent passes to its child before the core bytes.
type handover struct {
	StartNS int64 // the parent's start: one deadline for both
	Slot    int   // the parent's admission slot, -1 without one (admit.MarkLanded)
	Dropped map[string]int
}

// format writes the hand-over as one line of words: the start time, the
// slot, then reason=count for every drop count.
func (h handover) format() []byte {
	b := strconv.AppendInt(nil, h.StartNS, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(h.Slot), 10)
	reasons := make([]string, 0, len(h.Dropped))
	for r := range h.Dropped {
		reasons = append(reasons, r)
	}
	smallsort.Strings(reasons)
	for _, r := range reasons {
		b = append(b, ' ')
		b = append(b, r...)
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(h.Dropped[r]), 10)
	}
	return append(b, '\n')
}

func parseHandover(line string) (handover, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return handover{}, errors.New("short hand-over")
	}
	start, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return handover{}, fmt.Errorf("hand-over start %q", f[0])
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil || slot < -1 {
		return handover{}, fmt.Errorf("hand-over slot %q", f[1])
	}
	h := handover{StartNS: start, Slot: slot}
	for _, w := range f[2:] {
		r, v, ok := strings.Cut(w, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return handover{}, fmt.Errorf("hand-over drop count %q", w)
		}
		if h.Dropped == nil {
			h.Dropped = map[string]int{}
		}
		h.Dropped[r] = n
	}
	return h, nil
}

// recorder keeps every byte read through it, in the chunks read (no
// doubling buffer: the notes of a big process are megabytes).
type recorder struct {
	r      io.Reader
	chunks [][]byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.chunks = append(r.chunks, bytes.Clone(p[:n]))
	}
	return n, err
}

// supervise is the pipeline's work in a supervising parent: it reads the
// headers and notes, has a child do the rest (unwindHere, in RunChild),
// and returns the registers-only report only if the child does not store
// the full one (nil when it did).
func (c *crash) supervise(o KernelOptions) *report.Report {
	if c.registersOnly {
		return c.unwindHere() // the notes alone: nothing a child could die of
	}
	// The child starts now: its runtime comes up while the headers
	// stream in. It waits for the hand-over before it reads the core.
	ch, startErr := c.startChild(o)
	rec := &recorder{r: c.in.stream}
	c.in.stream = rec
	_, err, _ := c.readCore()
	if c.img.core == nil {
		if ch != nil {
			ch.proc.Kill()
			ch.wait(c.deadline)
		}
		c.release()
		c.out.frozen = time.Since(c.start)
		c.coreError(err)
		return c.minimalReport()
	}
	why := startErr
	if ch != nil {
		ch.handOver(c, rec.chunks)
		// The core is the child's now: the parent's copy of the pipe must
		// not keep the dump (and the crashed process) alive.
		c.release()
		why = ch.wait(c.deadline)
	}
	c.release()
	c.out.frozen = time.Since(c.start)
	c.env.supervisor = ch != nil
	if why == "" {
		return nil
	}
	if c.out.ticket.Stored() {
		// Killed or dead after its report landed, before it could say
		// so: the report is in the queue, and one more would repeat it.
		c.env.log.Warnf("pid %d: %s, after its report was stored", c.proc.pid, why)
		return nil
	}
	c.env.log.Errorf("pid %d: %s; writing the registers-only report", c.proc.pid, why)
	if err != nil {
		c.coreError(err)
	}
	c.errorf("full unwind failed: %s", why)
	c.registersResults()
	return c.report()
}

// child is the running unwinding child.
type child struct {
	proc    *os.Process
	handW   *os.File // fd 3's other end
	statusR *os.File // fd 4's other end
	stderr  *headWriter
	done    chan waitResult
	pidf    *os.File // a copy of the crashed process's pidfd for the child
	ctl     *os.File // a pre-started worker's control socket (worker.go)
}

// waitResult is how the child ended, once its stderr is drained.
type waitResult struct {
	state *os.ProcessState
	err   error
}

// startChild starts the child on the pipe, or hands the crash to the
// coredump socket server's idle worker; it returns why not on failure.
func (c *crash) startChild(o KernelOptions) (*child, string) {
	if o.workers != nil {
		ch := o.workers.take()
		if ch == nil {
			c.env.log.Infof("pid %d: no pre-started worker idle; starting a child", c.proc.pid)
		} else if err := ch.assign(c, o); err != nil {
			c.env.log.Warnf("pid %d: the pre-started worker %d: %v; starting a child", c.proc.pid, ch.proc.Pid, err)
			ch.proc.Kill()
		} else {
			c.env.log.Infof("pid %d: unwinding in the pre-started worker %d", c.proc.pid, ch.proc.Pid)
			return ch, ""
		}
	}
	hand, handW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Sprintf("supervisor: %v", err)
	}
	statusR, status, err := os.Pipe()
	if err != nil {
		hand.Close()
		handW.Close()
		return nil, fmt.Sprintf("supervisor: %v", err)
	}
	// fd 1 is /dev/null, as os/exec would make it (a closed fd 1 would be
	// reused by the child's next open); stderr goes through a pipe into
	// headWriter, for the runtime's last words.
	null, err := os.Open(os.DevNull)
	if err != nil {
		closeAll(hand, handW, statusR, status)
		return nil, fmt.Sprintf("supervisor: %v", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(hand, handW, statusR, status, null)
		return nil, fmt.Sprintf("supervisor: %v", err)
	}
	ch := &child{handW: handW, statusR: statusR, stderr: &headWriter{max: 8 << 10}, done: make(chan waitResult, 1)}
	// os.StartProcess rather than os/exec: the same fork and exec without
	// linking os/exec's path lookup and I/O plumbing into the handler.
	files := []*os.File{c.in.fd(), null, errW, hand, status}
	if c.proc.pidfd != nil {
		// The pidfd goes on as ChildPidfd; the child checks it again.
		// A copy, closed once the child has it: the pidfd stays the
		// caller's (the coredump socket server closes its own).
		if fd, err := unix.FcntlInt(uintptr(c.proc.pidfd.fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			ch.pidf = os.NewFile(uintptr(fd), "pidfd")
			files = append(files, ch.pidf)
		}
	}
	env := os.Environ()
	if c.env.drift == nil {
		env = append(env, noDriftEnv+"=1") // the server checked lately
	}
	ch.proc, err = os.StartProcess(o.Self, append([]string{o.Self, ChildFlag, o.ConfigPath}, o.Args...), &os.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
	closeAll(hand, status, null, errW)
	if ch.pidf != nil {
		ch.pidf.Close()
	}
	if err != nil {
		closeAll(handW, statusR, errR)
		return nil, fmt.Sprintf("cannot start the unwinding child: %v", err)
	}
	// With the log on stderr (UNWOUND_LOG_STDERR) the child's lines go
	// there too, as they would unsupervised.
	ch.collect(errR, c.env.log)
	return ch, ""
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// handOver gives the child the parent's start time, the drop counts and
// the core bytes read so far.
func (ch *child) handOver(c *crash, prefix [][]byte) {
	go func() {
		ch.handW.Write(handover{StartNS: c.start.UnixNano(), Slot: c.out.ticket.Slot(), Dropped: c.out.dropped}.format())
		for _, b := range prefix {
			if _, err := ch.handW.Write(b); err != nil {
				break
			}
		}
		ch.handW.Close()
	}()
}

// wait waits for the child, killing it a little after the deadline. It
// returns "" when the child stored its report, else why it did not.
func (ch *child) wait(deadline time.Time) string {
	defer ch.statusR.Close()
	var res waitResult
	var killed bool
	timer := time.NewTimer(time.Until(deadline) + childGrace)
	defer timer.Stop()
	select {
	case res = <-ch.done:
	case <-timer.C:
		killed = true
		ch.proc.Kill()
		res = <-ch.done
	}
	ch.handW.Close()
	var st [8]byte
	n, _ := io.ReadFull(ch.statusR, st[:])
	if string(st[:n]) == "stored\n" {
		return ""
	}
	if killed {
		return "the unwinding child overran the deadline and was killed"
	}
	why := "the unwinding child exited without a report"
	if st := res.state; st != nil && !st.Success() {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			why = fmt.Sprintf("the unwinding child was killed by %s", report.SignalName(int(ws.Signal())))
		} else {
			why = fmt.Sprintf("the unwinding child exited with status %d", st.ExitCode())
		}
	} else if res.err != nil {
		why = fmt.Sprintf("the unwinding child: %v", res.err)
	}
	if line := fatalLine(ch.stderr.last()); line != "" {
		why += ": " + line
	}
	return why
}

// fatalLine picks the Go runtime's own words out of a dead child's stderr:
// a fatal error, a panic, or a fault the runtime itself took (its line
// "SIGSEGV: segmentation violation", with no fatal error before it).
func fatalLine(b []byte) string {
	for _, l := range strings.Split(string(b), "\n") {
		if hasPrefix(l, "fatal error: ", "panic: ", "SIGSEGV: ", "SIGBUS: ", "SIGILL: ", "SIGFPE: ") {
			if len(l) > 160 {
				l = l[:160] + "…"
			}
			return l
		}
	}
	return ""
}

func hasPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// headWriter keeps the first max bytes written to it, and the last max
// after those: a child that logged much before it died still has the
// runtime's last words kept.
type headWriter struct {
	mu      sync.Mutex
	max     int
	b, tail []byte
}

func (w *headWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(max(w.max-len(w.b), 0), len(p))
	w.b = append(w.b, p[:n]...)
	if rest := p[n:]; len(rest) > 0 {
		w.tail = append(w.tail, rest...)
		if over := len(w.tail) - w.max; over > 0 {
			w.tail = append(w.tail[:0], w.tail[over:]...)
		}
	}
	return len(p), nil
}

// last is what the head and the tail kept, for fatalLine.
func (w *headWriter) last() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(append(append([]byte(nil), w.b...), '\n'), w.tail...)
}

func (w *headWriter) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b
}

// ChildOptions are the supervised child's inputs (see ChildFlag).
type ChildOptions struct {
	Args    []string // CONFIG KERNEL-ARGS...
	Stdin   *os.File // the core pipe
	Handoff *os.File // fd 3
	Status  *os.File // fd 4
	Log     *Logger
}

// RunChild is the supervised child: RunKernel's work after the headers,
// from the same bytes.
func RunChild(o ChildOptions) int {
	lg := o.Log
	if len(o.Args) < 1 {
		lg.Errorf("%s: no config argument", ChildFlag)
		return 2
	}
	if o.Args[0] == workerArg {
		// A pre-started worker (worker.go): idle until a crash comes.
		args, err := awaitWork(o.Handoff)
		if err == io.EOF {
			return 0
		}
		if err != nil {
			lg.Errorf("%s: %v", workerArg, err)
			return 2
		}
		o.Args = args
	}
	br := bufio.NewReaderSize(o.Handoff, 4096)
	line, err := br.ReadSlice('\n')
	var h handover
	if err == nil {
		h, err = parseHandover(string(line))
	}
	if err != nil {
		lg.Errorf("%s: reading the hand-over: %v", ChildFlag, err)
		return 2
	}
	start := time.Unix(0, h.StartNS)
	e, ka, notes, stop := startKernel(lg, o.Args[0], o.Args[1:], start, true)
	defer stop()
	e.drift = func() { LogDrift(lg, "", o.Args[0], e.cfg.RateLimit.MaxConcurrent) }
	if os.Getenv(noDriftEnv) != "" {
		e.drift = nil
	}
	e.inject = injectFromEnv(true)
	e.parent = os.Getppid()
	in := pipeInput(o.Stdin, br, ka, len(o.Args)-1, childPidfd(ka.PID), start.Add(e.cfg.Handler.Deadline.D()))
	c := newCrash(e, in, start)
	c.out.errs, c.out.dropped, c.out.slot = notes, h.Dropped, h.Slot
	c.pipeline((*crash).unwindHere)
	o.Status.Write([]byte("stored\n"))
	return 0
}
