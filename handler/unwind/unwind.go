// Package unwind walks a thread's stack, frame by frame, trying the
// strategies its architecture lists, in order (signal frame, DWARF CFI,
// ARM EHABI, prologue analysis, link register, frame pointer, validated
// stack scan). Each frame records the strategy that recovered it and how
// far it can be trusted, so a reader can judge the trace. The loop is
// architecture-free: per-architecture facts come from package arch.
package unwind

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/regs"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// Methods recorded per frame.
const (
	MethodContext  = "context" // frame 0, from the thread's registers
	MethodCFI      = string(arch.CFI)
	MethodEHABI    = string(arch.EHABI)
	MethodFP       = string(arch.FP)
	MethodLR       = string(arch.LR) // link register, or the return address at SP
	MethodSignal   = string(arch.Signal)
	MethodPLT      = string(arch.PLT)      // a linker's stub, stopped in: the caller is the link register
	MethodPrologue = string(arch.Prologue) // decoded from the function's prologue
	MethodScan     = string(arch.Scan)     // a validated return address found on the stack
)

// Stop reasons.
const (
	StopEndOfStack    = "end_of_stack"
	StopUndefinedRA   = "undefined_ra"
	StopNoUnwindInfo  = "no_unwind_info"
	StopOutside       = "pc_outside_modules"
	StopSPNotIncrease = "sp_not_increasing"
	StopRepeated      = "repeated_frame" // a strategy gave a frame already walked
	StopMaxFrames     = "max_frames"
	StopDeadline      = "deadline"
	StopMemory        = "memory_unreadable"
	StopLoop          = "loop" // a strategy gave the same PC again, its return address not from the stack
)

// maxBackward bounds the signal frames whose caller's SP is below theirs.
const maxBackward = 16

// Process is what the unwinder knows of the crashed process.
type Process struct {
	Arch    *arch.Arch
	Modules []*module.Module // sorted by Start
	// Mem reads the process's memory by virtual address: stacks, and
	// whatever else the memory source holds.
	Mem     io.ReaderAt
	PACMask uint64 // NT_ARM_PAC_MASK insn mask, 0 when unknown
	// Load, when set, is called once for a module the walk reaches whose
	// File is nil and Err unset: files are opened only for modules a PC
	// falls in.
	Load func(m *module.Module)

	// targets caches each file's direct-call targets (callTargets).
	targets map[*module.File]callStarts
	// taken caches each file's address-taken function starts (takenStarts).
	taken map[*module.File][]uint64
}

// Options bound one thread's walk.
type Options struct {
	MaxFrames int       // frames kept in the result: the first and last halves
	MaxWalk   int       // frames walked at most (deep recursion), ≥ MaxFrames
	Deadline  time.Time // zero: none
	Thumb     bool      // ARM32: frame 0 is in Thumb state (CPSR bit 5)
	NoScan    bool      // no stack-scan fallback ([handler] stack_scan = false)
}

// Frame is one recovered frame.
type Frame struct {
	PC     uint64
	SP     uint64
	Method string
	Trust  Trust
	Module int  // index into Process.Modules, -1 when in none
	Exact  bool // PC is the interrupted instruction, not a return address
	Thumb  bool // ARM32 Thumb state; PC has bit 0 cleared
	Note   string
}

// Result is one thread's trace.
type Result struct {
	Frames []Frame
	Elided int    // frames walked but dropped from the middle
	Walked int    // frames walked in all
	Stop   string // why the walk ended
	Detail string // what the last strategy said
}

type state struct {
	pc    uint64
	rs    regs.Set
	exact bool
	thumb bool
	// raMem: the return address that led here was read from the stack
	// (not kept in a register), for loop detection.
	raMem bool
	// spApprox: SP is a lower bound only (an AArch64 frame-pointer step).
	spApprox bool
	// weak: a heuristic step whose call site could not be checked against
	// the callee; the frame is low trust.
	weak bool
	// via names the method when a strategy recovered the frame by another
	// one's means (a scan confirmed by the callee's prologue).
	via string
	// selfCall: the scan took a recursion's return address, its call to
	// the function the PC is in (selfCall in callsite.go).
	selfCall bool
}

