package report

import (
	"github.com/unwound-dev/unwound/report/jsonlite"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// Encode returns r as one zstd frame with the content checksum on.
func Encode(r *Report) ([]byte, error) {
	js, err := jsonlite.Marshal(r)
	if err != nil {
		return nil, err
	}
	return Compress(js), nil
}

// Compress wraps plain bytes in one checksummed zstd frame. The handler
// carries its own encoder (report/zstdenc, a few KiB of code and tens of
// KiB of memory) rather than a library that links every level; readers
// decode with package decode.
func Compress(p []byte) []byte {
	return zstdenc.Compress(make([]byte, 0, len(p)/3+64), p)
}
