package zstdenc

import (
	"encoding/binary"
	"math/bits"
)

// XXH64 primes (xxHash specification, "XXH64 algorithm description").
const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
	xxPrime3 uint64 = 1609587929392839161
	xxPrime4 uint64 = 9650029242287828579
	xxPrime5 uint64 = 2870177450012600261
)

// xxhash64 is XXH64 of p with seed 0: a frame's Content_Checksum is its
// low 32 bits (RFC 8878 §3.1.1).
func xxhash64(p []byte) uint64 {
	var seed uint64
	n := len(p)
	var h uint64
	if n >= 32 {
		v1 := seed + xxPrime1 + xxPrime2
		v2 := seed + xxPrime2
		v3 := seed
		v4 := seed - xxPrime1
		for len(p) >= 32 {
			v1 = xxRound(v1, binary.LittleEndian.Uint64(p))
			v2 = xxRound(v2, binary.LittleEndian.Uint64(p[8:]))
			v3 = xxRound(v3, binary.LittleEndian.Uint64(p[16:]))
			v4 = xxRound(v4, binary.LittleEndian.Uint64(p[24:]))
			p = p[32:]
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = xxMerge(h, v1)
		h = xxMerge(h, v2)
		h = xxMerge(h, v3)
		h = xxMerge(h, v4)
	} else {
		h = seed + xxPrime5
	}
	h += uint64(n)
	for ; len(p) >= 8; p = p[8:] {
		h ^= xxRound(0, binary.LittleEndian.Uint64(p))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(p) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(p)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		p = p[4:]
	}
	for _, b := range p {
		h ^= uint64(b) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

func xxRound(acc, lane uint64) uint64 {
	return bits.RotateLeft64(acc+lane*xxPrime2, 31) * xxPrime1
}

func xxMerge(h, v uint64) uint64 {
	return (h^xxRound(0, v))*xxPrime1 + xxPrime4
}
