package armor

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
)

func TestRoundTripWithNoise(t *testing.T) {
	a := make([]byte, 1000)
	rand.Read(a)
	b := []byte{}
	var buf bytes.Buffer
	buf.WriteString("login: [   3.1] eth0: link up\n")
	Write(&buf, "0000000001-00000000.json.zst", a)
	Write(&buf, "0000000002-00000000.json.zst", b)
	// A console: CRLF, a timestamp prefix, a kernel line in the middle.
	var noisy strings.Builder
	for i, l := range strings.Split(buf.String(), "\n") {
		if i == 5 {
			noisy.WriteString("[  12.000000] random: crng init done\r\n")
		}
		noisy.WriteString("[12:00:0" + string(rune('0'+i%10)) + "] " + l + "\r\n")
	}
	blocks, err := Read(strings.NewReader(noisy.String()))
	if err != nil || len(blocks) != 2 {
		t.Fatal(err, len(blocks))
	}
	if blocks[0].Err != nil || !bytes.Equal(blocks[0].Data, a) || blocks[0].Name != "0000000001-00000000.json.zst" {
		t.Fatal(blocks[0].Err)
	}
	if blocks[1].Err != nil || len(blocks[1].Data) != 0 {
		t.Fatal(blocks[1].Err)
	}
	// A damaged line is caught; so is a missing one.
	s := buf.String()
	i := strings.Index(s, "=UW 0003 ") + 12
	bad := s[:i] + string(s[i]^1) + s[i+1:]
	if bl, _ := Read(strings.NewReader(bad)); bl[0].Err == nil {
		t.Fatal("damaged line not detected")
	}
	lines := strings.Split(s, "\n")
	missing := strings.Join(append(lines[:4:4], lines[5:]...), "\n")
	if bl, _ := Read(strings.NewReader(missing)); bl[0].Err == nil {
		t.Fatal("missing line not detected")
	}
}

func TestAck(t *testing.T) {
	data := []byte("report")
	l := "root@board:~# " + Ack("0000000007-00000000.json.zst", data) + "\r"
	name, sum, ok := ParseAck(l)
	if !ok || name != "0000000007-00000000.json.zst" || len(sum) != 64 {
		t.Fatal(name, sum, ok)
	}
	for _, bad := range []string{
		"=UNWOUND-ACK name=../etc/passwd sha256=" + sum,
		"=UNWOUND-ACK name=x sha256=" + sum[:60],
		"=UNWOUND-ACK name=x sha256=" + strings.Repeat("g", 64),
		"=UNWOUND-ACK sha256=" + sum,
	} {
		if _, _, ok := ParseAck(bad); ok {
			t.Errorf("accepted %q", bad)
		}
	}
}
