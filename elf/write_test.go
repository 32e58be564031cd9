package elf

import (
	"bytes"
	stdelf "debug/elf"
	"encoding/binary"
	"testing"
)

// TestWriterRoundTrip: what Writer writes, in both classes and byte
// orders, reads back field for field with this package and debug/elf.
func TestWriterRoundTrip(t *testing.T) {
	for _, w := range []Writer{
		{ELFCLASS64, binary.LittleEndian}, {ELFCLASS64, binary.BigEndian},
		{ELFCLASS32, binary.LittleEndian}, {ELFCLASS32, binary.BigEndian},
	} {
		ehsize, phentsize, shentsize := w.Sizes()
		shstr := []byte("\x00.text\x00.shstrtab\x00")
		strOff := uint64(ehsize + phentsize)
		shoff := strOff + uint64(len(shstr))
		b := w.AppendHeader(nil, Header{Type: ET_EXEC, Machine: EM_AARCH64, Flags: 0x05000000, Entry: 0x401000, Phnum: 1, Shoff: shoff, Shnum: 3, Shstrndx: 2})
		if len(b) != ehsize {
			t.Fatalf("%v %v: header %d bytes, want %d", w.Class, w.Order, len(b), ehsize)
		}
		prog := ProgHeader{Type: PT_LOAD, Flags: PF_R | PF_X, Vaddr: 0x400000, Paddr: 0x400000, Filesz: shoff, Memsz: 0x2000, Align: 4096}
		b = w.AppendProg(b, prog)
		b = append(b, shstr...)
		b = w.AppendSection(b, 0, SectionHeader{})
		b = w.AppendSection(b, 1, SectionHeader{Type: SHT_PROGBITS, Flags: SHF_ALLOC | SHF_EXECINSTR, Addr: 0x400000, Offset: 0, Size: 16, Addralign: 4})
		b = w.AppendSection(b, 7, SectionHeader{Type: SHT_STRTAB, Offset: strOff, Size: uint64(len(shstr)), Addralign: 1})
		if want := int(shoff) + 3*shentsize; len(b) != want {
			t.Fatalf("%v %v: file %d bytes, want %d", w.Class, w.Order, len(b), want)
		}

		f, err := NewFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("%v %v: %v", w.Class, w.Order, err)
		}
		if f.Class != w.Class || f.ByteOrder != w.Order || f.Type != ET_EXEC || f.Machine != EM_AARCH64 || f.Entry != 0x401000 {
			t.Errorf("%v %v: header read back as %+v", w.Class, w.Order, f.FileHeader)
		}
		if len(f.Progs) != 1 || f.Progs[0].ProgHeader != prog {
			t.Errorf("%v %v: program headers read back as %+v", w.Class, w.Order, f.Progs)
		}
		if s := f.Section(".text"); s == nil || s.Addr != 0x400000 || s.Size != 16 || s.Addralign != 4 || s.Flags != SHF_ALLOC|SHF_EXECINSTR {
			t.Errorf("%v %v: .text read back as %+v", w.Class, w.Order, s)
		}

		sf, err := stdelf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%v %v: debug/elf: %v", w.Class, w.Order, err)
		}
		if sf.Section(".shstrtab") == nil || sf.Progs[0].Memsz != 0x2000 || sf.Entry != 0x401000 {
			t.Errorf("%v %v: debug/elf reads %+v", w.Class, w.Order, sf.FileHeader)
		}
	}
}
