package symbolize

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/unwound-dev/unwound/report"
)

// WriteText prints a symbolized report in the style of gdb's bt, one
// block per thread, the crashed thread first:
//
//	#0  0x00005555555551f7 in nw3 at crash.c:26 [context]
//	#1  0x0000555555555218 in inl at crash.c:30 (inlined)
//	    0x0000555555555218 in nw2 at crash.c:35 [cfi]
//	#2  0x00007ffff7df024a in __libc_start_call_main+0x7a from /lib/libc.so.6 [cfi]
//	#3  0x00007ffff7df0305 in ?? (no debug info for /lib/libc.so.6 build-id ab12…) [cfi]
func WriteText(w io.Writer, res *Result) error {
	var b strings.Builder
	r := res.Report
	b.WriteString(r.Summary())
	for _, m := range res.Modules {
		switch {
		case m.Status != "":
			fmt.Fprintf(&b, "  warning: %s\n", m.Status)
		case len(m.Mismatches) > 0 && m.DebugFile == "":
			fmt.Fprintf(&b, "  warning: %s: no debug info (symbols from %s); refused: %s\n", m.Path, m.Symbols, strings.Join(m.Mismatches, "; "))
		}
		for _, n := range m.Notes {
			fmt.Fprintf(&b, "  note: %s: %s\n", m.Path, n)
		}
	}
	width := 16
	if r.Arch == "arm" {
		width = 8
	}
	order := make([]int, 0, len(res.Threads))
	for i, t := range res.Threads {
		if t.Crashed {
			order = append(order, i)
		}
	}
	for i, t := range res.Threads {
		if !t.Crashed {
			order = append(order, i)
		}
	}
	for _, ti := range order {
		t := res.Threads[ti]
		mark := ""
		if t.Crashed {
			mark = " (crashed)"
		}
		name := ""
		if t.Name != "" {
			name = fmt.Sprintf(" %q", t.Name)
		}
		fmt.Fprintf(&b, "\nThread %d%s%s:\n", t.TID, name, mark)
		for i, f := range t.Frames {
			if t.Elided > 0 && i == t.ElidedAt {
				fmt.Fprintf(&b, "    ... %d frames elided ...\n", t.Elided)
			}
			num := fmt.Sprintf("#%-2d", i)
			pc := fmt.Sprintf("0x%0*x", width, uint64(f.PC))
			if len(f.Locations) == 0 {
				why := f.Error
				if why == "" {
					why = "no symbol"
				}
				fmt.Fprintf(&b, "%s %s in ?? (%s) [%s]\n", num, pc, why, how(f.Method, f.Trust))
				continue
			}
			for j, l := range f.Locations {
				if j > 0 {
					num = strings.Repeat(" ", len(num))
				}
				fn := l.Function
				if fn == "" {
					fn = "??"
				}
				var where string
				switch {
				case l.File != "":
					where = fmt.Sprintf(" at %s:%d", path.Base(l.File), l.Line)
				case l.Offset != nil:
					fn += fmt.Sprintf("+%#x", uint64(*l.Offset))
				}
				if l.File == "" && f.Module >= 0 && f.Module < len(r.Modules) {
					where += " from " + r.Modules[f.Module].Path
				}
				tail := fmt.Sprintf(" [%s]", how(f.Method, f.Trust))
				if l.Inlined {
					tail = " (inlined)"
				}
				fmt.Fprintf(&b, "%s %s in %s%s%s\n", num, pc, fn, where, tail)
			}
		}
		fmt.Fprintf(&b, "    (stop: %s", t.StopReason)
		if t.StopDetail != "" {
			fmt.Fprintf(&b, ": %s", t.StopDetail)
		}
		b.WriteString(")\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// how is a frame's method, with its trust when the report says it.
func how(method, trust string) string {
	if trust == "" {
		return method
	}
	return method + ", " + trust
}

// Plain is r as a Result with no symbols looked up, so that WriteText
// prints an unsymbolized report (`unwound decode`) the way it prints a
// symbolized one: each frame says, in place of why it has no symbols,
// the module and file address it is at.
func Plain(r *report.Report) *Result {
	res := &Result{Report: r}
	for _, m := range r.Modules {
		res.Modules = append(res.Modules, Module{Module: m})
	}
	for _, t := range r.Threads {
		th := Thread{Thread: t, Frames: make([]Frame, 0, len(t.Frames))}
		for _, f := range t.Frames {
			where := "not in a module"
			if f.Module >= 0 && f.Module < len(r.Modules) {
				m := r.Modules[f.Module]
				where = fmt.Sprintf("%s+%#x", m.Path, m.FileAddr(f.PC))
			}
			th.Frames = append(th.Frames, Frame{Frame: f, Error: where})
		}
		res.Threads = append(res.Threads, th)
	}
	return res
}
