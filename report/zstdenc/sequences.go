package zstdenc

import "math/bits"

// seq is one sequence (RFC 8878 §3.1.1.3.2): litLen literals, then
// matchLen bytes copied from offVal's offset. offVal is the
// Offset_Value: 1-3 name a repeat offset, above 3 it is offset + 3.
type seq struct {
	litLen, matchLen, offVal uint32
}

// Baselines and extra bits of the literal length and match length codes
// (RFC 8878 §3.1.1.3.2.1.1).
var (
	llBase = [36]uint32{
		0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
		8192, 16384, 32768, 65536}
	llBits = [36]uint8{
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12,
		13, 14, 15, 16}
	mlBase = [53]uint32{
		3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
		19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
		35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
		4099, 8195, 16387, 32771, 65539}
	mlBits = [53]uint8{
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
		12, 13, 14, 15, 16}
)

// llCode is the literal length code of n. From 64 on a code's baseline is
// a power of two (code 25 is 64); below, a table says.
func llCode(n uint32) uint8 {
	if n >= 64 {
		return uint8(bits.Len32(n)-1) + 19
	}
	return llCodes[n]
}

// mlCode is the match length code of n ≥ 3. From 131 on, n - 3 has a
// power-of-two baseline (code 43 is 128 + 3); below, a table says.
func mlCode(n uint32) uint8 {
	if n >= 131 {
		return uint8(bits.Len32(n-3)-1) + 36
	}
	return mlCodes[n]
}

var (
	llCodes = codeTable(llBase[:], 64)
	mlCodes = codeTable(mlBase[:], 131)
)

// codeTable maps each n below size to the last code whose baseline is ≤ n.
func codeTable(base []uint32, size int) []uint8 {
	t := make([]uint8, size)
	c := 0
	for n := range t {
		for c+1 < len(base) && base[c+1] <= uint32(n) {
			c++
		}
		t[n] = uint8(c)
	}
	return t
}

// appendSequences appends a Sequences_Section (RFC 8878 §3.1.1.3.2) for
// seqs, all three codes in Predefined_Mode.
func appendSequences(dst []byte, seqs []seq) []byte {
	n := len(seqs)
	switch {
	case n < 128:
		dst = append(dst, byte(n))
	case n < 0x7f00:
		dst = append(dst, byte(n>>8)+128, byte(n))
	default:
		dst = append(dst, 255, byte(n-0x7f00), byte((n-0x7f00)>>8))
	}
	if n == 0 {
		return dst
	}
	dst = append(dst, 0) // Symbol_Compression_Modes: all Predefined_Mode
	// A decoder reads, backward: the three initial states (LL, OF, ML);
	// then per sequence the extra bits of OF, ML and LL, and, except after
	// the last sequence, the state updates of LL, ML and OF
	// (§3.1.1.3.2.2). Written here in the opposite order, last sequence
	// first.
	w := bitWriter{out: dst}
	s := seqs[n-1]
	llc, mlc, ofc := llCode(s.litLen), mlCode(s.matchLen), uint8(bits.Len32(s.offVal)-1)
	ll, ml, of := llTable.start(llc), mlTable.start(mlc), ofTable.start(ofc)
	for i := n - 1; ; {
		w.add(uint64(s.litLen-llBase[llc]), uint(llBits[llc]))
		w.add(uint64(s.matchLen-mlBase[mlc]), uint(mlBits[mlc]))
		w.add(uint64(s.offVal-1<<ofc), uint(ofc))
		i--
		if i < 0 {
			break
		}
		s = seqs[i]
		llc, mlc, ofc = llCode(s.litLen), mlCode(s.matchLen), uint8(bits.Len32(s.offVal)-1)
		of = ofTable.encode(&w, of, ofc)
		ml = mlTable.encode(&w, ml, mlc)
		ll = llTable.encode(&w, ll, llc)
	}
	mlTable.final(&w, ml)
	ofTable.final(&w, of)
	llTable.final(&w, ll)
	return w.close()
}
