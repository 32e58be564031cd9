package module

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"

	"github.com/unwound-dev/unwound/elf"
	"github.com/unwound-dev/unwound/handler/cfi"
	"github.com/unwound-dev/unwound/handler/ehabi"
	"github.com/unwound-dev/unwound/internal/sha256"
)

// MaxSection caps how much of one section is read: no real unwind table
// comes near it, and a hostile header must not make the handler allocate
// the size it claims.
const MaxSection = 32 << 20

// File is the part of an ELF file the unwinder uses.
type File struct {
	Machine elf.Machine
	Class   elf.Class
	Order   binary.ByteOrder

	loads []seg
	r     io.ReaderAt

	BuildID []byte // NT_GNU_BUILD_ID, nil when absent
	Entry   uint64 // e_entry: _start, the outermost frame of the main thread
	// Dynamic: the file has PT_DYNAMIC. Without it (a static program) a
	// PLT stub is an IFUNC's .iplt entry: it jumps within the file.
	Dynamic bool

	EHFrame    *cfi.Table // .eh_frame (through .eh_frame_hdr when present)
	DebugFrame *cfi.Table // .debug_frame, in unstripped files

	// ARM EHABI tables: .ARM.exidx and .ARM.extab with their addresses.
	Exidx, Extab         []byte
	ExidxAddr, ExtabAddr uint64

	// EHABI indexes Exidx/Extab (nil without .ARM.exidx).
	EHABI *ehabi.Table

	symtabs    []elf.SectionHeader // .symtab, .dynsym, for FuncStart
	hasSymtab  bool                // not stripped: MiniDebugInfo adds nothing
	symsLoaded bool
	funcs      []uint64 // function starts, sorted (FuncStart)

	// MiniDebugInfo (minidebuginfo.go): .gnu_debugdata, read on first use.
	mdiSec  elf.SectionHeader
	mdiDone bool
	mdi     *miniDebugInfo
	mdiErr  error

	// PLTs are the linker's stub sections (.plt, .plt.sec, .plt.got,
	// .iplt), as file addresses: code without tables whose caller is
	// exactly the link register (the return address at SP on x86).
	PLTs []Stubs

	// TableErrs says why a present table could not be used.
	TableErrs []error
}

// Stubs is a section of linker-made stubs, [Start, End) in file addresses.
// Header: the section starts with the lazy resolver's entry (.plt), which
// is no stub of its own and may push.
type Stubs struct {
	Start, End uint64
	Header     bool
}

// InPLT returns the stub section holding the file address vaddr.
func (f *File) InPLT(vaddr uint64) (Stubs, bool) {
	for _, s := range f.PLTs {
		if vaddr >= s.Start && vaddr < s.End {
			return s, true
		}
	}
	return Stubs{}, false
}

type seg struct {
	Vaddr, Off, Filesz, Memsz uint64
	Flags                     elf.ProgFlag
}

func (f *File) execSegment() (seg, bool) {
	for _, s := range f.loads {
		if s.Flags&elf.PF_X != 0 {
			return s, true
		}
	}
	return seg{}, false
}

// Code returns the file address and size of the executable segment.
func (f *File) Code() (vaddr, size uint64, ok bool) {
	s, ok := f.execSegment()
	return s.Vaddr, s.Filesz, ok
}

// HasUnwindInfo reports whether the file has any unwind table.
func (f *File) HasUnwindInfo() bool {
	return f.EHFrame != nil || f.DebugFrame != nil || len(f.Exidx) > 0
}

// ReadCode reads file-backed bytes at a file virtual address.
func (f *File) ReadCode(vaddr uint64, p []byte) error {
	for _, s := range f.loads {
		if vaddr >= s.Vaddr && vaddr-s.Vaddr < s.Filesz && uint64(len(p)) <= s.Filesz-(vaddr-s.Vaddr) {
			_, err := f.r.ReadAt(p, int64(s.Off+(vaddr-s.Vaddr)))
			return err
		}
	}
	return fmt.Errorf("address %#x not in a file-backed segment", vaddr)
}

