package zstdenc

import (
	"encoding/binary"
	"math/bits"
)

const (
	tableBits = 12 // hash table of 4096 positions: 16 KiB
	minMatch  = 4
	hashLen   = 5 // bytes hashed: 4 finds more, shorter matches; 6 and up fewer
	// skipLog: after 1<<skipLog literals without a match the search steps
	// two bytes at a time, then three, ...: incompressible input goes fast.
	skipLog = 6
)

// matcher is an LZ77 match finder over one frame's input: a hash of the
// hashLen bytes at a position maps to the last position that had them.
type matcher struct {
	table [1 << tableBits]uint32
	rep   [3]uint32 // repeat offsets as a decoder tracks them (§3.1.2.5)
}

// hashAt hashes the hashLen bytes at src[i:], which has 8 bytes.
func hashAt(src []byte, i int) uint32 {
	return uint32(binary.LittleEndian.Uint64(src[i:]) << (64 - 8*hashLen) * 0x9e3779b97f4a7c15 >> (64 - tableBits))
}

// sequences appends to seqs and lits the sequences that encode
// src[start:end], with matches reaching back at most maxDist bytes (into
// earlier blocks too); lits gets every literal, the trailing ones too.
// The parse is greedy with one step of lookahead: a match is put off by a
// byte when the next position starts a longer one.
func (m *matcher) sequences(src []byte, start, end int, maxDist uint32, seqs []seq, lits []byte) ([]seq, []byte) {
	anchor, i := start, start
	for i+8 <= end {
		dist, n := m.find(src, i, anchor, end, maxDist)
		if n == 0 {
			i += 1 + (i-anchor)>>skipLog
			continue
		}
		for i+9 <= end {
			d, k := m.find(src, i+1, anchor, end, maxDist)
			if k <= n {
				break
			}
			i, dist, n = i+1, d, k
		}
		ref := i - int(dist)
		for i > anchor && ref > 0 && src[i-1] == src[ref-1] {
			i--
			ref--
			n++
		}
		lits = append(lits, src[anchor:i]...)
		seqs = append(seqs, seq{litLen: uint32(i - anchor), matchLen: uint32(n), offVal: m.offsetValue(dist, i > anchor)})
		i += n
		anchor = i
		if i-2 >= start && i+6 <= end {
			m.table[hashAt(src, i-2)] = uint32(i - 2)
		}
	}
	return seqs, append(lits, src[anchor:end]...)
}

// find returns the longer of the matches at i that the hash table and the
// last offset offer (n is 0 for none), and enters i in the table.
func (m *matcher) find(src []byte, i, anchor, end int, maxDist uint32) (dist uint32, n int) {
	h := hashAt(src, i)
	cand := m.table[h]
	m.table[h] = uint32(i)
	cur := binary.LittleEndian.Uint32(src[i:])
	if d := uint32(i) - cand; d != 0 && d <= maxDist && binary.LittleEndian.Uint32(src[i-int(d):]) == cur {
		dist, n = d, minMatch+matchLen(src[i+minMatch:end], src[i-int(d)+minMatch:])
	}
	// With literals before it, a match at the last offset costs the fewest
	// bits (Offset_Value 1): it wins ties.
	if r := m.rep[0]; i > anchor && int(r) <= i && binary.LittleEndian.Uint32(src[i-int(r):]) == cur {
		if k := minMatch + matchLen(src[i+minMatch:end], src[i-int(r)+minMatch:]); k >= n {
			dist, n = r, k
		}
	}
	return dist, n
}

// matchLen is the length of the common prefix of a and b (len(a) ≤ len(b)).
func matchLen(a, b []byte) int {
	n := 0
	for len(a)-n >= 8 {
		if x := binary.LittleEndian.Uint64(a[n:]) ^ binary.LittleEndian.Uint64(b[n:]); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		n += 8
	}
	for n < len(a) && a[n] == b[n] {
		n++
	}
	return n
}

// offsetValue codes a match distance as an Offset_Value and updates the
// repeat offsets as a decoder will (RFC 8878 §3.1.2.5). With literals
// before the match, values 1-3 name the three repeat offsets; without,
// they name the second, the third, and the first minus one.
func (m *matcher) offsetValue(dist uint32, withLits bool) uint32 {
	r := &m.rep
	v := uint32(1) // a value one lower names the same slot without literals
	if !withLits {
		v = 0
	}
	switch {
	case withLits && dist == r[0]:
		return 1
	case dist == r[1]:
		r[0], r[1] = r[1], r[0]
		return v + 1
	case dist == r[2]:
		r[0], r[1], r[2] = r[2], r[0], r[1]
		return v + 2
	case !withLits && dist == r[0]-1:
		v = 3
	default:
		v = dist + 3
	}
	r[0], r[1], r[2] = dist, r[0], r[1]
	return v
}
