// Package armor writes queue entries as checksummed text for boards whose
// only UART is the console (`unwound-uploader dump`) and reads them back
// (`unwound undump`). Every line is printable ASCII shorter than 100
// characters, carries its number and a CRC-32, and is found by its marker
// anywhere on the line, so timestamps a terminal logger adds, kernel
// messages between the lines and '\r' do no harm:
//
//	=UNWOUND-BEGIN v1 name=0000000042-1a2b3c4d.json.zst size=1234 sha256=<64 hex>
//	=UW 0001 <base64 of up to 48 bytes> <crc32 of the line's bytes, 8 hex>
//	...
//	=UNWOUND-END name=0000000042-1a2b3c4d.json.zst lines=26
//
// The host confirms each report it recovered with one line back to the
// board (`unwound extract` prints them; `unwound-uploader dump --remove`
// reads them and deletes only the entries whose name and sha256 match):
//
//	=UNWOUND-ACK name=0000000042-1a2b3c4d.json.zst sha256=<64 hex>
package armor

import (
	"bufio"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"

	"github.com/unwound-dev/unwound/internal/sha256"
)

const (
	ackMark   = "=UNWOUND-ACK "
	beginMark = "=UNWOUND-BEGIN v1 "
	lineMark  = "=UW "
	endMark   = "=UNWOUND-END "
	perLine   = 48
)

// Write writes one entry's armor.
func Write(w io.Writer, name string, data []byte) error {
	sum := sha256.Sum256(data)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%sname=%s size=%d sha256=%x\n", beginMark, name, len(data), sum)
	n := 0
	for off := 0; off < len(data); off += perLine {
		end := off + perLine
		if end > len(data) {
			end = len(data)
		}
		n++
		chunk := data[off:end]
		fmt.Fprintf(bw, "%s%04d %s %08x\n", lineMark, n, base64.StdEncoding.EncodeToString(chunk), crc32.ChecksumIEEE(chunk))
	}
	fmt.Fprintf(bw, "%sname=%s lines=%d\n", endMark, name, n)
	return bw.Flush()
}

// Block is one entry read back.
type Block struct {
	Name string
	Data []byte
	Err  error // nil when every line and the sha256 checked out
}

// Read parses every block in r. Text outside blocks is skipped; a block
// with a bad, missing or out-of-order line, or a wrong size or sha256,
// comes back with Err set.
func Read(r io.Reader) ([]Block, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Block
	var cur *Block
	var size, lines int
	var sum string
	fail := func(format string, args ...any) {
		if cur.Err == nil {
			cur.Err = fmt.Errorf("%s: "+format, append([]any{cur.Name}, args...)...)
		}
	}
	finish := func(endLines int) {
		if cur == nil {
			return
		}
		if cur.Err == nil {
			got := sha256.Sum256(cur.Data)
			switch {
			case endLines >= 0 && endLines != lines:
				fail("%d lines, the end line says %d", lines, endLines)
			case len(cur.Data) != size:
				fail("%d bytes, want %d", len(cur.Data), size)
			case hex.EncodeToString(got[:]) != sum:
				fail("sha256 mismatch")
			}
		}
		if cur.Err != nil {
			cur.Data = nil
		}
		out = append(out, *cur)
		cur = nil
	}
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r \t")
		if i := strings.Index(l, beginMark); i >= 0 {
			if cur != nil {
				fail("no end line")
				finish(-1)
			}
			cur = &Block{}
			lines, size, sum = 0, -1, ""
			for _, kv := range strings.Fields(l[i+len(beginMark):]) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "name":
					cur.Name = v
				case "size":
					size, _ = strconv.Atoi(v)
				case "sha256":
					sum = strings.ToLower(v)
				}
			}
			if cur.Name == "" || size < 0 || len(sum) != 64 || strings.ContainsAny(cur.Name, "/\\") {
				cur.Err = fmt.Errorf("bad begin line %q", l[i:])
			}
			continue
		}
		if cur == nil {
			continue
		}
		if i := strings.Index(l, endMark); i >= 0 {
			n := -1
			for _, kv := range strings.Fields(l[i+len(endMark):]) {
				if v, ok := strings.CutPrefix(kv, "lines="); ok {
					n, _ = strconv.Atoi(v)
				}
			}
			finish(n)
			continue
		}
		i := strings.Index(l, lineMark)
		if i < 0 {
			continue // a kernel message between our lines
		}
		f := strings.Fields(l[i+len(lineMark):])
		if len(f) != 3 {
			fail("line %d: malformed", lines+1)
			continue
		}
		num, err1 := strconv.Atoi(f[0])
		chunk, err2 := base64.StdEncoding.DecodeString(f[1])
		crc, err3 := strconv.ParseUint(f[2], 16, 32)
		if err1 != nil || err2 != nil || err3 != nil || uint32(crc) != crc32.ChecksumIEEE(chunk) {
			fail("line %d: checksum or encoding error", lines+1)
			continue
		}
		if num == lines {
			continue // the same line twice (a terminal that repeats)
		}
		if num != lines+1 {
			fail("line %d missing", lines+1)
			continue
		}
		lines = num
		cur.Data = append(cur.Data, chunk...)
	}
	if cur != nil {
		fail("no end line")
		finish(-1)
	}
	return out, sc.Err()
}

// Ack is the confirmation line for an entry the host recovered, without
// its newline.
func Ack(name string, data []byte) string {
	return fmt.Sprintf("%sname=%s sha256=%x", ackMark, name, sha256.Sum256(data))
}

// ParseAck finds a confirmation on a line (anything around it, as a
// console adds, is ignored) and returns the entry name and its sha256 in
// lower-case hex.
func ParseAck(line string) (name, sum string, ok bool) {
	i := strings.Index(line, ackMark)
	if i < 0 {
		return "", "", false
	}
	for _, kv := range strings.Fields(line[i+len(ackMark):]) {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "name":
			name = v
		case "sha256":
			sum = strings.ToLower(v)
		}
	}
	if name == "" || strings.ContainsAny(name, "/\\") || len(sum) != 64 {
		return "", "", false
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", "", false
	}
	return name, sum, true
}
