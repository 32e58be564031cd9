package zstdenc

// bitWriter appends a bitstream read backward (RFC 8878 §4.1 for FSE,
// §4.2.2 for Huffman): fields go in little-endian order, lowest bit first,
// and the stream ends with a 1 bit that marks where the reader starts.
// Whatever is written last is read first.
type bitWriter struct {
	out []byte
	acc uint64 // pending bits, lowest first
	n   uint   // number of pending bits, < 32 between calls
}

// add appends the low nb bits of v (nb ≤ 32; v has no bits above nb).
func (w *bitWriter) add(v uint64, nb uint) {
	w.acc |= v << w.n
	w.n += nb
	if w.n >= 32 {
		w.out = append(w.out, byte(w.acc), byte(w.acc>>8), byte(w.acc>>16), byte(w.acc>>24))
		w.acc >>= 32
		w.n -= 32
	}
}

// close writes the end mark and pads the last byte with zeros.
func (w *bitWriter) close() []byte {
	w.add(1, 1)
	for w.n > 0 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.n -= min(w.n, 8)
	}
	w.acc = 0
	return w.out
}
