package unwind

import (
	"errors"
	"fmt"
	"strings"

	"github.com/unwound-dev/unwound/handler/unwind/arch"
)

// framePointer follows the frame record at FP, trying each of the
// architecture's record layouts. A record is taken only when its return
// address passes call-site validation; one whose call is indirect (its
// target unknown) gives a low-trust frame, since a frame pointer left
// pointing at an outer record (AArch64 -fomit-frame-pointer code keeps
// x29 untouched) looks the same.
func (strat fpStrategy) framePointer(u *unwinder, f *frame) (state, error) {
	a := u.p.Arch
	cur := f.cur
	fp, ok1 := cur.rs.Get(a.FP)
	sp, ok2 := cur.rs.Get(a.SP)
	if !ok1 || !ok2 || fp == 0 || fp < sp || fp-sp > 64<<20 || fp%uint64(a.PtrSize) != 0 {
		return state{}, errors.New("no plausible frame pointer")
	}
	var why []string
	for _, rec := range a.FrameRecords {
		next, err := strat.frameRecord(u, f, rec, fp, sp)
		if err == nil {
			return next, nil
		}
		why = append(why, rec.Name+": "+err.Error())
	}
	return state{}, errors.New(strings.Join(why, ", "))
}

func (fpStrategy) frameRecord(u *unwinder, f *frame, rec arch.FrameRecord, fp, sp uint64) (state, error) {
	a := u.p.Arch
	cur := f.cur
	if rec.Leaf && !f.first {
		return state{}, errors.New("leaf record on an outer frame")
	}
	if int64(fp)+rec.PrevFP < int64(sp) || int64(fp)+rec.RA < int64(sp) || int64(fp)+rec.CallerSP <= int64(sp) {
		return state{}, errors.New("record below SP")
	}
	prev, err := u.readPtr(uint64(int64(fp) + rec.PrevFP))
	if err != nil {
		return state{}, err
	}
	var ra uint64
	if rec.Leaf {
		lr, ok := cur.rs.Get(a.LR)
		if !ok {
			return state{}, errors.New("no link register")
		}
		ra = lr
	} else if ra, err = u.readPtr(uint64(int64(fp) + rec.RA)); err != nil {
		return state{}, err
	}
	ra = a.StripPAC(ra, u.p.PACMask)
	callerSP := uint64(int64(fp) + rec.CallerSP)
	if prev != 0 && prev < callerSP {
		return state{}, fmt.Errorf("the previous frame pointer %#x is below the caller's SP", prev)
	}
	c, err := u.callSite(ra, cur, true)
	if err != nil {
		return state{}, err
	}
	next := state{pc: ra, rs: cur.rs, raMem: !rec.Leaf, spApprox: !rec.SPExact, weak: !c.Direct}
	next.rs.Set(a.FP, prev)
	next.rs.Set(a.SP, callerSP)
	if a.LR >= 0 {
		next.rs.Clear(a.LR)
	}
	return next, nil
}

type fpStrategy struct{}

func (fpStrategy) name() string { return MethodFP }
func (fpStrategy) trust() Trust { return TrustMedium }
func (strat fpStrategy) step(u *unwinder, f *frame) (state, error) {
	if f.outermost || f.cantUnwind || len(u.p.Arch.FrameRecords) == 0 {
		return state{}, errSkip
	}
	if f.cur.thumb && u.p.Arch.ThumbNoFP {
		return state{}, errors.New("no walkable frame pointer in Thumb code")
	}
	return strat.framePointer(u, f)
}
