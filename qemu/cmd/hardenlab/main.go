// Command hardenlab runs inside the core lab's guests for the hardening
// tests (qemu/harden_test.go): the handler's footprint under a big crash,
// a FUSE file served by the crashing process itself, and a crash inside a
// container (other pid and mount namespaces, its own root).
//
//	hardenlab rss OUT HANDLER ARGS...   a core_pattern wrapper: runs the
//	                 handler on the core pipe and writes what the handler's
//	                 process tree used to OUT.<pid>: its peak RSS sampled
//	                 (parent and child together), the sum of their VmHWM
//	                 as last seen, and wait4's ru_maxrss
//	hardenlab budget PROG MODE...       set core_pattern for each mode
//	                 (/etc/unwound/MODE.toml) through the wrapper, crash
//	                 PROG once per mode, wait for the report and the
//	                 handler's exit
//	hardenlab fuse MODE...              per mode: start fusecrash, which
//	                 serves a FUSE mount itself and crashes with its PC in
//	                 a file mapped from it; the handler must finish anyway
//	hardenlab fusecrash MNT             (the FUSE-serving crasher)
//	hardenlab hold                      keeps the /dev/fuse descriptor
//	                 (fd 3) open, answering nothing, until killed
//	hardenlab container MODE...         per mode: copy /ctsrc to a fresh
//	                 root, run /app/ct there in new pid and mount
//	                 namespaces, plant symlinks over its mapped files,
//	                 crash it, and watch (inotify) that nothing outside its
//	                 root was opened
//
// Every fact goes to the console as one "HL-…" line; the host parses them.
package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/unwound-dev/unwound/qemu/guest"
)

// console carries the facts the host parses.
var console = guest.Console{Prefix: "HL-"}

const qdir = "/var/lib/unwound/queue"

func main() {
	if len(os.Args) < 2 {
		console.Fail("usage: hardenlab rss|budget|fuse|fusecrash|hold|container")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "rss":
		os.Exit(rssWrap(args[0], args[1:]))
	case "budget":
		budget(args[0], args[1:])
	case "fuse":
		fuseRuns(args)
	case "fusecrash":
		fuseCrash(args[0])
	case "hold":
		for {
			time.Sleep(time.Hour)
		}
	case "container":
		containerRuns(args)
	default:
		console.Fail("unknown command %q", os.Args[1])
	}
}

// --- footprint ---

