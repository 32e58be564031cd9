package receive

import (
	"fmt"
	"io"

	"github.com/unwound-dev/unwound/wire/armor"
)

// Extract turns `unwound-uploader dump` output captured from a console
// back into reports in st, checking every line's CRC and each report's
// sha256. For every report st holds it writes the board's confirmation
// (=UNWOUND-ACK) to acks: fed to `unwound-uploader dump --remove` on the
// board, it deletes those entries there. logf says what became of each.
func Extract(in io.Reader, st *Store, acks io.Writer, logf func(format string, args ...any)) error {
	blocks, err := armor.Read(in)
	if err != nil {
		return err
	}
	bad := 0
	for _, b := range blocks {
		if b.Err != nil {
			logf("%v", b.Err)
			bad++
			continue
		}
		r, stored, invalid, err := st.Put(b.Data, "")
		switch {
		case err != nil:
			return err
		case invalid != nil:
			logf("%s: %v", b.Name, invalid)
			bad++
			continue
		case stored:
			logf("%s: stored %s", b.Name, st.Path(r.ID))
		default:
			logf("%s: already there (%s)", b.Name, st.Path(r.ID))
		}
		fmt.Fprintln(acks, armor.Ack(b.Name, b.Data))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d reports damaged", bad, len(blocks))
	}
	if len(blocks) == 0 {
		return fmt.Errorf("no report found")
	}
	return nil
}
