package serialproto

import (
	"bytes"
	"testing"
)

func FuzzDecodeLine(f *testing.F) {
	f.Add([]byte("#UW1:\n"))
	f.Add([]byte("[    1.000000] random: crng init done\n"))
	f.Add(AppendLine(nil, Frame{Type: THello, Seq: 1, Payload: Hello{Role: RoleUploader, Window: 8, Chunk: 512, Name: "dev"}.Encode()}))
	f.Add(AppendLine(nil, Frame{Type: TOffer, Seq: 2, Payload: Offer{Size: 1234}.Encode()}))
	f.Add(AppendLine(nil, Frame{Type: TData, Seq: 3, Payload: Data{Xfer: 2, Offset: 512, Bytes: []byte("zstd bytes")}.Encode()}))
	f.Add(AppendLine(nil, Frame{Type: TAck, Seq: 4, Payload: Reply{Offset: 1024}.Encode()}))
	f.Add(AppendLine(nil, Frame{Type: TNak, Seq: 5, Payload: Reply{Offset: 0, Reason: "sha256 mismatch"}.Encode()}))
	f.Add(AppendLine(nil, Frame{Type: TDone, Seq: 6, Payload: Reply{Status: Duplicate}.Encode()}))
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, err := DecodeLine(line)
		if err != nil {
			return
		}
		if len(fr.Payload) > MaxPayload {
			t.Fatalf("payload %d", len(fr.Payload))
		}
		// A valid frame re-encodes to a line that decodes to the same frame.
		again, err := DecodeLine(AppendLine(nil, fr))
		if err != nil || again.Type != fr.Type || again.Seq != fr.Seq || !bytes.Equal(again.Payload, fr.Payload) {
			t.Fatalf("round trip: %v", err)
		}
		// Message parsers never panic.
		ParseHello(fr.Payload)
		ParseOffer(fr.Payload)
		ParseData(fr.Payload)
		ParseReply(fr.Payload)
		r := NewReader(bytes.NewReader(line))
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	})
}

// FuzzDecodeBinary fuzzes the binary frame decoder (COBS, header, CRC)
// and the Reader on a stream that mixes both framings.
func FuzzDecodeBinary(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 0})
	f.Add([]byte{0xff})
	f.Add(AppendBinary(nil, Frame{Type: THello, Seq: 1, Payload: Hello{Role: RoleUploader, Flags: FlagBinary | FlagSack, Window: 16, Chunk: 1024, Name: "dev"}.Encode()}))
	f.Add(AppendBinary(nil, Frame{Type: TData, Seq: 3, Payload: Data{Xfer: 2, Offset: 512, Bytes: []byte("zstd\x00\x00bytes\n")}.Encode()}))
	f.Add(AppendBinary(nil, Frame{Type: TAck, Seq: 4, Payload: Reply{Offset: 1024}.WithSack(Sack{Echo: 3, Ranges: []Range{{2048, 4096}, {5000, 6000}}}).Encode()}))
	f.Add(AppendBinary(nil, Frame{Type: TData, Seq: 5, Payload: bytes.Repeat([]byte{0xff}, MaxPayload)}))
	f.Add(append([]byte("[  1.0] printk\n"), AppendLine(nil, Frame{Type: TEmpty, Seq: 6})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		// b as one frame's COBS bytes, and as a stream.
		in := bytes.ReplaceAll(b, []byte{0}, nil)
		if fr, err := DecodeBinary(in); err == nil {
			if !fr.Binary || len(fr.Payload) > MaxPayload {
				t.Fatalf("frame %+v", fr)
			}
			wire := AppendBinary(nil, fr)
			again, err := DecodeBinary(wire[1 : len(wire)-1])
			if err != nil || again.Type != fr.Type || again.Seq != fr.Seq || !bytes.Equal(again.Payload, fr.Payload) {
				t.Fatalf("round trip: %v", err)
			}
			if r, err := ParseReply(fr.Payload); err == nil {
				if s, ok := r.Sack(); ok {
					if back, ok := (Reply{}).WithSack(s).Sack(); !ok || back.Echo != s.Echo || len(back.Ranges) != len(s.Ranges) {
						t.Fatalf("sack round trip %+v", s)
					}
				}
			}
			ParseHello(fr.Payload)
			ParseOffer(fr.Payload)
			ParseData(fr.Payload)
		}
		r := NewReader(bytes.NewReader(b))
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload %d", len(fr.Payload))
			}
		}
	})
}