// Unwind walks one thread from its registers.
func Unwind(p *Process, pc uint64, rs regs.Set, o Options) Result {
	if o.MaxFrames <= 0 {
		o.MaxFrames = 256
	}
	if o.MaxWalk < o.MaxFrames {
		o.MaxWalk = o.MaxFrames
	}
	u := unwinder{p: p, list: strategiesFor(p.Arch, o.NoScan), tried: map[*module.Module]bool{}, rows: map[rowKey]rowVal{}, notTramp: map[uint64]bool{}}
	u.fp0, _ = rs.Get(p.Arch.FP)
	var res Result
	head := (o.MaxFrames + 1) / 2
	tail := newRing(o.MaxFrames - head)
	// Repeats are looked for among frames at the same SP only: SP never
	// decreases outside signal frames, so a loop must revisit an SP. This
	// keeps the set tiny on a 100,000-frame recursion.
	seen := map[uint64]bool{}
	var seenSP uint64
	cur := state{pc: pc, rs: rs, exact: true, thumb: o.Thumb}
	if p.Arch.ThumbBit {
		cur.thumb = cur.thumb || pc&1 != 0
		cur.pc &^= 1
	}
	method, trust := MethodContext, TrustHigh
	walked, backward := 0, 0
	for {
		sp, _ := cur.rs.Get(p.Arch.SP)
		f := Frame{PC: cur.pc, SP: sp, Method: method, Trust: trust, Module: module.Find(p.Modules, cur.pc), Exact: cur.exact, Thumb: cur.thumb}
		if len(res.Frames) < head {
			res.Frames = append(res.Frames, f)
		} else if tail.push(f) {
			res.Elided++
		}
		walked++
		if walked >= o.MaxWalk {
			res.Stop = StopMaxFrames
			break
		}
		if !o.Deadline.IsZero() && walked%16 == 0 && time.Now().After(o.Deadline) {
			res.Stop = StopDeadline
			break
		}
		if sp != seenSP || len(seen) > 64 {
			clear(seen)
			seenSP = sp
		}
		seen[cur.pc] = true
		u.seen, u.seenSP = seen, seenSP

		next, s, err := u.step(cur, walked == 1)
		if err != nil {
			res.Stop, res.Detail = stopReason(err)
			break
		}
		m, t := s.name(), s.trust()
		if next.via != "" {
			m, t = next.via, strategies[arch.Strategy(next.via)].trust()
		}
		nsp, _ := next.rs.Get(p.Arch.SP)
		if next.pc == 0 && !next.exact {
			// A return address of 0 ends the stack; an interrupted PC of 0
			// (a signal during a call through NULL) is a frame of its own.
			res.Stop = StopEndOfStack
			break
		}
		// Stacks grow down: a caller's SP is never below its callee's, except
		// across a signal frame, where a handler on a sigaltstack returns to
		// a stack anywhere.
		if nsp < sp && m != MethodSignal {
			res.Stop = StopSPNotIncrease
			break
		}
		// Signal frames may go back (nested handlers on alternate stacks),
		// but only a few times: saved contexts pointing at each other
		// would otherwise loop, out of sight of the repeat check.
		if nsp < sp {
			if backward++; backward > maxBackward {
				res.Stop, res.Detail = StopSPNotIncrease, fmt.Sprintf("SP went back across more than %d signal frames", maxBackward)
				break
			}
		}
		if cur.spApprox && m != MethodFP {
			// The step read the frame from an SP that is only a lower
			// bound (a frame-record, scan or unproven link-register
			// step): whatever it found rests on a guess. A frame-record
			// step follows the frame pointer, not SP.
			t = TrustLow
		}
		if next.weak {
			t = TrustLow
		}
		cur, method, trust = next, m, min(t, trust)
	}
	res.Frames = append(res.Frames, tail.items()...)
	res.Walked = walked
	return res
}

// stepError carries a stop reason out of a strategy.
type stepError struct {
	reason, detail string
}

func (e *stepError) Error() string { return e.reason + ": " + e.detail }

func stopReason(err error) (string, string) {
	var se *stepError
	if errors.As(err, &se) {
		return se.reason, se.detail
	}
	return StopNoUnwindInfo, err.Error()
}

// ring keeps the last n frames of a long walk.
type ring struct {
	buf  []Frame
	next int
}

func newRing(n int) *ring { return &ring{buf: make([]Frame, 0, n)} }

// push adds f and reports whether an older frame was dropped.
func (r *ring) push(f Frame) bool {
	if cap(r.buf) == 0 {
		return true
	}
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, f)
		return false
	}
	r.buf[r.next] = f
	r.next = (r.next + 1) % len(r.buf)
	return true
}

func (r *ring) items() []Frame {
	return append(append([]Frame(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}
