package unwind

import (
	"errors"

	"github.com/unwound-dev/unwound/handler/module"
	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// A strategy recovers the caller of one frame. Strategies are tried in the
// order the architecture lists them (arch.Arch.Strategies); the first that
// succeeds gives the frame its method and its trust.
//
// step returns errSkip when the strategy does not apply (nothing to say),
// a *stepError when the walk must end here (the tables say this is the
// outermost frame, the memory is gone), and any other error to say why it
// failed: those go into the thread's stop_detail if every strategy fails.
type strategy interface {
	name() string
	trust() Trust
	step(u *unwinder, f *frame) (state, error)
}

// frame is what the strategies know of the frame being unwound.
type frame struct {
	cur   state
	first bool           // the innermost frame, from the thread's registers
	mi    int            // module index, -1 outside every module
	m     *module.Module // nil outside every module
	// outermost: the PC is in _start, whose EHABI entry says it has no
	// caller. Heuristics do not look past it.
	outermost bool
	// cantUnwind: an EHABI entry in a module built with tables says the
	// function has no caller; only a scan confirmed by the prologue may
	// look past it.
	cantUnwind bool
}

var errSkip = errors.New("does not apply")

// strategies implements each arch.Strategy; every strategy lives in its
// own file (strategy_*.go) with the code only it uses.
var strategies = map[arch.Strategy]strategy{
	arch.Signal:   signalStrategy{},
	arch.CFI:      cfiStrategy{},
	arch.EHABI:    ehabiStrategy{},
	arch.Prologue: prologueStrategy{},
	arch.LR:       lrStrategy{},
	arch.PLT:      pltStrategy{},
	arch.FP:       fpStrategy{},
	arch.Scan:     scanStrategy{},
}

// An architecture that lists a strategy nobody implements is a build
// mistake: refuse to start rather than skip it at run time.
func init() {
	for _, a := range arch.All {
		for _, n := range a.Strategies {
			if s, ok := strategies[n]; !ok || s.name() != string(n) {
				panic("unwind: " + a.Name + " lists strategy " + string(n) + ", which is not implemented")
			}
		}
	}
}

// strategiesFor returns an architecture's strategies, in order.
func strategiesFor(a *arch.Arch, noScan bool) []strategy {
	var out []strategy
	for _, n := range a.Strategies {
		if !(noScan && n == arch.Scan) {
			out = append(out, strategies[n])
		}
	}
	return out
}