// status reads fields of /proc/<pid>/status, in KiB.
func status(pid int, keys ...string) map[string]int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	out := map[string]int64{}
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		for _, k := range keys {
			if v, ok := strings.CutPrefix(l, k+":"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					out[k], _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return out
}

// children returns the pids whose parent is pid.
func children(pid int) []int {
	var out []int
	eachProc(func(p int, _ string, f []string) {
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	})
	return out
}

// eachProc calls fn with every process's pid, command name and the fields
// of /proc/PID/stat after the name (state, ppid, ...).
func eachProc(fn func(pid int, comm string, f []string)) {
	ds, _ := os.ReadDir("/proc")
	for _, d := range ds {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and
		// parentheses, so it ends at the last ')'.
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i >= 0 && j > i {
			fn(p, s[i+1:j], strings.Fields(s[j+1:]))
		}
	}
}

// rssWrap runs the handler under the kernel's pipe and measures its
// process tree: every 2 ms the sum of VmRSS over the handler and its
// children (the supervising parent and the unwinding child run at the
// same time), and each process's VmHWM as last seen. wait4 gives the exact
// peak of the largest single process of the tree (ru_maxrss of a waited
// child covers its own waited children).
func rssWrap(out string, argv []string) int {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = os.Stdin
	start := time.Now()
	if err := cmd.Start(); err != nil {
		os.WriteFile(out+".err", []byte(err.Error()), 0o644)
		return 0
	}
	os.Stdin.Close() // the handler holds the pipe now
	pid := cmd.Process.Pid
	done := make(chan struct{})
	var sampled, samples, anonAtPeak, fileAtPeak, onceAtPeak int64
	hwm := map[int]int64{}
	go func() {
		defer close(done)
		for {
			select {
			case <-done:
				return
			default:
			}
			tree := append([]int{pid}, children(pid)...)
			var sum, anon, file, maxFile int64
			for _, p := range tree {
				st := status(p, "VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")
				sum += st["VmRSS"]
				// The binary's pages: RssFile on a board's flash,
				// RssShmem on the guest's initramfs.
				anon += st["RssAnon"]
				file += st["RssFile"] + st["RssShmem"]
				maxFile = max(maxFile, st["RssFile"]+st["RssShmem"])
				if st["VmHWM"] > hwm[p] {
					hwm[p] = st["VmHWM"]
				}
			}
			if sum > sampled {
				sampled, anonAtPeak, fileAtPeak = sum, anon, file
			}
			// Both processes run the same binary: its pages are in memory
			// once. Counted once (the larger process's set), a lower bound
			// of the pair's real use; the plain sum is the upper bound.
			onceAtPeak = max(onceAtPeak, anon+maxFile)
			samples++
			if st := status(pid, "State"); len(st) == 0 {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	// The sampler stops by itself once the handler is gone.
	<-done
	var rusage int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rusage = int64(ru.Maxrss)
	}
	var hwmSum int64
	for _, v := range hwm {
		hwmSum += v
	}
	line := fmt.Sprintf("pid=%s sampled_tree_kib=%d anon_kib=%d file_kib=%d binary_once_kib=%d hwm_sum_kib=%d procs=%d rusage_max_kib=%d samples=%d wall_ms=%d err=%v\n",
		argv[len(argv)-8], sampled, anonAtPeak, fileAtPeak, onceAtPeak, hwmSum, len(hwm), rusage, samples, wall.Milliseconds(), err)
	os.WriteFile(fmt.Sprintf("%s.%s", out, argv[len(argv)-8]), []byte(line), 0o644)
	return 0
}

// queueCount is the number of reports in the queue.
func queueCount() int {
	m, _ := filepath.Glob(qdir + "/*.json.zst")
	return len(m)
}

// handlers returns the pids of running unwound-handler processes and
// their states (R, S, D, …).
func handlers() map[int]string {
	out := map[int]string{}
	eachProc(func(p int, comm string, f []string) {
		if strings.HasPrefix(comm, "unwound-handle") && len(f) > 0 {
			out[p] = f[0]
		}
	})
	return out
}

// waitHandlers waits until no handler runs, and returns how long that took
// and the worst state seen (D: uninterruptible, the kernel waiting on
// something that may never come).
func waitHandlers(max time.Duration) (time.Duration, bool, bool) {
	start := time.Now()
	dstate := false
	for time.Since(start) < max {
		hs := handlers()
		if len(hs) == 0 {
			return time.Since(start), dstate, true
		}
		for _, st := range hs {
			if st == "D" {
				dstate = true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start), dstate, false
}

func setPattern(p string) {
	if err := os.WriteFile("/proc/sys/kernel/core_pattern", []byte(p), 0o644); err != nil {
		console.Fail("core_pattern: %v", err)
	}
}

func pattern(mode string) string {
	return "|/bin/unwound-handler --config /etc/unwound/" + mode + ".toml %P %I %s %t %d %c %E %e"
}

// waitReport waits until the queue holds n reports.
func waitReport(n int, max time.Duration) bool {
	for end := time.Now().Add(max); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if queueCount() >= n {
			return true
		}
	}
	return false
}

// budget crashes prog once per mode through the measuring wrapper.
// Earlier steps' reports may be in the queue.
func budget(prog string, modes []string) {
	before := queueCount()
	for i, mode := range modes {
		setPattern("|/bin/hardenlab rss /run/rss-" + mode + " /bin/unwound-handler --config /etc/unwound/" + mode + ".toml %P %I %s %t %d %c %E %e")
		cmd := exec.Command(prog)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stdout
		start := time.Now()
		if err := cmd.Start(); err != nil {
			console.Fail("%s: %v", prog, err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line == "" {
			cmd.Wait()
			console.Fail("%s exited before it was ready: %v", prog, cmd.ProcessState)
		}
		console.Say("BUDGET-READY mode=%s pid=%d %s rss_kib=%d setup_ms=%d", mode, cmd.Process.Pid, strings.TrimSpace(line),
			status(cmd.Process.Pid, "VmRSS")["VmRSS"], time.Since(start).Milliseconds())
		crashed := time.Now()
		in.Write([]byte{'x'}) // the program crashes on it
		cmd.Wait()
		reap := time.Since(crashed)
		if !waitReport(before+i+1, 120*time.Second) {
			console.Fail("mode %s: no report", mode)
		}
		exit, _, ok := waitHandlers(60 * time.Second)
		if !ok {
			console.Fail("mode %s: handler still running", mode)
		}
		rss := wrapperLine("/run/rss-"+mode+".*", 30*time.Second)
		console.Say("BUDGET mode=%s pid=%d reap_ms=%d handler_gone_ms=%d %s", mode, cmd.Process.Pid, reap.Milliseconds(),
			(reap + exit).Milliseconds(), rss)
	}
}

// wrapperLine waits for the measuring wrapper's line, matching glob: the
// wrapper writes it after the handler is gone and its sampler stopped, a
// moment that a loaded host stretches past the handler's exit.
func wrapperLine(glob string, max time.Duration) string {
	for end := time.Now().Add(max); ; time.Sleep(20 * time.Millisecond) {
		m, _ := filepath.Glob(glob)
		if len(m) == 1 {
			b, _ := os.ReadFile(m[0])
			if line := string(b); strings.HasSuffix(line, "\n") || time.Now().After(end) {
				return strings.TrimSpace(line)
			}
		}
		if time.Now().After(end) {
			return ""
		}
	}
}

// kmsgHandlerLines returns the handler's log records so far, and drops
// them: the next call returns only newer ones.
var kmsgSeen = map[string]bool{}

func kmsgHandlerLines() []string {
	return guest.KmsgRecords(func(rec string) bool {
		if kmsgSeen[rec] || strings.HasPrefix(rec, "6,") || strings.HasPrefix(rec, "5,") {
			return false
		}
		kmsgSeen[rec] = true
		return true
	})
}

// --- FUSE ---

// The FUSE kernel protocol (include/uapi/linux/fuse.h), the few messages
// needed to serve one file.
const (
	opLookup     = 1
	opForget     = 2
	opGetattr    = 3
	opOpen       = 14
	opRead       = 15
	opRelease    = 18
	opFlush      = 25
	opInit       = 26
	opBatchForge = 42
	inHeaderLen  = 40
	fileIno      = 2
	fileName     = "code"
	fileSize     = 4096
)

// codeBytes fills a page with an instruction that raises SIGILL.
func codeBytes() []byte {
	var insn []byte
	switch runtime.GOARCH {
	case "amd64":
		insn = []byte{0x0f, 0x0b} // ud2
	case "arm64", "riscv64":
		insn = []byte{0, 0, 0, 0} // udf #0; c.unimp
	case "arm":
		insn = []byte{0xf0, 0x00, 0xf0, 0xe7} // udf #0 (A32)
	}
	b := make([]byte, fileSize)
	for i := 0; i+len(insn) <= len(b); i += len(insn) {
		copy(b[i:], insn)
	}
	return b
}

// attr is struct fuse_attr (88 bytes).
func attr(ino uint64, size uint64, mode uint32) []byte {
	b := make([]byte, 88)
	le := binary.LittleEndian
	le.PutUint64(b[0:], ino)
	le.PutUint64(b[8:], size)
	le.PutUint64(b[16:], (size+511)/512)
	le.PutUint32(b[60:], mode)
	le.PutUint32(b[64:], 1)    // nlink
	le.PutUint32(b[80:], 4096) // blksize
	return b
}

// serveFUSE answers the kernel on fd until it fails.
func serveFUSE(fd int, ready chan<- struct{}) {
	runtime.LockOSThread() // the server keeps its own thread
	le := binary.LittleEndian
	code := codeBytes()
	buf := make([]byte, 1<<20+4096)
	reply := func(unique uint64, errno int32, data []byte) {
		out := make([]byte, 16+len(data))
		le.PutUint32(out[0:], uint32(len(out)))
		le.PutUint32(out[4:], uint32(errno))
		le.PutUint64(out[8:], unique)
		copy(out[16:], data)
		syscall.Write(fd, out)
	}
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR || err == syscall.ENOENT {
			continue
		}
		if err != nil || n < inHeaderLen {
			console.Say("FUSE-SERVER-END %v", err)
			return
		}
		op := le.Uint32(buf[4:])
		unique := le.Uint64(buf[8:])
		node := le.Uint64(buf[16:])
		body := buf[inHeaderLen:n]
		switch op {
		case opInit:
			out := make([]byte, 64)
			le.PutUint32(out[0:], 7)
			le.PutUint32(out[4:], 31)
			le.PutUint32(out[8:], 128<<10)  // max_readahead
			le.PutUint32(out[20:], 128<<10) // max_write
			reply(unique, 0, out)
			close(ready)
		case opLookup:
			name := strings.TrimRight(string(body), "\x00")
			if node != 1 || name != fileName {
				reply(unique, -int32(syscall.ENOENT), nil)
				continue
			}
			out := make([]byte, 40)
			le.PutUint64(out[0:], fileIno)
			le.PutUint64(out[16:], 3600) // entry_valid
			le.PutUint64(out[24:], 3600) // attr_valid
			reply(unique, 0, append(out, attr(fileIno, fileSize, syscall.S_IFREG|0o755)...))
		case opGetattr:
			out := make([]byte, 16)
			le.PutUint64(out[0:], 3600)
			if node == 1 {
				reply(unique, 0, append(out, attr(1, 0, syscall.S_IFDIR|0o755)...))
			} else {
				reply(unique, 0, append(out, attr(fileIno, fileSize, syscall.S_IFREG|0o755)...))
			}
		case opOpen:
			reply(unique, 0, make([]byte, 16))
		case opRead:
			off, size := le.Uint64(body[8:]), le.Uint32(body[16:])
			if off >= uint64(len(code)) {
				reply(unique, 0, nil)
				continue
			}
			end := off + uint64(size)
			if end > uint64(len(code)) {
				end = uint64(len(code))
			}
			reply(unique, 0, code[off:end])
		case opRelease, opFlush:
			reply(unique, 0, nil)
		case opForget, opBatchForge:
			// no reply
		default:
			reply(unique, -int32(syscall.ENOSYS), nil)
		}
	}
}

// fuseCrash mounts a FUSE filesystem served by this process, hands the
// device descriptor to a holder that never answers (so after the crash the
// mount neither answers nor fails), maps the file PROT_EXEC and jumps into
// it: SIGILL with the PC in the mapping, the server thread frozen.
func fuseCrash(mnt string) {
	console.Say("FUSE-START %s", mnt)
	runtime.GOMAXPROCS(4) // the server's thread and this one, even on one CPU
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		console.Fail("/dev/fuse: %v", err)
	}
	os.MkdirAll(mnt, 0o755)
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := syscall.Mount("hardenlab", mnt, "fuse", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		console.Fail("mount fuse: %v", err)
	}
	// The device answers reads only once mounted (EPERM before); the
	// kernel sends INIT without waiting for it.
	ready := make(chan struct{})
	go serveFUSE(fd, ready)
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		console.Fail("no FUSE INIT in 20 s")
	}
	console.Say("FUSE-MOUNTED %s", mnt)
	holder := exec.Command("/bin/hardenlab", "hold")
	holder.ExtraFiles = []*os.File{os.NewFile(uintptr(fd), "/dev/fuse")}
	if err := holder.Start(); err != nil {
		console.Fail("holder: %v", err)
	}
	os.WriteFile("/run/fuse-holder.pid", []byte(strconv.Itoa(holder.Process.Pid)), 0o644)
	f, err := os.Open(filepath.Join(mnt, fileName))
	if err != nil {
		console.Fail("open: %v", err)
	}
	// Fill the page cache through a read(2) first: a page fault that
	// waits on the server holds this thread's P, and with one CPU the
	// server's goroutine would never get one back after its read(2).
	page := make([]byte, fileSize)
	if n, err := f.ReadAt(page, 0); n != fileSize {
		console.Fail("read: %d bytes, %v", n, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, fileSize, syscall.PROT_READ|syscall.PROT_EXEC, syscall.MAP_PRIVATE)
	if err != nil {
		console.Fail("mmap: %v", err)
	}
	f.Close()
	if mem[0] == 0 && runtime.GOARCH == "amd64" {
		console.Fail("the page read back wrong")
	}
	console.Say("FUSE-MAPPED pid=%d at=%#x", os.Getpid(), uintptr(unsafe.Pointer(&mem[0])))
	runtime.LockOSThread()
	// SIGILL to the default action: the kernel dumps with the PC at the
	// instruction (Go's handler would re-raise it from the runtime).
	var act [4]uint64
	if _, _, e := syscall.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(syscall.SIGILL), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); e != 0 {
		console.Fail("rt_sigaction: %v", e)
	}
	// A func value is a pointer to a word holding the code address.
	entry := uintptr(unsafe.Pointer(&mem[64]))
	p := &entry
	jump := *(*func())(unsafe.Pointer(&p))
	jump()
	console.Fail("still running after jumping into the mapping")
}

// fuseRuns crashes fusecrash once per mode.
func fuseRuns(modes []string) {
	for i, mode := range modes {
		setPattern(pattern(mode))
		mnt := "/mnt/fuse-" + mode
		cmd := exec.Command("/bin/hardenlab", "fusecrash", mnt)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		start := time.Now()
		if err := cmd.Start(); err != nil {
			console.Fail("fusecrash: %v", err)
		}
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		var reaped time.Duration = -1
		select {
		case <-waited:
			reaped = time.Since(start)
		case <-time.After(30 * time.Second):
		}
		gotReport := waitReport(i+1, 30*time.Second)
		gone, dstate, ok := waitHandlers(60 * time.Second)
		hs := handlers()
		for _, l := range kmsgHandlerLines() {
			console.Say("LOG %s", l)
		}
		console.Say("FUSE mode=%s pid=%d reaped=%v reap_ms=%d report=%v handler_gone=%v handler_gone_ms=%d dstate=%v left=%v state=%v",
			mode, cmd.Process.Pid, reaped >= 0, reaped.Milliseconds(), gotReport, ok, (reaped + gone).Milliseconds(), dstate, len(hs), cmd.ProcessState)
		// End the mount: the holder's descriptor is the last one, so
		// killing it aborts the connection and fails whatever still waits.
		if b, err := os.ReadFile("/run/fuse-holder.pid"); err == nil {
			if hp, err := strconv.Atoi(string(b)); err == nil {
				syscall.Kill(hp, syscall.SIGKILL)
				var ws syscall.WaitStatus
				syscall.Wait4(hp, &ws, 0, nil)
			}
			os.Remove("/run/fuse-holder.pid")
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
		if reaped < 0 {
			console.Fail("mode %s: the crashed process was not reaped in 90 s", mode)
		}
	}
}

// --- containers ---

// copyTree copies a directory of regular files, directories and symlinks.
func copyTree(from, to string) error {
	return filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		switch {
		case fi.IsDir():
			return os.MkdirAll(dst, fi.Mode().Perm())
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, dst)
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, fi.Mode().Perm())
		}
	})
}

