package handler

import (
	"io"
	"os"
	"time"

	"github.com/unwound-dev/unwound/handler/admit"
	"github.com/unwound-dev/unwound/handler/module"
)

// An input mode is how one crash's core reaches the handler: the kernel's
// pipe (kernel mode, and a supervised child's copy of it), a core file,
// or a core on standard input (offline). Each mode is one constructor of
// input; everything after it is the one pipeline (pipeline.go), which
// reads the core the way the input allows (streamed or at random, live
// from /proc/<pid> while the process is held), and admits, unwinds,
// assembles, stores and logs alike for every mode.
//
// A new input mode is one more constructor. Issue 28's coredump socket
// server, say, per connection: the accepted socket as stream and closer
// (an *os.File in non-blocking mode with its read deadline set, as
// pipeReader makes the pipe: package net stays out of the handler), skip
// nil (splice takes no socket to /dev/null), args with the peer's pid
// (SO_PEERCRED) and, when known, its exe and signal, pidfd from
// openPidfd on the peer's pidfd (SO_PEERPIDFD), held and queued set. It
// then runs in the server's own process, without fork or exec:
//
//	c := newCrash(e, in, time.Now())
//	c.pipeline((*crash).unwindHere)
//
// with the same admission, deadline, freeze budget and queue as the
// kernel's pipe; e is one env (config, log, admission policy) for the
// server. What RunKernel does to its own process stays there: the hard
// deadline (os.Exit), the memory limits, oom_score_adj. One thing is
// still process-wide: module.SetIODeadline, which crashes handled at the
// same time would have to share (the latest deadline).
type input struct {
	stream io.Reader // the core as it streams in; nil for a file
	file   *os.File  // a core on disk, read at random; nil for a stream
	closer io.Closer // closing it ends the dump and frees the process; nil when nothing does

	// skip discards n bytes of the stream without copying them through
	// the handler (splice into /dev/null); nil: they are read and dropped.
	skip func(n int64) (int64, error)

	// args is who crashed, as the kernel said (%P %I %s %t %d %c %E %e);
	// nargs is how many of those arguments it gave, for the policies
	// that act only on an argument given. Zero offline.
	args  admit.KernelArgs
	nargs int
	pidfd *pidfd

	// held: the crashed process is held (until closer is closed, for the
	// kernel's pipe), so /proc/<pid> is tried while it is that process
	// (the pidfd checks): memory is read live within the freeze budget,
	// files through /proc/<pid>/map_files.
	held bool
	// queued: admission applies and the report goes into the queue (the
	// kernel's modes); else it is only returned (offline).
	queued bool
	// root is where module files are found when the process is not held:
	// NT_FILE's paths under a sysroot (or --exe's program placed by
	// AT_ENTRY, for a core without NT_FILE).
	root *sysroot
}

// sysroot is where a core's files are, when they cannot be taken from
// the process (offline.go, offlineModules).
type sysroot struct {
	dir     string
	exe     string          // the main program, for cores without NT_FILE
	sources []module.Source // tried before dir for every module
}

// pipeInput is the kernel's core pipe on f, after prefix (a supervised
// child's: the bytes its parent already read; else nil), with the kernel's
// arguments. How the core is read follows from what f is: a pipe (what
// the kernel gives) is streamed, with the process held until it is
// closed; a regular file on standard input (someone trying the handler by
// hand: `unwound-handler ARGS < core`) is read as a core file, at random:
// a stream reader would try to splice it, which only pipes can. Either
// way the arguments name the process, and /proc/<pid> is read while it
// is that process.
func pipeInput(f *os.File, prefix io.Reader, ka admit.KernelArgs, nargs int, pidfd *pidfd, deadline time.Time) *input {
	in := &input{args: ka, nargs: nargs, pidfd: pidfd, queued: true, held: true}
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		in.file = f
		return in
	}
	pipe := pipeReader(f, deadline)
	cr := &coreReader{prefix: prefix, pipe: pipe}
	in.stream, in.closer, in.skip = cr, pipe, cr.skip
	return in
}

// fileInput is a core file on disk (--core-file FILE): read at random,
// its files from root. The file must be regular (a FIFO: use
// --core-file - instead).
func fileInput(f *os.File, root *sysroot) *input {
	return &input{file: f, root: root}
}

// streamInput is a core on standard input (--core-file -): streamed, a
// stalled pipe ending at the deadline; a regular file is read as one.
func streamInput(r io.Reader, root *sysroot, deadline time.Time) *input {
	in := &input{stream: r, root: root}
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			return fileInput(f, root)
		}
		p := pipeReader(f, deadline)
		in.stream, in.closer = p, p
	}
	return in
}

// fd is the descriptor the core is read from, when it is one: a
// supervised child inherits it.
func (in *input) fd() *os.File {
	if in.file != nil {
		return in.file
	}
	f, _ := in.closer.(*os.File)
	return f
}
