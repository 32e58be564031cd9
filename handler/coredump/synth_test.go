package coredump

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/unwound-dev/unwound/elf"
)

// This file synthesizes ELF core dumps laid out the way the kernel writes
// them (fs/binfmt_elf.c elf_core_dump): ELF header, program headers with
// PT_NOTE first, note data (4-byte aligned), padding to a page, segment data
// in program-header order and, for PN_XNUM, section header 0 at the end.

type synthSeg struct {
	vaddr  uint64
	size   uint64 // p_filesz
	memsz  uint64 // 0: same as size
	flags  elf.ProgFlag
	data   []byte // nil: fill(vaddr) pattern (or zeros if zero is set)
	zero   bool
	offset uint64 // set by layout
}

type synthNote struct {
	name string
	typ  uint32
	desc []byte
}

type synthCore struct {
	class   elf.Class
	order   binary.ByteOrder
	machine elf.Machine
	notes   []synthNote
	segs    []synthSeg
	// xnum writes e_phnum = PN_XNUM and the real count in section
	// header 0's sh_info, at the end of the file, as the kernel does for
	// more than 0xfffe segments. It is forced on when there are that many.
	xnum bool
	// notePad inserts that many zero bytes between the program headers
	// and the note data.
	notePad int
	// nullPhdrs adds PT_NULL program headers after the PT_LOADs.
	nullPhdrs int
	// align is what the segment data is aligned to; 0 means a page, as
	// the kernel does. Fuzz seeds use less to stay small.
	align uint64
}

// fill is the byte the synthesized memory holds at address v.
func fill(v uint64) byte { return byte(v%251) ^ byte(v>>12) }

func (c *synthCore) w() int {
	if c.class == elf.ELFCLASS64 {
		return 8
	}
	return 4
}

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

