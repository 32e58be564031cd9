package armor

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRead: the parser never panics, and a block it accepts is exactly
// what its begin line promised (size and sha256), so a damaged console
// log can lose a report but never return a wrong one.
func FuzzRead(f *testing.F) {
	var one bytes.Buffer
	Write(&one, "0000000001-00000000.json.zst", []byte("a report's zstd bytes, more than one line of them: 0123456789abcdef"))
	f.Add(one.String())
	f.Add(strings.ReplaceAll(one.String(), "\n", "\r\n[  1.000000] usb 1-1: new device\r\n"))
	f.Add("root@board:~# unwound-uploader dump\n" + one.String() + "root@board:~# ")
	f.Add("=UNWOUND-BEGIN v1 name=x size=0 sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n=UNWOUND-END name=x lines=0\n")
	f.Add("=UNWOUND-BEGIN v1 name=../x size=-1\n=UW 0001 !!!! zz\n")
	f.Add(Ack("0000000001-00000000.json.zst", []byte("x")) + "\n")
	f.Fuzz(func(t *testing.T, log string) {
		blocks, err := Read(strings.NewReader(log))
		if err != nil {
			return
		}
		for _, b := range blocks {
			if b.Err != nil {
				if b.Data != nil {
					t.Fatal("a failed block kept data")
				}
				continue
			}
			if strings.ContainsAny(b.Name, "/\\") {
				t.Fatalf("name %q", b.Name)
			}
			// An accepted block writes back to armor that reads the same.
			var again bytes.Buffer
			Write(&again, b.Name, b.Data)
			bl, err := Read(&again)
			if err != nil || len(bl) != 1 || bl[0].Err != nil || !bytes.Equal(bl[0].Data, b.Data) {
				t.Fatalf("round trip: %v", err)
			}
		}
		for _, l := range strings.Split(log, "\n") {
			if name, sum, ok := ParseAck(l); ok && (name == "" || len(sum) != 64) {
				t.Fatalf("ack %q %q", name, sum)
			}
		}
	})
}
