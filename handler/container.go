package handler

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/report"
)

// container reads which container the crashed process ran in, while the
// kernel holds it: nil when it shares the handler's pid and mount
// namespaces (or /proc/<pid> cannot be trusted). The coredump socket
// server and the pipe see the same: /proc is the host's.
func (c *crash) container() *report.Container {
	if c.proc.pid <= 0 || !c.procOK() || (!namespaceDiffers(c.proc.pid, "pid") && !namespaceDiffers(c.proc.pid, "mnt")) {
		return nil
	}
	ct := &report.Container{PidNS: nsInode(c.proc.pid, "pid"), MntNS: nsInode(c.proc.pid, "mnt")}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.proc.pid)); err == nil {
		ct.Cgroup = cgroupPath(string(b))
	}
	if !c.procOK() {
		return nil // read from whoever has the pid now
	}
	return ct
}

// cgroupPath is the cgroup v2 path in /proc/<pid>/cgroup ("0::/path"),
// else the first hierarchy's (v1).
func cgroupPath(text string) string {
	first := ""
	for _, l := range strings.Split(text, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if first == "" {
			first = parts[2]
		}
	}
	return first
}

// nsInode is the inode number of process pid's namespace of the kind, from
// its /proc/<pid>/ns link ("pid:[4026531836]"); 0 when unknown.
func nsInode(pid int, kind string) uint64 {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		return 0
	}
	_, v, _ := strings.Cut(l, "[")
	n, _ := strconv.ParseUint(strings.TrimSuffix(v, "]"), 10, 64)
	return n
}
