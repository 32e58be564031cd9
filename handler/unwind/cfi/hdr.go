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
