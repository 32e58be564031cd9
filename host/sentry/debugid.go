package sentry

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// DebugID is the debug_id Sentry derives from an ELF file's GNU build ID
// (its code_id), as sentry-cli and Symbolicator compute it for uploaded
// files: the first 16 bytes of the build ID, zero-padded when it is
// shorter, read as a little-endian GUID. That is, the first 4-byte group
// and the next two 2-byte groups are byte-swapped to big endian, the last
// 8 bytes are kept as they are, and the result is written as a hyphenated
// UUID. Build IDs longer than 16 bytes (SHA-1's 20) are truncated: the
// mapping is lossy, which is why the event also carries the code_id.
//
// The UUID has no age appendix: Sentry's debug identifiers append
// "-{age}" in hex only for a non-zero age, which ELF files do not have
// (PDBs do). A Breakpad-style identifier of the same file is this UUID in
// upper case without hyphens followed by "0", the age.
//
// The swap is the one for little-endian ELF files, every architecture
// unwound supports (x86_64, aarch64, arm, riscv64); Sentry leaves a
// big-endian file's bytes in order.
func DebugID(buildID string) (string, error) {
	b, err := hex.DecodeString(strings.TrimSpace(buildID))
	if err != nil {
		return "", fmt.Errorf("build id %q: %w", buildID, err)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("build id is empty")
	}
	var g [16]byte
	copy(g[:], b)
	g[0], g[1], g[2], g[3] = g[3], g[2], g[1], g[0]
	g[4], g[5] = g[5], g[4]
	g[6], g[7] = g[7], g[6]
	return formatUUID(g), nil
}

func formatUUID(g [16]byte) string {
	h := hex.EncodeToString(g[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
