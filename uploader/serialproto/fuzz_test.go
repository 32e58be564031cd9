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
