package zstdenc

import (
	"math/rand"
	"testing"
)

// Known XXH64 values, seed 0 (xxHash's own test vectors and
// python-xxhash's documented example, which takes the 32-byte path).
func TestXXHash64Vectors(t *testing.T) {
	for in, want := range map[string]uint64{
		"":    0xef46db3751d8e999,
		"a":   0xd24ec4f1a98c6e5b,
		"abc": 0x44bc2cf5ad770999,
		"Nobody inspects the spammish repetition": 0xfbcea83c8a378bf1,
	} {
		if got := xxhash64([]byte(in)); got != want {
			t.Errorf("xxhash64(%q) = %#x, want %#x", in, got, want)
		}
	}
}

// Skewed counts (Fibonacci) make an unbounded Huffman tree deeper than
// 11: the code must be cut to 11 bits and stay complete.
func TestHuffmanLengthLimit(t *testing.T) {
	var count [256]uint32
	a, b := uint32(1), uint32(1)
	for s := 0; s < 30; s++ {
		count[s] = a
		a, b = b, a+b
	}
	var h huffCode
	h.build(&count, 29)
	kraft := 0
	for s := 0; s < 30; s++ {
		if h.nbits[s] == 0 || h.nbits[s] > maxHuffBits {
			t.Fatalf("symbol %d: %d bits", s, h.nbits[s])
		}
		kraft += 1 << (maxHuffBits - h.nbits[s])
	}
	if kraft != 1<<maxHuffBits {
		t.Errorf("Kraft sum %d/%d", kraft, 1<<maxHuffBits)
	}
	// The more frequent symbol never has the longer code.
	for s := 1; s < 30; s++ {
		if h.nbits[s] > h.nbits[s-1] {
			t.Errorf("symbol %d (count %d): %d bits, symbol %d (count %d): %d", s, count[s], h.nbits[s], s-1, count[s-1], h.nbits[s-1])
		}
	}
}

// The canonical code is prefix-free and the one a decoder derives from
// the weights: each code fills its share of a 2^maxBits table, longest
// codes (then lower symbols) first.
func TestHuffmanCanonical(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		var count [256]uint32
		last := 1 + rng.Intn(128)
		for s := 0; s <= last; s++ {
			if rng.Intn(3) > 0 || s == last {
				count[s] = uint32(rng.Intn(1 << uint(rng.Intn(16))))
			}
		}
		count[last] = max(count[last], 1)
		count[0] = max(count[0], 1)
		var h huffCode
		h.build(&count, last)
		next := 0
		for w := byte(1); w <= h.maxBits; w++ {
			for s := 0; s <= last; s++ {
				if h.weight(s) != w {
					continue
				}
				if int(h.code[s])<<(w-1) != next {
					t.Fatalf("round %d: symbol %d weight %d code %b, want table slot %d", round, s, w, h.code[s], next)
				}
				next += 1 << (w - 1)
			}
		}
		if next != 1<<h.maxBits {
			t.Fatalf("round %d: the codes fill %d of %d slots", round, next, 1<<h.maxBits)
		}
	}
}

// The encoder's view of the predefined tables: every state decodes to
// the symbol it was reached for, and every state is some symbol's.
func TestFSETablesCoverEveryState(t *testing.T) {
	for _, tb := range []*fseTable{llTable, mlTable, ofTable} {
		seen := make([]bool, 1<<tb.log)
		total := 0
		for s := range tb.count {
			for k := 0; k < int(tb.count[s]); k++ {
				st := tb.cells[int(tb.first[s])+k]
				if seen[st] {
					t.Fatalf("log %d: state %d twice", tb.log, st)
				}
				seen[st] = true
				total++
			}
		}
		if total != 1<<tb.log {
			t.Errorf("log %d: %d states, want %d", tb.log, total, 1<<tb.log)
		}
	}
}

// Every length maps to the code whose range holds it.
func TestLengthCodes(t *testing.T) {
	for n := uint32(0); n < 1<<17; n++ {
		c := llCode(n)
		if n < llBase[c] || n-llBase[c] >= 1<<llBits[c] {
			t.Fatalf("literal length %d: code %d", n, c)
		}
		if n < 3 {
			continue
		}
		c = mlCode(n)
		if n < mlBase[c] || n-mlBase[c] >= 1<<mlBits[c] {
			t.Fatalf("match length %d: code %d", n, c)
		}
	}
}
