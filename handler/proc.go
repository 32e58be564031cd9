package handler

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
)

// processPaths renames the mappings of /proc/<pid>/maps to the paths the
// process itself sees, from NT_FILE (the kernel writes those relative to
// the crashed process's root; maps shows them relative to the reader's):
// a container's /usr/lib/libc.so.6, not /var/lib/containers/…/usr/lib/….
// It returns the renames, by the handler's path.
func (c *crash) processPaths(maps []module.Mapping) map[string]string {
	type span struct{ start, end uint64 }
	own := map[span]string{}
	for _, f := range c.img.core.Files {
		own[span{f.Start, f.End}] = f.Path
	}
	renamed := map[string]string{}
	for i, m := range maps {
		if p, ok := own[span{m.Start, m.End}]; ok && m.Path != "" && !strings.HasPrefix(m.Path, "[") && p != m.Path {
			renamed[m.Path] = p
			maps[i].Path = p
		}
	}
	return renamed
}

// preopen opens every module's file now, while /proc/<pid>/map_files
// resolves, and returns a source of those files; they are read only when a
// PC falls in them. A file that could not be opened keeps its reason (a
// FUSE mount that never answers: the timeout) for the report.
func (c *crash) preopen(mods []*module.Module) module.Source {
	type opened struct {
		r   io.ReaderAt
		err error
	}
	pre := map[*module.Module]opened{}
	for _, m := range mods {
		var errs []string
		for _, src := range c.procSources() {
			r, cl, err := src(m)
			if err == nil {
				pre[m] = opened{r: r}
				c.img.closers = append(c.img.closers, cl)
				break
			}
			errs = append(errs, err.Error())
		}
		if _, ok := pre[m]; !ok {
			pre[m] = opened{err: fmt.Errorf("not openable through /proc/%d: %s", c.proc.pid, strings.Join(errs, "; "))}
		}
	}
	return func(m *module.Module) (io.ReaderAt, io.Closer, error) {
		o, ok := pre[m]
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("%s: not openable through /proc/%d", m.Path, c.proc.pid)
		case o.err != nil:
			return nil, nil, o.err
		}
		return o.r, io.NopCloser(nil), nil
	}
}

// procOK says whether /proc/<pid> may be read, and whether what was read
// there since the last call came from the crashed process. Without a
// pidfd that is taken on trust, as before %F; with one, a process that is
// gone (its pid free for reuse) ends all reading of /proc/<pid>, and the
// report says why.
func (c *crash) procOK() bool {
	if c.proc.noProc || c.proc.pid <= 0 {
		return false
	}
	if c.proc.pidfd == nil {
		return true
	}
	if err := c.proc.pidfd.same(); err != nil {
		c.proc.noProc = true
		c.errorf("/proc/%d is no longer the crashed process (%v): nothing read there is used, only the core", c.proc.pid, err)
		return false
	}
	return true
}

// procSources are module.ProcSources for the crashed process; with a
// pidfd, each file opened is checked to be the crashed process's.
func (c *crash) procSources() []module.Source {
	if c.proc.noProc {
		return nil
	}
	srcs := module.ProcSources(c.proc.pid)
	if c.proc.pidfd == nil {
		return srcs
	}
	for i, src := range srcs {
		src := src
		srcs[i] = func(m *module.Module) (io.ReaderAt, io.Closer, error) {
			r, cl, err := src(m)
			if err == nil && c.proc.pidfd.same() != nil {
				cl.Close()
				return nil, nil, fmt.Errorf("/proc/%d is no longer the crashed process", c.proc.pid)
			}
			return r, cl, err
		}
	}
	return srcs
}

// globalTIDs rewrites the core's thread ids into the handler's pid
// namespace. The kernel writes each thread's id in the crashed process's
// own namespace (a container's 1, 2, …) while %P and %I are global: the
// report's ids must all be one kind, and /proc/<pid>/task/<tid> takes the
// global ones. /proc/<pid>/task/*/status has both (NSpid: global … own).
func (c *crash) globalTIDs() {
	if c.img.core == nil || c.proc.pid <= 0 || !c.procOK() || !namespaceDiffers(c.proc.pid, "pid") {
		return
	}
	dir := fmt.Sprintf("/proc/%d/task", c.proc.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		c.errorf("thread ids stay the container's: %v", err)
		return
	}
	toGlobal := map[int]int{}
	for _, e := range ents {
		f := strings.Fields(procStatus(dir + "/" + e.Name() + "/status")["NSpid"])
		if len(f) >= 2 {
			g, err1 := strconv.Atoi(f[0])
			own, err2 := strconv.Atoi(f[len(f)-1])
			if err1 == nil && err2 == nil {
				toGlobal[own] = g
			}
		}
	}
	if !c.procOK() {
		return
	}
	for i, t := range c.img.core.Threads {
		if g, ok := toGlobal[t.TID]; ok {
			c.img.core.Threads[i].TID = g
		}
	}
}

// namespaceDiffers reports whether process pid is known to be in another
// namespace of the kind (mnt, pid) than the handler: false when it cannot
// tell.
func namespaceDiffers(pid int, kind string) bool {
	theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	ours, err2 := os.Readlink("/proc/self/ns/" + kind)
	return err1 == nil && err2 == nil && theirs != ours
}

// procStatus reads a status file of /proc (proc(5): "Name:\tvalue"
// lines), the fields by name. It is empty when the file cannot be read.
func procStatus(path string) map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// statusKiB is a status field given in kB ("1234 kB"), 0 when absent.
func statusKiB(st map[string]string, field string) int64 {
	v, ok := strings.CutSuffix(st[field], " kB")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// procMaps reads /proc/<pid>/maps: file-backed mappings with permissions.
func procMaps(pid int) ([]module.Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var maps []module.Mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		if m, ok := parseMapsLine(sc.Text()); ok {
			maps = append(maps, m)
		}
		if len(maps) > 1<<16 {
			break
		}
	}
	return maps, sc.Err()
}

// parseMapsLine parses "start-end perms offset dev inode [path]";
// anonymous mappings (thread stacks) have no path.
func parseMapsLine(line string) (module.Mapping, bool) {
	fields := strings.Fields(line)
	if len(fields) < 5 {
		return module.Mapping{}, false
	}
	se := strings.SplitN(fields[0], "-", 2)
	if len(se) != 2 {
		return module.Mapping{}, false
	}
	start, err1 := strconv.ParseUint(se[0], 16, 64)
	end, err2 := strconv.ParseUint(se[1], 16, 64)
	off, err3 := strconv.ParseUint(fields[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return module.Mapping{}, false
	}
	path := ""
	if len(fields) > 5 {
		// The path is everything after the inode, spaces included.
		path = line[strings.Index(line, fields[5]):]
	}
	return module.Mapping{Start: start, End: end, Offset: off, Perms: fields[1], Path: path}, true
}

// threadName reads a thread's comm while the process is frozen.
func threadName(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// procCmdline reads argv, NUL-separated.
func procCmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// vmData is the process's VmData in bytes, 0 when unknown.
func vmData() int64 {
	return statusKiB(procStatus("/proc/self/status"), "VmData") << 10
}
