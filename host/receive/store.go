// Package receive is the host's end of the uploads: reports that boards
// send over HTTP (Handler, Serve), over a serial line (Serial) or through a
// console log (Extract), validated and kept in a Store.
package receive

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
	"github.com/unwound-dev/unwound/report/zstdenc"
)

// Sink keeps received reports: a Store (one file per report) or a
// collector's database (package host/collector). Put returns only once the
// report is durable: the sender deletes its copy when told it is stored.
type Sink interface {
	// Put validates data (zstd or plain JSON) as a report and keeps it.
	// wantID, when set, must be the report's id. It returns the report,
	// whether it was new (false: a duplicate), and a validation error
	// (the sender's fault) or a local one.
	Put(data []byte, wantID string) (r *report.Report, stored bool, invalid, err error)
	// Has reports whether the report id was received.
	Has(id string) bool
	// List returns the kept reports, oldest first (GET /reports).
	List() ([]Stored, error)
	// String says where reports go, for logs.
	String() string
}

// Tee keeps every report in each of its sinks, the first one first: the
// report is new when it was new to the first.
type Tee []Sink

// Put puts data into every sink, stopping at the first error.
func (t Tee) Put(data []byte, wantID string) (r *report.Report, stored bool, invalid, err error) {
	for i, s := range t {
		rr, st, inv, err := s.Put(data, wantID)
		if inv != nil || err != nil {
			return rr, false, inv, err
		}
		if i == 0 {
			r, stored = rr, st
		}
	}
	return r, stored, nil, nil
}

// Has reports whether every sink has the report.
func (t Tee) Has(id string) bool {
	for _, s := range t {
		if !s.Has(id) {
			return false
		}
	}
	return len(t) > 0
}

// List is the first sink's list.
func (t Tee) List() ([]Stored, error) { return t[0].List() }

func (t Tee) String() string {
	var names []string
	for _, s := range t {
		names = append(names, s.String())
	}
	return strings.Join(names, " and ")
}

// Store keeps received reports as DIR/<id>.json.zst, written atomically,
// one per report id: receivers deduplicate (uploads are at least once).
type Store struct {
	dir string
	mu  sync.Mutex
	// OnStored, when set, is called once a new report is stored, with
	// the bytes as stored (the Sentry forwarder's hook). It must not
	// block: the uploader is waiting for its answer.
	OnStored func(r *report.Report, data []byte)
}

// NewStore opens (creating it if needed) the store in dir.
func NewStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("--out DIR is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Store{dir: dir}, nil
}

func (s *Store) String() string { return s.dir }

// Path is where the report id is kept.
func (s *Store) Path(id string) string { return filepath.Join(s.dir, id+report.Suffix) }

// Has reports whether the report id is kept.
func (s *Store) Has(id string) bool {
	_, err := os.Stat(s.Path(id))
	return err == nil
}

// Put validates data (zstd or plain JSON) as a report and stores it.
// wantID, when set, must be the report's id. It returns the report, whether
// it was new, and a validation error (the sender's fault) or a local one.
func (s *Store) Put(data []byte, wantID string) (r *report.Report, stored bool, invalid, err error) {
	r, derr := decode.Report(data)
	if derr != nil {
		return nil, false, derr, nil
	}
	if wantID != "" && wantID != r.ID {
		return nil, false, fmt.Errorf("report id %s, but %s was announced", r.ID, wantID), nil
	}
	if !bytes.HasPrefix(data, []byte(zstdenc.Magic)) {
		data = report.Compress(data)
	}
	s.mu.Lock()
	if s.Has(r.ID) {
		s.mu.Unlock()
		return r, false, nil, nil
	}
	err = WriteFile(s.Path(r.ID), data, 0o644)
	s.mu.Unlock()
	if err == nil && s.OnStored != nil {
		s.OnStored(r, data)
	}
	return r, true, nil, err
}

// WriteFile writes a whole file or none, with permissions perm: a temp
// file in the same directory, fsync, rename, fsync of the directory.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Stored is one entry of GET /reports.
type Stored struct {
	ID       string    `json:"id"`
	Size     int64     `json:"size"`
	Received time.Time `json:"received"`
}

// List returns the stored reports, oldest first.
func (s *Store) List() ([]Stored, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	out := []Stored{}
	for _, de := range des {
		id, ok := strings.CutSuffix(de.Name(), report.Suffix)
		if !ok || !ValidID(id) {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Stored{ID: id, Size: fi.Size(), Received: fi.ModTime().UTC()})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Received.Before(out[j].Received) })
	return out, nil
}

// ValidID reports whether id is a report id: 32 hex digits.
func ValidID(id string) bool {
	b, err := hex.DecodeString(id)
	return err == nil && len(b) == 16
}
