//go:build unwoundfault

package handler

import (
	"os"
	"syscall"
	"time"
)

// inject makes a supervised child die the ways Go cannot recover from, to
// test that the supervising parent still reports the crash. Only binaries
// built with -tags unwoundfault read UNWOUND_FAULT: panic, oom, stack,
// maps (concurrent map writes), hang; storehang, which makes storing the
// report hang, in the parent too, for the hard deadline; landeddie, which
// kills the child right after its report's rename; and landedhang, which
// hangs there (the fsyncs of a stalling flash), in the parent too.
type inject struct{ mode string }

// injectFromEnv reads UNWOUND_FAULT; outside a supervised child only
// storehang applies (a handler that unwinds in process dies of the rest
// as any process would, with nobody to report it).
func injectFromEnv(child bool) inject {
	mode := os.Getenv("UNWOUND_FAULT")
	if !child && mode != "storehang" && mode != "landedhang" {
		mode = ""
	}
	return inject{mode: mode}
}

var sink [][]byte

func (f inject) at(where string) {
	if where == "store" && f.mode == "storehang" || where == "landed" && f.mode == "landedhang" {
		time.Sleep(time.Hour)
	}
	if where == "landed" && f.mode == "landeddie" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL) // right after the rename
	}
	if where != "unwind" {
		return
	}
	switch f.mode {
	case "panic":
		go func() { panic("unwoundfault: panic in a goroutine") }()
		time.Sleep(time.Minute)
	case "oom":
		for {
			sink = append(sink, make([]byte, 16<<20))
		}
	case "stack":
		recurse(0)
	case "maps":
		m := map[int]int{}
		for i := 0; i < 4; i++ {
			go func() {
				for j := 0; ; j++ {
					m[j%1000] = j
				}
			}()
		}
		time.Sleep(time.Minute)
	case "hang":
		time.Sleep(time.Hour)
	}
}

func recurse(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	return recurse(n+1) + int(pad[(n+1)%256])
}
