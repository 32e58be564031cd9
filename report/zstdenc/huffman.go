package zstdenc

// maxHuffBits bounds a Huffman code's length (RFC 8878 §4.2.1:
// Max_Number_of_Bits is at most 11).
const maxHuffBits = 11

// huffCode is a prefix code for literals 0..last.
type huffCode struct {
	last    int // largest symbol
	maxBits uint8
	nbits   [256]uint8 // 0: symbol absent
	code    [256]uint16
}

// build makes a length-limited Huffman code for the counts of symbols
// 0..last; at least two symbols must occur.
func (h *huffCode) build(count *[256]uint32, last int) {
	h.last = last
	h.nbits = [256]uint8{}
	// Leaves by increasing count (then symbol), then the usual two-queue
	// construction: internal nodes are made in nondecreasing weight order.
	var leaf [256]uint8
	n := 0
	for s := 0; s <= last; s++ {
		if count[s] == 0 {
			continue
		}
		j := n
		for ; j > 0 && count[leaf[j-1]] > count[s]; j-- {
			leaf[j] = leaf[j-1]
		}
		leaf[j] = uint8(s)
		n++
	}
	var weight [511]uint64
	var parent [511]int16
	for i := 0; i < n; i++ {
		weight[i] = uint64(count[leaf[i]])
	}
	nodes, li, ni := n, 0, n
	pick := func() int {
		if li < n && (ni >= nodes || weight[li] <= weight[ni]) {
			li++
			return li - 1
		}
		ni++
		return ni - 1
	}
	for nodes < 2*n-1 {
		a, b := pick(), pick()
		weight[nodes] = weight[a] + weight[b]
		parent[a], parent[b] = int16(nodes), int16(nodes)
		nodes++
	}
	// Depths top-down: a parent always has a higher index than its children.
	var depth [511]uint8
	for i := nodes - 2; i >= 0; i-- {
		depth[i] = depth[parent[i]] + 1
	}
	for i := 0; i < n; i++ {
		h.nbits[leaf[i]] = depth[i]
	}
	h.limit(count)
	h.assign()
}

// limit shortens codes longer than maxHuffBits, then lengthens others
// until the Kraft sum is 1 again (a code must be complete: the decoder
// derives the last weight from the others, §4.2.1.3).
func (h *huffCode) limit(count *[256]uint32) {
	const L = maxHuffBits
	long := false
	for s := 0; s <= h.last; s++ {
		if h.nbits[s] > L {
			h.nbits[s] = L
			long = true
		}
	}
	if !long {
		return
	}
	kraft := 0 // in units of 2^-L
	for s := 0; s <= h.last; s++ {
		if h.nbits[s] > 0 {
			kraft += 1 << (L - h.nbits[s])
		}
	}
	// Too much: lengthen the rarest of the longest codes below L, which
	// costs the least.
	for kraft > 1<<L {
		best := -1
		for s := 0; s <= h.last; s++ {
			b := h.nbits[s]
			if b == 0 || b >= L {
				continue
			}
			if best < 0 || b > h.nbits[best] || b == h.nbits[best] && count[s] < count[best] {
				best = s
			}
		}
		h.nbits[best]++
		kraft -= 1 << (L - h.nbits[best])
	}
	// Too little: shorten the most frequent code whose gain still fits.
	// The gap is a multiple of the longest code's gain, so one fits.
	for kraft < 1<<L {
		best := -1
		for s := 0; s <= h.last; s++ {
			b := h.nbits[s]
			if b <= 1 || kraft+1<<(L-b) > 1<<L {
				continue
			}
			if best < 0 || count[s] > count[best] {
				best = s
			}
		}
		kraft += 1 << (L - h.nbits[best])
		h.nbits[best]--
	}
}

// assign gives the canonical codes a decoder rebuilds from the weights
// (§4.2.1.4): longest codes first, and within a length by symbol value,
// counting up from zero.
func (h *huffCode) assign() {
	h.maxBits = 0
	for s := 0; s <= h.last; s++ {
		h.maxBits = max(h.maxBits, h.nbits[s])
	}
	next := 0 // in units of 2^-maxBits
	for b := h.maxBits; b > 0; b-- {
		for s := 0; s <= h.last; s++ {
			if h.nbits[s] == b {
				h.code[s] = uint16(next >> (h.maxBits - b))
				next += 1 << (h.maxBits - b)
			}
		}
	}
}

// weight is the weight that stands for symbol s's code length (§4.2.1).
func (h *huffCode) weight(s int) byte {
	if h.nbits[s] == 0 {
		return 0
	}
	return h.maxBits + 1 - h.nbits[s]
}

// appendTree appends the Huffman tree description in the direct form: a
// header byte 127 + N, then the weights of symbols 0..N-1, two per byte
// (§4.2.1.2). The last symbol's weight is implied. It needs N ≤ 128.
func (h *huffCode) appendTree(dst []byte) []byte {
	n := h.last
	dst = append(dst, byte(127+n))
	for s := 0; s < n; s += 2 {
		b := h.weight(s) << 4
		if s+1 < n {
			b |= h.weight(s + 1)
		}
		dst = append(dst, b)
	}
	return dst
}

// appendStream appends one Huffman-coded stream of lits: the decoder reads
// it backward, so the last literal goes in first.
func (h *huffCode) appendStream(dst, lits []byte) []byte {
	w := bitWriter{out: dst}
	for i := len(lits) - 1; i >= 0; i-- {
		s := lits[i]
		w.add(uint64(h.code[s]), uint(h.nbits[s]))
	}
	return w.close()
}
