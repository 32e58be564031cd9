// Package symstore is a symbol store: debug files and executables
// indexed by GNU build ID in the directory layout gdb's
// debug-file-directory reads,
//
//	DIR/.build-id/ab/cdef….debug   the file with DWARF (a separate debug
//	                               file or an unstripped binary)
//	DIR/.build-id/ab/cdef…         the executable, when known
//	DIR/generation                 rewritten after every change
//
// so that gdb (set debug-file-directory DIR), `unwound symbolize
// --debug-dir DIR` and the fleet collector read it as it is, and served
// over the debuginfod protocol (Handler). Add fills it from Yocto and
// Buildroot build directories, plain files and debuglink pairs.
// docs/symbols.md describes where the files come from.
package symstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Store is a symbol store directory.
type Store struct {
	Dir string
}

// Open returns the store at dir, creating the directory.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("no store directory")
	}
	if err := os.MkdirAll(filepath.Join(dir, ".build-id"), 0o755); err != nil {
		return nil, err
	}
	return &Store{Dir: dir}, nil
}

// Kinds of stored files, named as debuginfod names them.
const (
	DebugInfo  = "debuginfo"
	Executable = "executable"
)

// ValidID says whether id is a build ID as the store names files: lower
// case hex, at least 2 bytes, at most 64.
func ValidID(id string) bool {
	if len(id) < 4 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Path is where the store keeps the file of kind for a build ID.
func (s *Store) Path(id, kind string) string {
	p := filepath.Join(s.Dir, ".build-id", id[:2], id[2:])
	if kind == DebugInfo {
		p += ".debug"
	}
	return p
}

// Lookup returns the stored file of kind for id, "" when there is none.
func (s *Store) Lookup(id, kind string) string {
	if !ValidID(id) {
		return ""
	}
	p := s.Path(id, kind)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return p
	}
	return ""
}

// put stores from as the file of kind for id: a hard link when from is on
// the same file system, else a copy, made under a temporary name and
// renamed, so readers never see a partial file. It says false when the
// store already had one.
func (s *Store) put(id, kind, from string) (bool, error) {
	to := s.Path(id, kind)
	if _, err := os.Lstat(to); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return false, err
	}
	tmp := filepath.Join(filepath.Dir(to), fmt.Sprintf(".tmp-%d-%s", os.Getpid(), filepath.Base(to)))
	os.Remove(tmp)
	if err := os.Link(from, tmp); err != nil {
		if err := copyFile(from, tmp); err != nil {
			os.Remove(tmp)
			return false, err
		}
	}
	// A second add racing this one: whoever renames last wins, with the
	// same build's file.
	if err := os.Rename(tmp, to); err != nil {
		os.Remove(tmp)
		return false, err
	}
	return true, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Generation is the store's generation: a number that every change
// raises, in DIR/generation. The fleet collector watches the file to
// symbolize its reports again.
func (s *Store) Generation() int64 {
	b, err := os.ReadFile(filepath.Join(s.Dir, "generation"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// bump rewrites DIR/generation (temporary file, rename).
func (s *Store) bump() error {
	n := s.Generation() + 1
	if now := time.Now().UnixNano(); now > n {
		n = now // increasing even if the file was lost
	}
	tmp := filepath.Join(s.Dir, fmt.Sprintf(".generation-%d", os.Getpid()))
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, "generation"))
}
