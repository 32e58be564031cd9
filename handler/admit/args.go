package admit

import (
	"fmt"
	"strconv"
	"strings"
)

// KernelArgs are the expanded specifiers of sysctl.PatternSpecifiers.
type KernelArgs struct {
	PID, TID   int
	Signal     int
	Time       int64
	Dumpable   int
	RlimitCore uint64 // ^0 for unlimited
	Exe        string // %E with '!' turned back into '/'
	Comm       string
}

// ParseKernelArgs reads the positional arguments the kernel passes. It is
// lenient: a crash must not be lost over an odd argument, so fields it
// cannot parse stay zero and the error says which.
func ParseKernelArgs(args []string) (KernelArgs, error) {
	var k KernelArgs
	var bad []string
	num := func(i int, name string) int64 {
		if i >= len(args) {
			bad = append(bad, name+" missing")
			return 0
		}
		v, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s=%q", name, args[i]))
		}
		return v
	}
	k.PID = int(num(0, "pid"))
	k.TID = int(num(1, "tid"))
	k.Signal = int(num(2, "signal"))
	k.Time = num(3, "time")
	k.Dumpable = int(num(4, "dumpable"))
	if len(args) > 5 {
		if v, err := strconv.ParseUint(args[5], 10, 64); err == nil {
			k.RlimitCore = v
		} else if args[5] == "18446744073709551615" || args[5] == "-1" {
			k.RlimitCore = ^uint64(0)
		} else {
			bad = append(bad, fmt.Sprintf("rlimit=%q", args[5]))
		}
	}
	if len(args) > 6 {
		k.Exe = strings.ReplaceAll(args[6], "!", "/")
	}
	if len(args) > 7 {
		k.Comm = strings.Join(args[7:], " ")
	}
	if len(bad) > 0 {
		return k, fmt.Errorf("kernel arguments: %s", strings.Join(bad, ", "))
	}
	return k, nil
}
