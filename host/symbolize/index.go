package symbolize

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// The on-disk index keeps a debug file's DWARF sections inflated, so a
// later process reads them instead of inflating them again, which is most
// of a cold run's time. It is keyed by the GNU build ID and the sections'
// headers (a debug file rebuilt differently gets a new entry): a
// directory DIR/KEY/ with one file per section, written to a temporary
// directory and renamed, so a reader sees all of it or nothing.
func indexKey(buildID []byte, secs map[string]*elf.Section) string {
	h := sha256.New()
	for _, n := range dwarfSectionNames() {
		if s := secs[n]; s != nil {
			fmt.Fprintf(h, "%s %d %d %d %d\n", n, s.Offset, s.FileSize, s.Size, s.Flags)
		}
	}
	return hex.EncodeToString(buildID) + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// maxIndexed bounds the bytes one index entry may hold.
const maxIndexed = 1 << 30

func readIndex(dir string) map[string][]byte {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	dat := map[string][]byte{}
	total := int64(0)
	for _, de := range ents {
		n := de.Name()
		if !knownSection(n) {
			continue
		}
		info, err := de.Info()
		if err != nil || info.Size() > maxSection {
			return nil
		}
		if total += info.Size(); total > maxIndexed {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil
		}
		dat[n] = b
	}
	if dat["info"] == nil {
		return nil
	}
	return dat
}

func knownSection(n string) bool {
	for _, k := range dwarfSectionNames() {
		if n == k {
			return true
		}
	}
	return false
}

func writeIndex(dir string, dat map[string][]byte) {
	total := 0
	for _, b := range dat {
		total += len(b)
	}
	if total > maxIndexed {
		return
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	for n, b := range dat {
		if err := os.WriteFile(filepath.Join(tmp, n), b, 0o644); err != nil {
			return
		}
	}
	os.Chmod(tmp, 0o755)
	os.Rename(tmp, dir) // fails harmlessly when another process won
}
