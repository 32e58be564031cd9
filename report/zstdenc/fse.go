package zstdenc

import "math/bits"

// fseTable is what an encoder needs of an FSE distribution (RFC 8878
// §4.1.1): for every symbol, its count and, in increasing order, the
// decoding-table states that decode to it.
type fseTable struct {
	log   uint
	count []uint16 // a "less than 1" probability (-1) counts 1
	first []uint16 // index into cells of each symbol's first state
	cells []uint16
}

// newFSETable spreads a normalized distribution over the decoding table
// the way a decoder does (RFC 8878 §4.1.1): "less than 1" symbols take
// the last cells, one each, from the end down; the others are placed with
// the step (size/2 + size/8 + 3), skipping those cells.
func newFSETable(dist []int16, log uint) *fseTable {
	size := 1 << log
	sym := make([]uint16, size)
	high := size - 1
	for s, p := range dist {
		if p == -1 {
			sym[high] = uint16(s)
			high--
		}
	}
	step := size>>1 + size>>3 + 3
	pos := 0
	for s, p := range dist {
		for i := 0; i < int(p); i++ {
			sym[pos] = uint16(s)
			pos = (pos + step) & (size - 1)
			for pos > high {
				pos = (pos + step) & (size - 1)
			}
		}
	}
	t := &fseTable{log: log, count: make([]uint16, len(dist)), first: make([]uint16, len(dist)), cells: make([]uint16, size)}
	n := 0
	for s, p := range dist {
		t.first[s] = uint16(n)
		t.count[s] = uint16(max(p, 1))
		n += int(t.count[s])
	}
	next := append([]uint16(nil), t.first...)
	for state, s := range sym {
		t.cells[next[s]] = uint16(state)
		next[s]++
	}
	return t
}

// fseState is the state of one FSE encoder: the decoder state the symbol
// encoded last starts from, plus the table size. Symbols are encoded last
// to first, so a decoder reading the stream backward meets them in order.
type fseState uint32

// start is the state that decodes symbol s: the last symbol of a stream
// needs no bits, as the decoder's initial state is written in full.
func (t *fseTable) start(s uint8) fseState {
	return fseState(t.cells[t.first[s]]) + 1<<t.log
}

// encode moves x to a state that decodes s and from which the decoder,
// reading nb bits, reaches the state in x. The k-th (from 0) state of a
// symbol with count c leaves by reading log - highbit(c+k) bits onto
// baseline ((c+k) << nb) - size (§4.1.1): so x + size, shifted right
// until it falls in [c, 2c), names that state and the bits shifted out
// are the ones to write.
func (t *fseTable) encode(w *bitWriter, x fseState, s uint8) fseState {
	c := uint32(t.count[s])
	nb := uint(bits.Len32(uint32(x)) - bits.Len32(c))
	if uint32(x)>>nb < c {
		nb--
	}
	w.add(uint64(uint32(x)&(1<<nb-1)), nb)
	k := uint32(x)>>nb - c
	return fseState(t.cells[uint32(t.first[s])+k]) + 1<<t.log
}

// final writes the decoder's initial state.
func (t *fseTable) final(w *bitWriter, x fseState) {
	w.add(uint64(uint32(x)-1<<t.log), t.log)
}

// The predefined distributions (RFC 8878 §3.1.1.3.2.2).
var (
	llTable = newFSETable([]int16{
		4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
		2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
		-1, -1, -1, -1}, 6)
	mlTable = newFSETable([]int16{
		1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
		-1, -1, -1, -1, -1}, 6)
	ofTable = newFSETable([]int16{
		1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1}, 5)
)