// Load reads an ELF file's identity and unwind tables. r is read with
// bounded reads (pread), never mapped, so a file truncated underneath us is
// an I/O error rather than a SIGBUS. r must tell its size: a Size method
// (bytes.Reader, io.SectionReader) or a Stat method (os.File).
func Load(r io.ReaderAt) (*File, error) {
	size, err := readerSize(r)
	if err != nil {
		return nil, err
	}
	ef, err := elf.NewFile(r, size)
	if err != nil {
		return nil, err
	}
	f := &File{Machine: ef.Machine, Class: ef.Class, Order: ef.ByteOrder, r: r, Entry: ef.Entry}
	var hdrProg *elf.Prog
	for _, p := range ef.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			f.loads = append(f.loads, seg{p.Vaddr, p.Off, p.Filesz, p.Memsz, p.Flags})
		case elf.PT_GNU_EH_FRAME:
			hdrProg = p
		case elf.PT_DYNAMIC:
			f.Dynamic = true
		}
	}
	f.BuildID = ef.BuildID()
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		if s := ef.SectionByType(typ); s != nil {
			f.symtabs = append(f.symtabs, s.SectionHeader)
			f.hasSymtab = f.hasSymtab || typ == elf.SHT_SYMTAB
		}
	}
	if s := ef.Section(".gnu_debugdata"); s != nil && s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_COMPRESSED == 0 {
		f.mdiSec = s.SectionHeader
	}
	ca := cfi.Arch{PtrSize: ptrSize(ef.Class), Order: ef.ByteOrder, AArch64: ef.Machine == elf.EM_AARCH64}
	for _, name := range []string{".plt", ".plt.sec", ".plt.got", ".iplt"} {
		s := ef.Section(name)
		if s == nil || s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 || s.Addr+s.Size < s.Addr {
			continue
		}
		// A static program's IFUNC stubs (.iplt, which GNU ld names .plt
		// there) have no resolver entry before them.
		f.PLTs = append(f.PLTs, Stubs{Start: s.Addr, End: s.Addr + s.Size, Header: name == ".plt" && f.Dynamic})
	}

	eh, ehAddr := sectionData(ef, ".eh_frame")
	hdr, hdrAddr := sectionData(ef, ".eh_frame_hdr")
	if hdr == nil && hdrProg != nil && hdrProg.Filesz <= MaxSection {
		// Section headers stripped: PT_GNU_EH_FRAME still locates the hdr,
		// and its eh_frame_ptr locates .eh_frame, which runs to the end of
		// its segment at most.
		hdr, _ = hdrProg.Data()
		hdrAddr = hdrProg.Vaddr
	}
	if eh == nil && hdr != nil {
		eh, ehAddr = f.ehFrameFromHdr(hdr, hdrAddr, ca)
	}
	if len(eh) > 0 {
		t, err := cfi.NewEHFrame(eh, ehAddr, hdr, hdrAddr, ca)
		if err != nil {
			f.TableErrs = append(f.TableErrs, fmt.Errorf(".eh_frame: %w", err))
		} else {
			f.EHFrame = t
		}
	}
	if df, _ := sectionData(ef, ".debug_frame"); len(df) > 0 {
		t, err := cfi.NewDebugFrame(df, ca)
		if err != nil {
			f.TableErrs = append(f.TableErrs, fmt.Errorf(".debug_frame: %w", err))
		} else {
			f.DebugFrame = t
		}
	}
	f.Exidx, f.ExidxAddr = sectionData(ef, ".ARM.exidx")
	f.Extab, f.ExtabAddr = sectionData(ef, ".ARM.extab")
	if f.Exidx == nil {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_ARM_EXIDX && p.Filesz <= MaxSection {
				if b, err := p.Data(); err == nil {
					f.Exidx, f.ExidxAddr = b, p.Vaddr
				}
			}
		}
	}
	if len(f.Exidx) > 0 && f.Extab == nil {
		f.Extab, f.ExtabAddr = f.extabFromExidx(ef.ByteOrder)
	}
	if len(f.Exidx) > 0 {
		t, err := ehabi.New(f.Exidx, f.ExidxAddr, f.Extab, f.ExtabAddr, ef.ByteOrder)
		if err != nil {
			f.TableErrs = append(f.TableErrs, err)
		} else {
			f.EHABI = t
		}
	}
	return f, nil
}

