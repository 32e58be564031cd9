package coredump

import (
	"bytes"
	"fmt"

	"github.com/unwound-dev/unwound/elf"
)

// parseNotes walks PT_NOTE data. Notes are 4-byte aligned even in 64-bit
// cores (fs/binfmt_elf.c writenote). Unknown notes are counted and skipped.
func (c *Core) parseNotes(b []byte, base int64, lim Limits) error {
	for off := 0; len(b)-off >= 12; {
		n, next, err := elf.ParseNote(b, off, c.Order)
		if err != nil {
			return &FormatError{base + int64(off), fmt.Sprintf("note (type %#x) runs past the end of PT_NOTE", n.Type)}
		}
		if err := c.note(n.Name, n.Type, n.Desc, lim); err != nil {
			return &FormatError{base + int64(off) + 12, err.Error()}
		}
		off = next
	}
	return nil
}

func (c *Core) ptr() int {
	if c.Class == elf.ELFCLASS64 {
		return 8
	}
	return 4
}

func (c *Core) word(b []byte) uint64 {
	if c.ptr() == 8 {
		return c.Order.Uint64(b)
	}
	return uint64(c.Order.Uint32(b))
}

func (c *Core) note(name string, typ uint32, d []byte, lim Limits) error {
	w := c.ptr()
	switch {
	case name == "CORE" && typ == ntPRStatus:
		l := PRStatusOf(c.Class)
		if len(d) < l.Reg+w {
			return fmt.Errorf("NT_PRSTATUS of %d bytes is too short", len(d))
		}
		if len(c.Threads) >= lim.MaxThreads {
			c.Skipped++
			return nil
		}
		t := Thread{
			TID:    int(int32(c.Order.Uint32(d[l.PID:]))),
			Signal: int(int16(c.Order.Uint16(d[l.Cursig:]))),
		}
		// pr_reg is followed by pr_fpvalid (an int); take every whole
		// word up to it.
		n := (len(d) - l.Reg - 4) / w
		if n > 64 {
			n = 64
		}
		for i := 0; i < n; i++ {
			t.Regs = append(t.Regs, c.word(d[l.Reg+i*w:]))
		}
		c.Threads = append(c.Threads, t)
	case name == "CORE" && typ == ntPRPSInfo:
		c.PRPSInfo = c.prpsinfo(d)
	case name == "CORE" && typ == ntSigInfo:
		if len(d) < 12+w {
			return fmt.Errorf("NT_SIGINFO of %d bytes is too short", len(d))
		}
		si := &SigInfo{Signo: int32(c.Order.Uint32(d)), Errno: int32(c.Order.Uint32(d[4:])), Code: int32(c.Order.Uint32(d[8:]))}
		if addrOff := siAddrOf(c.Class); len(d) >= addrOff+w {
			si.Addr = c.word(d[addrOff:])
		}
		c.SigInfo = si
	case name == "CORE" && typ == ntAuxv:
		for i := 0; i+2*w <= len(d) && len(c.Auxv) < 256; i += 2 * w {
			tag := c.word(d[i:])
			if tag == 0 {
				break
			}
			c.Auxv = append(c.Auxv, AuxEntry{tag, c.word(d[i+w:])})
		}
	case name == "CORE" && typ == ntFile:
		return c.ntFile(d, lim)
	case name == "LINUX" && typ == ntARMPACMask:
		// struct user_pac_mask {data_mask, insn_mask}, after the
		// thread's NT_PRSTATUS.
		if len(d) >= 16 && len(c.Threads) > 0 {
			c.Threads[len(c.Threads)-1].PACMask = c.Order.Uint64(d[8:])
		}
	default:
		c.Skipped++
	}
	return nil
}

func (c *Core) prpsinfo(d []byte) *PRPSInfo {
	l := prpsinfoOf(c.Class)
	if len(d) < l.size {
		return nil
	}
	var pi PRPSInfo
	if l.uid16 {
		pi.UID, pi.GID = uint32(c.Order.Uint16(d[l.uid:])), uint32(c.Order.Uint16(d[l.uid+2:]))
	} else {
		pi.UID, pi.GID = c.Order.Uint32(d[l.uid:]), c.Order.Uint32(d[l.uid+4:])
	}
	pi.PID = int(int32(c.Order.Uint32(d[l.pid:])))
	pi.PPID = int(int32(c.Order.Uint32(d[l.pid+4:])))
	pi.Fname = cstring(d[l.fname : l.fname+fnameLen])
	pi.Args = cstring(d[l.fname+fnameLen : l.fname+fnameLen+argsLen])
	return &pi
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// ntFile parses NT_FILE: count, page_size, count×{start, end, pgoff},
// then count NUL-terminated paths; every field a native long
// (fs/binfmt_elf.c fill_files_note).
func (c *Core) ntFile(d []byte, lim Limits) error {
	w := uint64(c.ptr())
	if uint64(len(d)) < 2*w {
		return fmt.Errorf("NT_FILE of %d bytes is too short", len(d))
	}
	count, page := c.word(d), c.word(d[w:])
	if count > (uint64(len(d))-2*w)/(3*w) {
		return fmt.Errorf("NT_FILE claims %d entries in %d bytes", count, len(d))
	}
	// The paths follow all count entries, kept or not.
	names := d[2*w+count*3*w:]
	if count > uint64(lim.MaxFiles) {
		count = uint64(lim.MaxFiles)
		c.Skipped++
	}
	for i := uint64(0); i < count; i++ {
		e := d[2*w+i*3*w:]
		fm := FileMapping{Start: c.word(e), End: c.word(e[w:]), Offset: c.word(e[2*w:]) * page}
		j := bytes.IndexByte(names, 0)
		if j < 0 {
			return fmt.Errorf("NT_FILE: path %d is not terminated", i)
		}
		fm.Path, names = string(names[:j]), names[j+1:]
		c.Files = append(c.Files, fm)
	}
	return nil
}