// watch sets inotify watches for opens and reads of paths outside the
// container (and of the decoys inside it the planted links point to).
func watch(paths []string) (int, map[int]string) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		console.Fail("inotify: %v", err)
	}
	wds := map[int]string{}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN|unix.IN_ACCESS)
		if err != nil {
			console.Fail("inotify %s: %v", p, err)
		}
		wds[wd] = p
	}
	return fd, wds
}

// events drains the inotify descriptor.
func events(fd int, wds map[int]string) []string {
	var out []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			return out
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			what := "access"
			if ev.Mask&unix.IN_OPEN != 0 {
				what = "open"
			}
			out = append(out, wds[int(ev.Wd)]+":"+what)
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// nsTIDs maps each thread's global tid to its tid in the process's own
// pid namespace (the last NSpid field).
func nsTIDs(pid int) map[int]int {
	out := map[int]int{}
	ds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, d := range ds {
		g, _ := strconv.Atoi(d.Name())
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, d.Name()))
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				f := strings.Fields(v)
				out[g], _ = strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return out
}

// containerRuns crashes /app/ct in a fresh container root per mode.
func containerRuns(modes []string) {
	for i, mode := range modes {
		setPattern(pattern(mode))
		root := "/run/ct-" + mode
		if err := copyTree("/ctsrc", root); err != nil {
			console.Fail("copy: %v", err)
		}
		// What a handler that followed the planted links would open:
		// outside the root (the guest's own files), and the decoy inside.
		fd, wds := watch([]string{"/etc/hl-secret", "/lib/libc.so.6", root + "/etc/hl-secret"})
		cmd := exec.Command("/app/ct")
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
		cmd.Dir = "/"
		cmd.Env = []string{}
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stdout
		if err := cmd.Start(); err != nil {
			console.Fail("container: %v", err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		gpid := cmd.Process.Pid
		tids := nsTIDs(gpid)
		var tm []string
		for g, n := range tids {
			tm = append(tm, fmt.Sprintf("%d:%d", g, n))
		}
		mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", gpid))
		pidns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", gpid))
		// The process's files are mapped: plant links where they were, an
		// absolute one and a climbing one, both at a decoy (and, were
		// they resolved in the handler's root, at the guest's secret).
		for _, pl := range []struct{ path, target string }{
			{"/ctlib/libc.so.6", "/etc/hl-secret"},
			{"/app/ct", "../../../../../../etc/hl-secret"},
		} {
			os.Remove(root + pl.path)
			if err := os.Symlink(pl.target, root+pl.path); err != nil {
				console.Fail("plant: %v", err)
			}
		}
		events(fd, wds) // the copy and the process's start are not the handler's
		console.Say("CT-READY mode=%s pid=%d said=%q tids=%s mntns=%s pidns=%s", mode, gpid, strings.TrimSpace(line), strings.Join(tm, ","), mnt, pidns)
		in.Write([]byte{'x'}) // the worker thread crashes now
		waited := make(chan struct{})
		go func() { cmd.Wait(); console.Say("CT-EXIT %v", cmd.ProcessState); close(waited) }()
		reaped := true
		select {
		case <-waited:
		case <-time.After(90 * time.Second):
			reaped = false
		}
		got := waitReport(i+1, 60*time.Second)
		_, _, gone := waitHandlers(60 * time.Second)
		evs := events(fd, wds)
		unix.Close(fd)
		for _, l := range kmsgHandlerLines() {
			console.Say("LOG %s", l)
		}
		console.Say("CT mode=%s pid=%d reaped=%v report=%v handler_gone=%v outside_access=%q", mode, gpid, reaped, got, gone, strings.Join(evs, " "))
		if !reaped || !got {
			console.Fail("mode %s: reaped %v report %v", mode, reaped, got)
		}
	}
}