// CodeID is the identity of a file without a GNU build ID: the first 16
// bytes of the SHA-256 of the first page of its executable segment.
func (f *File) CodeID() (string, error) {
	x, ok := f.execSegment()
	if !ok {
		return "", errors.New("no executable segment")
	}
	n := x.Filesz
	if n > 4096 {
		n = 4096
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(x.Off)); err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

func ptrSize(c elf.Class) int {
	if c == elf.ELFCLASS32 {
		return 4
	}
	return 8
}

// sectionData reads a section's bytes as they are in the file. Compressed
// sections (SHF_COMPRESSED, only ever .debug_* ones) are skipped: their
// zlib and zstd decoders would grow the handler (docs/design.md,
// "Footprint") for a table that .eh_frame or .ARM.exidx provide too, and
// stripped binaries have none.
func sectionData(ef *elf.File, name string) ([]byte, uint64) {
	s := ef.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || s.Size == 0 || s.Size > MaxSection {
		return nil, 0
	}
	b, err := s.Data()
	if err != nil {
		return nil, 0
	}
	return b, s.Addr
}

// ehFrameFromHdr reads .eh_frame from the address an .eh_frame_hdr gives.
func (f *File) ehFrameFromHdr(hdr []byte, hdrAddr uint64, ca cfi.Arch) ([]byte, uint64) {
	addr, err := cfi.EHFramePtr(hdr, hdrAddr, ca)
	if err != nil {
		return nil, 0
	}
	if n, ok := cfi.HdrFDECount(hdr, hdrAddr, ca); ok && n == 0 {
		return nil, 0 // nothing to find there (mold's empty header)
	}
	for _, s := range f.loads {
		if addr >= s.Vaddr && addr-s.Vaddr < s.Filesz {
			n := s.Filesz - (addr - s.Vaddr)
			if n > MaxSection {
				n = MaxSection
			}
			b, err := readSized(f.r, s.Off+(addr-s.Vaddr), n)
			if err != nil {
				return nil, 0
			}
			return b, addr
		}
	}
	return nil, 0
}

// maxExtabEntry bounds the bytes read past the last .ARM.extab entry an
// index entry points to: a personality routine's word and its unwind
// instructions, at most 255 further words of them.
const maxExtabEntry = 4 + 4 + 255*4

// extabFromExidx finds .ARM.extab in a file without section headers (sstrip,
// llvm-objcopy --strip-sections): the index entries that are not inline
// point into it, and the segment holding those addresses holds the table.
// It returns the bytes from the lowest entry to past the highest, within
// that segment.
func (f *File) extabFromExidx(order binary.ByteOrder) ([]byte, uint64) {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i := 0; i+8 <= len(f.Exidx); i += 8 {
		w := order.Uint32(f.Exidx[i+4:])
		if w == 1 || w&0x80000000 != 0 {
			continue // EXIDX_CANTUNWIND, or the instructions inline
		}
		at := f.ExidxAddr + uint64(i) + 4
		a := uint64(int64(at)+int64(int32(w<<1)>>1)) & 0xffffffff
		lo, hi = min(lo, a), max(hi, a)
	}
	if hi < lo {
		return nil, 0
	}
	for _, s := range f.loads {
		if lo < s.Vaddr || lo-s.Vaddr >= s.Filesz || hi-s.Vaddr >= s.Filesz {
			continue
		}
		n := min(hi-lo+maxExtabEntry, s.Filesz-(lo-s.Vaddr), MaxSection)
		b, err := readSized(f.r, s.Off+(lo-s.Vaddr), n)
		if err != nil {
			return nil, 0
		}
		return b, lo
	}
	return nil, 0
}

// readSized reads n bytes at off, allocating as the data arrives, so that a
// size claimed by a hostile header costs no more memory than the file holds.
func readSized(r io.ReaderAt, off, n uint64) ([]byte, error) {
	if off > math.MaxInt64 || n > math.MaxInt64-off {
		return nil, fmt.Errorf("%d bytes at %#x: out of range", n, off)
	}
	// A size the file holds (its last byte reads) is read at once into a
	// buffer of that size: io.ReadAll's doubling leaves up to three
	// times the section as garbage, which is peak RSS on a board.
	if n > 0 {
		var last [1]byte
		if k, _ := r.ReadAt(last[:], int64(off+n-1)); k == 1 {
			b := make([]byte, n)
			k, err := r.ReadAt(b, int64(off))
			if uint64(k) == n {
				return b, nil
			}
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	b, err := io.ReadAll(io.NewSectionReader(r, int64(off), int64(n)))
	if err != nil {
		return nil, err
	}
	if uint64(len(b)) != n {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// readerSize is the size of the file behind r.
func readerSize(r io.ReaderAt) (int64, error) {
	switch r := r.(type) {
	case interface{ Size() int64 }:
		return r.Size(), nil
	case interface{ Stat() (fs.FileInfo, error) }:
		st, err := r.Stat()
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	return 0, fmt.Errorf("module: a %T does not tell its size", r)
}
