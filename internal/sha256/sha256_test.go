package sha256

import (
	"bytes"
	"crypto/hmac"
	stdsha "crypto/sha256"
	"encoding/hex"
	"testing"
)

// FIPS 180-4's examples (NIST's "SHA256.pdf") and the RFC 4231 HMAC cases.
func TestKnownAnswers(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	} {
		s := Sum256([]byte(c.in))
		if got := hex.EncodeToString(s[:]); got != c.want {
			t.Errorf("SHA-256(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	million := New()
	chunk := bytes.Repeat([]byte("a"), 1000)
	for i := 0; i < 1000; i++ {
		million.Write(chunk)
	}
	if got := hex.EncodeToString(million.Sum(nil)); got != "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0" {
		t.Errorf("SHA-256 of a million a's = %s", got)
	}
	for _, c := range []struct{ key, data, want string }{
		{"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", hex.EncodeToString([]byte("Hi There")), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{hex.EncodeToString([]byte("Jefe")), hex.EncodeToString([]byte("what do ya want for nothing?")), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{hex.EncodeToString(bytes.Repeat([]byte{0xaa}, 131)), hex.EncodeToString([]byte("Test Using Larger Than Block-Size Key - Hash Key First")), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
	} {
		key, _ := hex.DecodeString(c.key)
		data, _ := hex.DecodeString(c.data)
		m := NewHMAC(key)
		m.Write(data)
		if got := hex.EncodeToString(m.Sum(nil)); got != c.want {
			t.Errorf("HMAC-SHA256(%s) = %s, want %s", c.key, got, c.want)
		}
	}
}

// FuzzAgainstStd compares every length and split of the input, and every
// key, with crypto/sha256 and crypto/hmac.
func FuzzAgainstStd(f *testing.F) {
	f.Add([]byte(""), []byte("k"), 0)
	f.Add(bytes.Repeat([]byte{1}, 55), []byte{}, 55)
	f.Add(bytes.Repeat([]byte{2}, 56), bytes.Repeat([]byte{3}, 64), 1)
	f.Add(bytes.Repeat([]byte{4}, 64), bytes.Repeat([]byte{5}, 65), 63)
	f.Add(bytes.Repeat([]byte{6}, 200), bytes.Repeat([]byte{7}, 200), 100)
	f.Fuzz(func(t *testing.T, data, key []byte, split int) {
		want := stdsha.Sum256(data)
		if got := Sum256(data); got != want {
			t.Fatalf("Sum256(%x) = %x, want %x", data, got, want)
		}
		if split < 0 {
			split = -split
		}
		split %= len(data) + 1
		d := New()
		d.Write(data[:split])
		mid := d.Sum(nil) // Sum leaves the digest as it was
		d.Write(data[split:])
		if got := d.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Fatalf("in two writes at %d: %x, want %x", split, got, want)
		}
		if w := stdsha.Sum256(data[:split]); !bytes.Equal(mid, w[:]) {
			t.Fatalf("Sum at %d: %x, want %x", split, mid, w)
		}
		m, sm := NewHMAC(key), hmac.New(stdsha.New, key)
		m.Write(data)
		sm.Write(data)
		if got, w := m.Sum(nil), sm.Sum(nil); !bytes.Equal(got, w) {
			t.Fatalf("HMAC(%x, %x) = %x, want %x", key, data, got, w)
		}
	})
}

func TestAgainstStdLengths(t *testing.T) {
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for n := 0; n <= len(buf); n++ {
		if got, want := Sum256(buf[:n]), stdsha.Sum256(buf[:n]); got != want {
			t.Fatalf("length %d: %x, want %x", n, got, want)
		}
	}
}

func BenchmarkSum256(b *testing.B) {
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		Sum256(buf)
	}
}
