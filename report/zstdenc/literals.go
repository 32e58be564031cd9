package zstdenc

// Literals_Block_Type (RFC 8878 §3.1.1.3.1.1).
const (
	litRaw        = 0
	litRLE        = 1
	litCompressed = 2
)

// appendLiterals appends a Literals_Section (RFC 8878 §3.1.1.3.1) for
// lits: Huffman-coded when that is smaller, RLE when every literal is the
// same byte, raw otherwise. h is scratch space.
func appendLiterals(dst, lits []byte, h *huffCode) []byte {
	var count [256]uint32
	last := 0
	for _, b := range lits {
		count[b]++
		last = max(last, int(b))
	}
	if len(lits) > 1 && int(count[lits[0]]) == len(lits) {
		return append(appendRawHeader(dst, litRLE, len(lits)), lits[0])
	}
	// The direct weight form holds symbols up to 128; ASCII text fits.
	// Below a few dozen literals the tree costs more than it saves.
	if len(lits) >= 32 && last <= 128 {
		start := len(dst)
		if out, ok := appendHuffman(dst, lits, &count, last, h); ok && len(out)-start < len(lits)+rawHeaderSize(len(lits)) {
			return out
		}
		dst = dst[:start]
	}
	return append(appendRawHeader(dst, litRaw, len(lits)), lits...)
}

// appendRawHeader appends the header of raw or RLE literals: 5, 12 or 20
// bits of Regenerated_Size.
func appendRawHeader(dst []byte, typ byte, n int) []byte {
	switch {
	case n < 32:
		return append(dst, typ|byte(n)<<3)
	case n < 4096:
		return append(dst, typ|1<<2|byte(n)<<4, byte(n>>4))
	default:
		return append(dst, typ|3<<2|byte(n)<<4, byte(n>>4), byte(n>>12))
	}
}

func rawHeaderSize(n int) int {
	switch {
	case n < 32:
		return 1
	case n < 4096:
		return 2
	default:
		return 3
	}
}

// appendHuffman appends compressed literals: one stream when there are
// fewer than 1024 (the 10-bit sizes of Size_Format 00), else four
// streams behind a jump table (§3.1.1.3.1.6). It fails when the
// compressed size does not fit the header, which only happens to literals
// that do not compress.
func appendHuffman(dst, lits []byte, count *[256]uint32, last int, h *huffCode) ([]byte, bool) {
	h.build(count, last)
	n := len(lits)
	var hdr, sizeBits int // header length; bits of each size in it
	var format byte
	switch {
	case n < 1024:
		hdr, sizeBits, format = 3, 10, 0
	case n < 16384:
		hdr, sizeBits, format = 4, 14, 2
	default:
		hdr, sizeBits, format = 5, 18, 3
	}
	start := len(dst)
	dst = append(dst, make([]byte, hdr)...)
	dst = h.appendTree(dst)
	if format == 0 {
		dst = h.appendStream(dst, lits)
	} else {
		seg := (n + 3) / 4
		jump := len(dst)
		dst = append(dst, 0, 0, 0, 0, 0, 0)
		prev := len(dst)
		for i := 0; i < 4; i++ {
			dst = h.appendStream(dst, lits[min(i*seg, n):min((i+1)*seg, n)])
			if i < 3 {
				size := len(dst) - prev
				dst[jump+2*i], dst[jump+2*i+1] = byte(size), byte(size>>8)
				prev = len(dst)
			}
		}
	}
	csize := len(dst) - start - hdr
	if csize >= 1<<sizeBits {
		return dst, false
	}
	// Literals_Block_Type, Size_Format, Regenerated_Size, Compressed_Size.
	v := uint64(litCompressed) | uint64(format)<<2 | uint64(n)<<4 | uint64(csize)<<(4+sizeBits)
	for i := 0; i < hdr; i++ {
		dst[start+i] = byte(v >> (8 * i))
	}
	return dst, true
}
