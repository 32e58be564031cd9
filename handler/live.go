package handler

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/handler/module"
)

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
