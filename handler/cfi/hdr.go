package cfi

import "errors"

// EHFramePtr is the address of .eh_frame that an .eh_frame_hdr at hdrAddr
// gives: its eh_frame_ptr (LSB 5.0 §10.6.2), in the header's encoding.
// Stripped section headers leave PT_GNU_EH_FRAME and this as the way to
// .eh_frame.
func EHFramePtr(hdr []byte, hdrAddr uint64, a Arch) (uint64, error) {
	if len(hdr) < 4 || hdr[0] != 1 {
		return 0, errors.New("bad .eh_frame_hdr version")
	}
	r := reader{b: hdr, off: 4, order: a.Order, ptr: a.PtrSize}
	return r.encoded(hdr[1], hdrAddr, hdrAddr, nil)
}

// HdrFDECount is the number of FDEs an .eh_frame_hdr's search table lists;
// ok is false when the header has no table. mold writes a header with an
// empty table and an eh_frame_ptr at address 0 into programs that have no
// .eh_frame: followed, it reads the ELF header as CFI.
func HdrFDECount(hdr []byte, hdrAddr uint64, a Arch) (n uint64, ok bool) {
	if len(hdr) < 4 || hdr[0] != 1 || hdr[2] == dwEHPEomit {
		return 0, false
	}
	r := reader{b: hdr, off: 4, order: a.Order, ptr: a.PtrSize}
	if _, err := r.encoded(hdr[1], hdrAddr, hdrAddr, nil); err != nil {
		return 0, false
	}
	n, err := r.encoded(hdr[2], hdrAddr, hdrAddr, nil)
	return n, err == nil
}
