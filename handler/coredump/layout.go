package coredump

import (
	"encoding/binary"

	"github.com/unwound-dev/unwound/elf"
)

// PRStatusLayout is where struct elf_prstatus (include/linux/elfcore.h,
// include/uapi/linux/elf.h) keeps what a core's reader needs: pr_cursig,
// pr_pid and pr_reg. pr_fpvalid, an int, follows pr_reg. The reader
// (notes.go) and every writer of cores (WriteNotes, the install
// self-test, the tests) take the offsets from here.
type PRStatusLayout struct {
	Cursig int // pr_cursig, a short after the elf_siginfo
	PID    int // pr_pid, then pr_ppid
	Reg    int // pr_reg: elf_gregset_t, native words
}

// PRStatusOf is the layout for a core's class: the 64-bit one, else the
// 32-bit one (ARM, compat) with its 4-byte timevals and sigsets.
func PRStatusOf(c elf.Class) PRStatusLayout {
	if c == elf.ELFCLASS64 {
		return PRStatusLayout{Cursig: 12, PID: 32, Reg: 112}
	}
	return PRStatusLayout{Cursig: 12, PID: 24, Reg: 72}
}

// GregsetWords is the number of pr_reg words of a machine: its
// elf_gregset_t (arch/*/include/uapi/asm/ptrace.h, elf.h).
func GregsetWords(m elf.Machine) int {
	switch m {
	case elf.EM_X86_64:
		return 27
	case elf.EM_AARCH64:
		return 34
	case elf.EM_ARM:
		return 18
	case elf.EM_386:
		return 17
	}
	return 32 // riscv64
}

// NoteWriter writes the CORE notes of a core the way the kernel does
// (fs/binfmt_elf.c), for the install self-test and the tests: one writer
// of every layout the reader reads.
type NoteWriter struct {
	Class   elf.Class
	Order   binary.ByteOrder
	Machine elf.Machine
}

func (w NoteWriter) word() int {
	if w.Class == elf.ELFCLASS64 {
		return 8
	}
	return 4
}

func (w NoteWriter) put(b []byte, off int, v uint64) {
	if w.word() == 8 {
		w.Order.PutUint64(b[off:], v)
	} else {
		w.Order.PutUint32(b[off:], uint32(v))
	}
}

func (w NoteWriter) append(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		n := len(b)
		b = append(b, make([]byte, w.word())...)
		w.put(b, n, v)
	}
	return b
}

// PRStatus is a thread's NT_PRSTATUS: its signal, its id and its
// registers (regs shorter than the gregset are zero-padded), pr_ppid 1
// and pr_fpvalid set.
func (w NoteWriter) PRStatus(tid, sig int, regs []uint64) []byte {
	l, ws, n := PRStatusOf(w.Class), w.word(), GregsetWords(w.Machine)
	d := make([]byte, (l.Reg+n*ws+4+ws-1)&^(ws-1))
	w.Order.PutUint32(d[0:], uint32(sig)) // pr_info.si_signo
	w.Order.PutUint16(d[l.Cursig:], uint16(sig))
	w.Order.PutUint32(d[l.PID:], uint32(tid))
	w.Order.PutUint32(d[l.PID+4:], 1)
	for i := 0; i < n && i < len(regs); i++ {
		w.put(d, l.Reg+i*ws, regs[i])
	}
	w.Order.PutUint32(d[l.Reg+n*ws:], 1) // pr_fpvalid
	return d
}

// prpsinfoLayout is struct elf_prpsinfo's: 64-bit has 32-bit uids at 16;
// 32-bit ARM and compat have 16-bit uids (__kernel_uid_t, compat_uid_t).
type prpsinfoLayout struct {
	size, uid, pid, fname int
	uid16                 bool
}

// fnameLen and argsLen are pr_fname's and pr_psargs's sizes (ELF_PRARGSZ).
const fnameLen, argsLen = 16, 80

func prpsinfoOf(c elf.Class) prpsinfoLayout {
	if c == elf.ELFCLASS64 {
		return prpsinfoLayout{size: 136, uid: 16, pid: 24, fname: 40}
	}
	return prpsinfoLayout{size: 124, uid: 8, pid: 12, fname: 28, uid16: true}
}

// PRPSInfo is the process's NT_PRPSINFO (state 'R').
func (w NoteWriter) PRPSInfo(pid, ppid int, uid, gid uint32, fname, args string) []byte {
	l := prpsinfoOf(w.Class)
	d := make([]byte, l.size)
	d[1] = 'R'
	if l.uid16 {
		w.Order.PutUint16(d[l.uid:], uint16(uid))
		w.Order.PutUint16(d[l.uid+2:], uint16(gid))
	} else {
		w.Order.PutUint32(d[l.uid:], uid)
		w.Order.PutUint32(d[l.uid+4:], gid)
	}
	w.Order.PutUint32(d[l.pid:], uint32(pid))
	w.Order.PutUint32(d[l.pid+4:], uint32(ppid))
	copy(d[l.fname:l.fname+fnameLen-1], fname)
	copy(d[l.fname+fnameLen:l.fname+fnameLen+argsLen-1], args)
	return d
}

// siAddrOf is where siginfo_t keeps si_addr: after si_signo, si_errno,
// si_code and, on 64-bit, the padding that aligns the union.
func siAddrOf(c elf.Class) int {
	if c == elf.ELFCLASS64 {
		return 16
	}
	return 12
}

// SigInfo is NT_SIGINFO: a siginfo_t of 128 bytes.
func (w NoteWriter) SigInfo(signo, errno, code int32, addr uint64) []byte {
	d := make([]byte, 128)
	w.Order.PutUint32(d[0:], uint32(signo))
	w.Order.PutUint32(d[4:], uint32(errno))
	w.Order.PutUint32(d[8:], uint32(code))
	w.put(d, siAddrOf(w.Class), addr)
	return d
}

// Auxv is NT_AUXV: the tag, value pairs, then AT_NULL.
func (w NoteWriter) Auxv(pairs ...uint64) []byte {
	return w.append(w.append(nil, pairs...), 0, 0)
}

// File is NT_FILE: count, page size, {start, end, page offset} per file,
// then the paths (fs/binfmt_elf.c fill_files_note).
func (w NoteWriter) File(page uint64, files []FileMapping) []byte {
	d := w.append(nil, uint64(len(files)), page)
	for _, f := range files {
		d = w.append(d, f.Start, f.End, f.Offset/page)
	}
	for _, f := range files {
		d = append(append(d, f.Path...), 0)
	}
	return d
}

// AppendNote appends one note: namesz, descsz, type, the name and the
// descriptor, each padded to 4 bytes, as in every core (not 8, even in
// 64-bit ones).
func (w NoteWriter) AppendNote(b []byte, name string, typ uint32, desc []byte) []byte {
	var h [12]byte
	w.Order.PutUint32(h[0:], uint32(len(name)+1))
	w.Order.PutUint32(h[4:], uint32(len(desc)))
	w.Order.PutUint32(h[8:], typ)
	b = append(append(append(b, h[:]...), name...), 0)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
