// Package zstdenc writes Zstandard frames (RFC 8878) that any decoder
// reads: the handler's own encoder, a few KiB of code where a general
// library links every compression level.
//
// A frame holds its content size and checksum. Blocks are compressed by
// a greedy LZ77 with one byte of lookahead (hash table of 4096 positions,
// matches of at least 4 bytes, repeat offsets), with sequences coded in the predefined FSE
// distributions and literals Huffman-coded when that pays and every
// literal is below 129 (text, JSON); a block that does not shrink is
// stored raw, or as one byte when it repeats one. Memory is bounded by
// the block size (tens of KiB); there are no goroutines and the output
// depends on the input alone.
package zstdenc

import "encoding/binary"

const (
	// blockSize is the most input one block holds: the format allows
	// 128 KiB; smaller blocks bound the encoder's buffers.
	blockSize = 32 << 10
	// windowLog: inputs up to 1<<windowLog bytes are one segment (the
	// window is the whole input); longer ones declare this window and
	// matches stay within it.
	windowLog = 20
)

// Block_Type (RFC 8878 §3.1.1.2).
const (
	blockRaw        = 0
	blockRLE        = 1
	blockCompressed = 2
)

// Magic starts every zstd frame (RFC 8878 §3.1.1).
const Magic = "\x28\xb5\x2f\xfd"

// Compress appends to dst one zstd frame that holds src, with its
// content size and checksum, and returns the extended slice.
func Compress(dst, src []byte) []byte {
	dst = appendFrameHeader(dst, len(src))
	e := encoder{m: matcher{rep: [3]uint32{1, 4, 8}}}
	maxDist := uint32(1<<windowLog - 1)
	if len(src) <= 1<<windowLog {
		maxDist = uint32(len(src))
	}
	for start := 0; ; start += blockSize {
		end := min(start+blockSize, len(src))
		dst = e.appendBlock(dst, src, start, end, maxDist, end == len(src))
		if end == len(src) {
			break
		}
	}
	return binary.LittleEndian.AppendUint32(dst, uint32(xxhash64(src)))
}

// appendFrameHeader writes the magic number and a Frame_Header (RFC 8878
// §3.1.1.1) with Content_Checksum_flag set and Frame_Content_Size.
func appendFrameHeader(dst []byte, n int) []byte {
	dst = append(dst, Magic...)
	const checksum = 1 << 2
	if n <= 1<<windowLog {
		// Single_Segment_flag: no Window_Descriptor, the window is the content.
		switch {
		case n < 256:
			return append(dst, 0<<6|1<<5|checksum, byte(n))
		case n < 256+1<<16:
			return binary.LittleEndian.AppendUint16(append(dst, 1<<6|1<<5|checksum), uint16(n-256))
		default:
			return binary.LittleEndian.AppendUint32(append(dst, 2<<6|1<<5|checksum), uint32(n))
		}
	}
	// Window_Descriptor: Exponent windowLog-10, Mantissa 0.
	if uint64(n) < 1<<32 {
		return binary.LittleEndian.AppendUint32(append(dst, 2<<6|checksum, (windowLog-10)<<3), uint32(n))
	}
	return binary.LittleEndian.AppendUint64(append(dst, 3<<6|checksum, (windowLog-10)<<3), uint64(n))
}

// encoder holds the state of one frame's blocks.
type encoder struct {
	m    matcher
	seqs []seq
	lits []byte
	huff huffCode
}

// appendBlock appends the block for src[start:end]: compressed when that
// is smaller, else RLE or raw.
func (e *encoder) appendBlock(dst, src []byte, start, end int, maxDist uint32, last bool) []byte {
	b := src[start:end]
	hdr := uint32(0)
	if last {
		hdr = 1
	}
	if len(b) > 1 && allSame(b) {
		return append(appendBlockHeader(dst, hdr|blockRLE<<1|uint32(len(b))<<3), b[0])
	}
	if len(b) > 16 {
		rep := e.m.rep
		e.seqs, e.lits = e.m.sequences(src, start, end, maxDist, e.seqs[:0], e.lits[:0])
		at := len(dst)
		dst = appendBlockHeader(dst, 0)
		dst = appendLiterals(dst, e.lits, &e.huff)
		dst = appendSequences(dst, e.seqs)
		if size := len(dst) - at - 3; size < len(b) {
			h := hdr | blockCompressed<<1 | uint32(size)<<3
			dst[at], dst[at+1], dst[at+2] = byte(h), byte(h>>8), byte(h>>16)
			return dst
		}
		dst = dst[:at]
		e.m.rep = rep // the decoder never sees these sequences
	}
	return append(appendBlockHeader(dst, hdr|blockRaw<<1|uint32(len(b))<<3), b...)
}

func appendBlockHeader(dst []byte, h uint32) []byte {
	return append(dst, byte(h), byte(h>>8), byte(h>>16))
}

func allSame(b []byte) bool {
	for _, c := range b[1:] {
		if c != b[0] {
			return false
		}
	}
	return true
}
