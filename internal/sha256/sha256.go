// Package sha256 is SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for
// the board binaries. The handler hashes only to name things: a code id
// for files without a build ID, a rate-limit key per executable, a report
// id when getrandom would block, and the device id (an HMAC keyed with the
// machine id, so the machine id never leaves the board). crypto/sha256
// does the same work, but from Go 1.24 it links Go's FIPS 140 module (its
// self-tests, DRBG, AES and SHA-3): 256 KiB of the Go 1.26 handler, 64 KiB
// with Go 1.22 (docs/design.md, "Footprint"). This is the plain
// algorithm, checked against crypto/sha256 and crypto/hmac by the tests
// and a fuzz target. Not for secrets: nothing here is constant-time.
package sha256

import (
	"encoding/binary"
	"math/bits"
)

// Size is a digest's length and BlockSize the block's, in bytes.
const (
	Size      = 32
	BlockSize = 64
)

// initial is H(0), FIPS 180-4 §5.3.3: the first 32 bits of the fractional
// parts of the square roots of the first eight primes.
var initial = [8]uint32{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// k are the round constants, §4.2.2: the first 32 bits of the fractional
// parts of the cube roots of the first 64 primes.
var k = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// Digest is a running SHA-256; the zero value is not ready: use New.
// It is a hash.Hash.
type Digest struct {
	h   [8]uint32
	buf [BlockSize]byte
	nb  int    // bytes in buf
	n   uint64 // bytes written in all
}

// New returns a Digest ready for writing.
func New() *Digest {
	d := new(Digest)
	d.Reset()
	return d
}

// Reset starts the digest over.
func (d *Digest) Reset() { *d = Digest{h: initial} }

// Size and BlockSize are the constants, for hash.Hash.
func (d *Digest) Size() int      { return Size }
func (d *Digest) BlockSize() int { return BlockSize }

// Write adds p; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	n := len(p)
	d.n += uint64(n)
	if d.nb > 0 {
		c := copy(d.buf[d.nb:], p)
		d.nb += c
		p = p[c:]
		if d.nb < BlockSize {
			return n, nil
		}
		d.block(d.buf[:])
		d.nb = 0
	}
	for len(p) >= BlockSize {
		d.block(p[:BlockSize])
		p = p[BlockSize:]
	}
	d.nb = copy(d.buf[:], p)
	return n, nil
}

// Sum appends the digest of what was written to b; d is unchanged.
func (d *Digest) Sum(b []byte) []byte {
	e := *d
	// Padding, §5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the
	// message's length in bits, big-endian.
	var pad [BlockSize + 8]byte
	pad[0] = 0x80
	np := 1 + (BlockSize+55-int(e.n%BlockSize))%BlockSize
	binary.BigEndian.PutUint64(pad[np:], e.n<<3)
	e.Write(pad[:np+8])
	for _, v := range e.h {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

// block runs the compression function over one 64-byte block (§6.2.2).
func (d *Digest) block(p []byte) {
	var w [64]uint32
	for i := 0; i < 16; i++ {
		w[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	for i := 16; i < 64; i++ {
		s0 := bits.RotateLeft32(w[i-15], -7) ^ bits.RotateLeft32(w[i-15], -18) ^ w[i-15]>>3
		s1 := bits.RotateLeft32(w[i-2], -17) ^ bits.RotateLeft32(w[i-2], -19) ^ w[i-2]>>10
		w[i] = w[i-16] + s0 + w[i-7] + s1
	}
	a, b, c, dd, e, f, g, h := d.h[0], d.h[1], d.h[2], d.h[3], d.h[4], d.h[5], d.h[6], d.h[7]
	for i := 0; i < 64; i++ {
		t1 := h + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) + (e&f ^ ^e&g) + k[i] + w[i]
		t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) + (a&b ^ a&c ^ b&c)
		h, g, f, e, dd, c, b, a = g, f, e, dd+t1, c, b, a, t1+t2
	}
	d.h[0] += a
	d.h[1] += b
	d.h[2] += c
	d.h[3] += dd
	d.h[4] += e
	d.h[5] += f
	d.h[6] += g
	d.h[7] += h
}

// Sum256 returns the SHA-256 digest of data.
func Sum256(data []byte) [Size]byte {
	d := New()
	d.Write(data)
	var s [Size]byte
	d.Sum(s[:0])
	return s
}

// HMAC is HMAC-SHA256 (RFC 2104) keyed with key: a hash.Hash whose Sum is
// the MAC of what was written.
type HMAC struct {
	inner, outer Digest
}

// NewHMAC returns an HMAC-SHA256 keyed with key.
func NewHMAC(key []byte) *HMAC {
	if len(key) > BlockSize {
		s := Sum256(key)
		key = s[:]
	}
	var ipad, opad [BlockSize]byte
	copy(ipad[:], key)
	copy(opad[:], key)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	m := &HMAC{}
	m.inner.Reset()
	m.inner.Write(ipad[:])
	m.outer.Reset()
	m.outer.Write(opad[:])
	return m
}

// Write adds p to the message.
func (m *HMAC) Write(p []byte) (int, error) { return m.inner.Write(p) }

// Sum appends the MAC of what was written to b; m is unchanged.
func (m *HMAC) Sum(b []byte) []byte {
	o := m.outer
	o.Write(m.inner.Sum(nil))
	return o.Sum(b)
}
