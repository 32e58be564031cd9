// Package le writes machine code for decoder tests: instruction words and
// halfwords as the little-endian bytes a program holds.
package le

import "encoding/binary"

// W32 is ws as little-endian 32-bit words.
func W32(ws ...uint32) []byte {
	var b []byte
	for _, w := range ws {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// H16 is hs as little-endian 16-bit halfwords (Thumb, RVC).
func H16(hs ...uint16) []byte {
	var b []byte
	for _, h := range hs {
		b = binary.LittleEndian.AppendUint16(b, h)
	}
	return b
}
