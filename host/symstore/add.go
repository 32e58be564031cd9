package symstore

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/unwound-dev/unwound/host/symbolize"
)

// Found is one file the store took.
type Found struct {
	BuildID string
	Kind    string // DebugInfo or Executable
	From    string
	New     bool // false: the store had it already
}

// Skipped is one file the store did not take, and why.
type Skipped struct {
	Path, Why string
}

// Result is what one Add did.
type Result struct {
	Found   []Found
	Skipped []Skipped
	NotELF  int // files that are not ELF (not listed: a build has many)
	Objects int // object files (.o) without a build ID: not listed either
	Layouts []string
}

// Limits against hostile trees.
const (
	maxFiles = 10_000_000
	maxDepth = 64
	maxFile  = 8 << 30
)

// elfFile is one ELF file seen in the walk.
type elfFile struct {
	path string
	info symbolize.FileInfo
}

// Add indexes the ELF files under paths (files or directories) by GNU
// build ID. A Yocto build directory (or its tmp/) is read where its debug
// files are: each recipe's packages-split (the -dbg packages' .debug
// files and the stripped packages), and rootfs-dbg trees; a Buildroot
// output/ in build/ (unstripped objects), staging/ and target/.
// Anything else is walked whole. Stripped files and their .debug files
// (a .gnu_debuglink with a matching CRC) are paired. Symbolic links are
// not followed. The store's generation is raised when anything was
// added.
func (s *Store) Add(paths []string) (*Result, error) {
	res := &Result{}
	var files []elfFile
	n := 0
	visit := func(p string) {
		if n++; n > maxFiles {
			return
		}
		f, err := os.Open(p)
		if err != nil {
			res.Skipped = append(res.Skipped, Skipped{p, err.Error()})
			return
		}
		var magic [4]byte
		_, err = io.ReadFull(f, magic[:])
		st, _ := f.Stat()
		f.Close()
		if err != nil || string(magic[:]) != "\x7fELF" {
			res.NotELF++
			return
		}
		if st != nil && st.Size() > maxFile {
			res.Skipped = append(res.Skipped, Skipped{p, "larger than 8 GiB"})
			return
		}
		fi, err := inspect(p)
		if err != nil {
			res.Skipped = append(res.Skipped, Skipped{p, "not a readable ELF file: " + err.Error()})
			return
		}
		files = append(files, elfFile{p, fi})
	}
	for _, root := range paths {
		// A path named on the command line may be a link (libfoo.so):
		// store its target, never the link (link(2) does not follow).
		root, err := filepath.EvalSymlinks(root)
		if err != nil {
			return res, err
		}
		st, err := os.Stat(root)
		if err != nil {
			return res, err
		}
		if !st.IsDir() {
			visit(root)
			continue
		}
		dirs, layout := roots(root)
		if layout != "" {
			res.Layouts = append(res.Layouts, fmt.Sprintf("%s: %s", root, layout))
		}
		for _, d := range dirs {
			if err := walk(d, visit); err != nil {
				return res, err
			}
		}
	}
	if n > maxFiles {
		return res, fmt.Errorf("more than %d files", maxFiles)
	}
	changed := false
	stored := map[string]bool{} // id, kind and path stored in this run
	put := func(id, kind, from string) error {
		if k := id + " " + kind + " " + from; !stored[k] {
			stored[k] = true
			ok, err := s.put(id, kind, from)
			if err != nil {
				return err
			}
			changed = changed || ok
			res.Found = append(res.Found, Found{id, kind, from, ok})
		}
		return nil
	}
	byLink := map[string][]elfFile{} // .debug files by base name, for debuglinks
	for _, f := range files {
		if f.info.HasDWARF {
			byLink[filepath.Base(f.path)] = append(byLink[filepath.Base(f.path)], f)
		}
	}
	for _, f := range files {
		id := f.info.BuildID
		kinds := []string{}
		if f.info.HasCode {
			kinds = append(kinds, Executable)
		}
		if f.info.HasDWARF {
			kinds = append(kinds, DebugInfo)
		}
		switch {
		case len(kinds) == 0:
			res.Skipped = append(res.Skipped, Skipped{f.path, "no debug info and no code"})
			continue
		case id == "" && !f.info.HasCode && f.info.HasDWARF:
			// A .debug file without a build ID: only its stripped
			// file's debuglink can name it (below).
			continue
		case id == "" && f.info.Relocatable:
			res.Objects++ // a build directory's .o files: never in a report
			continue
		case id == "":
			res.Skipped = append(res.Skipped, Skipped{f.path, "no build id"})
			continue
		case !ValidID(id):
			res.Skipped = append(res.Skipped, Skipped{f.path, "build id of an odd length: " + id})
			continue
		}
		if f.info.HasCode && !f.info.HasDWARF && f.info.Debuglink != "" {
			// A stripped file: the .debug file its debuglink names, when
			// one in the walk has the CRC (and no other build ID).
			if d, why := pair(f, byLink[f.info.Debuglink]); d != "" {
				if err := put(id, DebugInfo, d); err != nil {
					return res, err
				}
			} else if why != "" {
				res.Skipped = append(res.Skipped, Skipped{f.path, why})
			}
		}
		for _, k := range kinds {
			if err := put(id, k, f.path); err != nil {
				return res, err
			}
		}
	}
	for _, f := range files {
		if f.info.BuildID == "" && !f.info.HasCode && f.info.HasDWARF && !paired(res, f.path) {
			res.Skipped = append(res.Skipped, Skipped{f.path, "no build id, and no stripped file's debuglink names it"})
		}
	}
	if changed {
		if err := s.bump(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func paired(res *Result, path string) bool {
	for _, f := range res.Found {
		if f.From == path {
			return true
		}
	}
	return false
}

// pair finds the .debug file a stripped file's debuglink names: a
// candidate with the CRC it wants, whose build ID, when it has one, is
// the stripped file's.
func pair(f elfFile, cands []elfFile) (string, string) {
	why := ""
	for _, c := range cands {
		if c.info.BuildID != "" && c.info.BuildID != f.info.BuildID {
			continue
		}
		crc, err := symbolize.FileCRC(c.path)
		if err != nil {
			continue
		}
		if crc != f.info.LinkCRC {
			why = fmt.Sprintf("debuglink %s: CRC %08x, the file wants %08x", c.path, crc, f.info.LinkCRC)
			continue
		}
		return c.path, ""
	}
	return "", why
}

// walk visits the regular files under root, not following symbolic
// links, at most maxDepth deep, in lexical order.
func walk(root string, visit func(string)) error {
	base := strings.Count(filepath.Clean(root), string(filepath.Separator))
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // an unreadable directory: go on
		}
		if d.IsDir() {
			if strings.Count(p, string(filepath.Separator))-base > maxDepth {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			visit(p)
		}
		return nil
	})
}

// roots returns the directories of root to walk, and the layout it was
// recognised as.
func roots(root string) ([]string, string) {
	glob := func(pats ...string) []string {
		var out []string
		for _, p := range pats {
			m, _ := filepath.Glob(filepath.Join(root, p))
			out = append(out, m...)
		}
		sort.Strings(out)
		return out
	}
	isDir := func(p string) bool {
		st, err := os.Stat(filepath.Join(root, p))
		return err == nil && st.IsDir()
	}
	// Yocto: BUILDDIR (tmp/work), TMPDIR (work/), a recipe's WORKDIR
	// (packages-split/), or packages-split itself.
	for _, pre := range []string{"tmp/", ""} {
		if isDir(pre + "work") {
			d := glob(pre+"work/*/*/*/packages-split", pre+"deploy/images/*/*rootfs-dbg*", pre+"work/*/*/*/rootfs-dbg")
			if len(d) > 0 {
				return d, "Yocto build (packages-split, rootfs-dbg)"
			}
		}
	}
	if isDir("packages-split") {
		return glob("packages-split"), "Yocto recipe work directory (packages-split)"
	}
	// Buildroot: output/ has build/, staging (a link to host/<tuple>/sysroot)
	// and target/.
	if isDir("build") && isDir("target") && (isDir("staging") || isDir("host")) {
		var d []string
		d = append(d, glob("build/*")...)
		for _, p := range []string{"staging", "target"} {
			if isDir(p) {
				r, err := filepath.EvalSymlinks(filepath.Join(root, p))
				if err == nil {
					d = append(d, r)
				}
			}
		}
		return d, "Buildroot output (build, staging, target)"
	}
	return []string{root}, ""
}

var inspect = symbolize.Inspect