func (c *synthCore) ord() byteOrder {
	if c.order == binary.BigEndian {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (c *synthCore) put(b []byte, v uint64) []byte {
	if c.w() == 8 {
		return c.ord().AppendUint64(b, v)
	}
	return c.ord().AppendUint32(b, uint32(v))
}

func (c *synthCore) addNote(name string, typ uint32, desc []byte) {
	c.notes = append(c.notes, synthNote{name, typ, desc})
}

// nw writes the core's notes.
func (c *synthCore) nw() NoteWriter {
	return NoteWriter{Class: c.class, Order: c.ord(), Machine: c.machine}
}

func (c *synthCore) prstatus(tid, sig int, regs []uint64) []byte {
	return c.nw().PRStatus(tid, sig, regs)
}

func (c *synthCore) addThread(tid, sig int, regs []uint64) {
	c.addNote("CORE", ntPRStatus, c.prstatus(tid, sig, regs))
}

func (c *synthCore) prpsinfo(pid, ppid int, uid, gid uint32, fname, args string) []byte {
	return c.nw().PRPSInfo(pid, ppid, uid, gid, fname, args)
}

func (c *synthCore) siginfo(signo, errno, code int32, addr uint64) []byte {
	return c.nw().SigInfo(signo, errno, code, addr)
}

func (c *synthCore) auxv(pairs ...uint64) []byte { return c.nw().Auxv(pairs...) }

func (c *synthCore) ntfile(page uint64, files []FileMapping) []byte {
	return c.nw().File(page, files)
}

func (c *synthCore) noteData() []byte {
	var b []byte
	for _, n := range c.notes {
		b = c.nw().AppendNote(b, n.name, n.typ, n.desc)
	}
	return b
}

func (c *synthCore) sizes() (ehsize, phentsize, shentsize int) {
	if c.class == elf.ELFCLASS64 {
		return 64, 56, 64
	}
	return 52, 32, 40
}

// header lays the core out (CoreLayout) and returns everything before the
// segment data, the total size of the segment data, and the section
// header to append at the end (nil without PN_XNUM). Segment offsets are
// filled in.
func (c *synthCore) header() (hdr []byte, dataSize uint64, shdr []byte) {
	l := CoreLayout{NoteWriter: c.nw(), Notes: c.noteData(), XNum: c.xnum, NotePad: c.notePad, NullPhdrs: c.nullPhdrs, Align: c.align}
	for _, s := range c.segs {
		l.Segs = append(l.Segs, CoreSegment{Vaddr: s.vaddr, Filesz: s.size, Memsz: s.memsz, Flags: s.flags})
	}
	hdr, _, shdr = l.Header()
	for i := range c.segs {
		c.segs[i].offset = l.Segs[i].Offset
		dataSize += c.segs[i].size
	}
	return hdr, dataSize, shdr
}

// reader streams the core without holding the segment data in memory.
func (c *synthCore) reader() io.Reader {
	hdr, _, shdr := c.header()
	rs := []io.Reader{bytes.NewReader(hdr)}
	for _, s := range c.segs {
		switch {
		case s.data != nil:
			rs = append(rs, bytes.NewReader(s.data[:s.size]))
		case s.zero:
			rs = append(rs, &zeroReader{n: s.size})
		default:
			rs = append(rs, &fillReader{v: s.vaddr, n: s.size})
		}
	}
	if shdr != nil {
		rs = append(rs, bytes.NewReader(shdr))
	}
	return io.MultiReader(rs...)
}

// bytes returns the whole core.
func (c *synthCore) bytes() []byte {
	b, err := io.ReadAll(c.reader())
	if err != nil {
		panic(err)
	}
	return b
}

type fillReader struct{ v, n uint64 }

func (r *fillReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > r.n {
		p = p[:r.n]
	}
	for i := range p {
		p[i] = fill(r.v + uint64(i))
	}
	r.v += uint64(len(p))
	r.n -= uint64(len(p))
	return len(p), nil
}

type zeroReader struct{ n uint64 }

func (r *zeroReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > r.n {
		p = p[:r.n]
	}
	clear(p)
	r.n -= uint64(len(p))
	return len(p), nil
}

// regsFor returns a recognisable register set: word i is base+i.
func regsFor(m elf.Machine, base uint64) []uint64 {
	r := make([]uint64, GregsetWords(m))
	for i := range r {
		r[i] = base + uint64(i)
	}
	return r
}

// sampleCore is a small valid core with every note type the package reads,
// an unknown note, three threads and three segments out of address order.
func sampleCore(class elf.Class, m elf.Machine) *synthCore {
	return sampleCoreOrder(class, m, nil)
}

// sampleCoreOrder is sampleCore in byte order order (nil: little-endian);
// notes are encoded as they are added, so the order comes first.
func sampleCoreOrder(class elf.Class, m elf.Machine, order binary.ByteOrder) *synthCore {
	c := &synthCore{class: class, machine: m, order: order}
	c.addThread(101, 11, regsFor(m, 0x1000))
	c.addNote("CORE", ntPRPSInfo, c.prpsinfo(101, 1, 1000, 1001, "crasher", "./crasher -x arg"))
	c.addNote("CORE", ntSigInfo, c.siginfo(11, 0, 1, 0xdead0))
	c.addNote("CORE", ntAuxv, c.auxv(AT_PAGESZ, 4096, AT_SYSINFO_EHDR, 0x7fff0000, AT_ENTRY, 0x401000))
	c.addNote("CORE", ntFile, c.ntfile(4096, []FileMapping{
		{Start: 0x400000, End: 0x401000, Offset: 0, Path: "/usr/bin/crasher"},
		{Start: 0x401000, End: 0x403000, Offset: 0x1000, Path: "/usr/bin/crasher"},
		{Start: 0x70000000, End: 0x70001000, Offset: 0x3000, Path: "/tmp/libgone.so (deleted)"},
	}))
	c.addNote("CORE", ntPRFPReg, make([]byte, 512)) // understood by nobody: skipped
	c.addNote("GNU", 0x1234, []byte{1, 2, 3})       // unknown owner, odd size
	if m == elf.EM_AARCH64 {
		pac := make([]byte, 16)
		binary.LittleEndian.PutUint64(pac, 0x007f000000000000)
		binary.LittleEndian.PutUint64(pac[8:], 0x007f800000000000)
		c.addNote("LINUX", ntARMPACMask, pac)
	}
	c.addThread(102, 0, regsFor(m, 0x2000))
	c.addNote("LINUX", 0x202, make([]byte, 832)) // NT_X86_XSTATE-like: skipped
	c.addThread(103, 0, regsFor(m, 0x3000))
	c.segs = []synthSeg{
		{vaddr: 0x70000000, size: 0x1000, flags: elf.PF_R | elf.PF_X},
		{vaddr: 0x400000, size: 0x3000, flags: elf.PF_R | elf.PF_X},
		{vaddr: 0x600000, size: 0, memsz: 0x2000, flags: elf.PF_R}, // not dumped
		{vaddr: 0x500000, size: 0x2000, flags: elf.PF_R | elf.PF_W},
	}
	return c
}
