package collector

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/unwound-dev/unwound/report/decode"
)

// ResymbolizeResult says what a resymbolization did.
type ResymbolizeResult struct {
	Reports   int      `json:"reports"`   // reports symbolized again (those with frames lacking symbols)
	Improved  int      `json:"improved"`  // of those, reports with fewer frames lacking symbols
	Regrouped int      `json:"regrouped"` // of those, reports whose signature changed
	Merged    []Merged `json:"merged"`    // groups whose every kept report moved to one group
}

// Merged is one group merged into another by regrouping.
type Merged struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// redo is one report symbolized again.
type redo struct {
	id, oldGroup string
	in           *ingest
}

// Resymbolize symbolizes again, with the symbols there are now, every
// kept report whose crashed thread had frames without a symbol, and
// regroups them. A group whose kept reports all move to one other group
// merges into it: the target takes its counts (pruned reports' too) and
// facets, and the old id is kept as a pointer to the new one. A group
// whose reports split moves them one by one; the counts of its pruned
// reports stay where they were.
func (c *Collector) Resymbolize() (ResymbolizeResult, error) {
	return c.resymbolize(nil)
}

// resymbolize is Resymbolize for the reports that lacked the symbols of
// one of the build ids in only (nil: every report that lacked some).
func (c *Collector) resymbolize(only map[string]bool) (ResymbolizeResult, error) {
	var res ResymbolizeResult
	c.smu.Lock()
	c.sgen = "\x00stale" // symbols may have come without a generation change
	c.smu.Unlock()

	// Read the candidates first: symbolizing happens outside any
	// transaction, the writes in one short transaction per group.
	type cand struct {
		id, group string
		raw       []byte
		missing   int
		lacking   string
		received  int64
	}
	rows, err := c.db.Query(`SELECT id, lacking FROM reports WHERE lacking != '' ORDER BY group_id, received`)
	if err != nil {
		return res, err
	}
	var ids []string
	for rows.Next() {
		var id, lack string
		if err := rows.Scan(&id, &lack); err != nil {
			rows.Close()
			return res, err
		}
		if only == nil || helps(only, lack) {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	var cands []cand
	for _, id := range ids {
		x := cand{id: id}
		err := c.db.QueryRow(`SELECT group_id, raw, missing, received, lacking FROM reports WHERE id = ?`, id).Scan(&x.group, &x.raw, &x.missing, &x.received, &x.lacking)
		if errors.Is(err, sql.ErrNoRows) {
			continue // pruned meanwhile
		}
		if err != nil {
			return res, err
		}
		cands = append(cands, x)
	}
	byGroup := map[string][]redo{}
	var order []string
	for _, x := range cands {
		r, err := decode.Report(x.raw)
		if err != nil {
			c.opts.Log("report %s: %v", x.id, err)
			continue
		}
		res.Reports++
		sr, frames := c.symbolize(r)
		sig := c.rules.Of(frames)
		in := c.ingest(r, x.raw, sr, frames, sig, extras(x.raw), x.received)
		if in.missing >= x.missing && in.group == x.group && in.lacking == x.lacking {
			continue
		}
		if in.missing < x.missing {
			res.Improved++
		}
		if in.group != x.group {
			res.Regrouped++
		}
		if _, ok := byGroup[x.group]; !ok {
			order = append(order, x.group)
		}
		byGroup[x.group] = append(byGroup[x.group], redo{x.id, x.group, in})
	}
	for _, g := range order {
		m, err := c.regroup(g, byGroup[g])
		if err != nil {
			return res, fmt.Errorf("regrouping %s: %w", g, err)
		}
		if m != nil {
			res.Merged = append(res.Merged, *m)
		}
	}
	return res, nil
}

// helps reports whether a report's lacking list names a build id in
// only ("*": not known, from before schema 3).
func helps(only map[string]bool, lacking string) bool {
	if strings.TrimSpace(lacking) == "*" {
		return true
	}
	for _, id := range strings.Fields(lacking) {
		if only[id] {
			return true
		}
	}
	return false
}

// available lists the build ids the symbol store has files for:
// DIR/symbols/.build-id/xx/rest[.debug].
func (c *Collector) available() map[string]bool {
	out := map[string]bool{}
	root := filepath.Join(c.dir, SymbolsDir, ".build-id")
	dirs, _ := os.ReadDir(root)
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 2 {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(root, d.Name()))
		for _, f := range files {
			out[strings.ToLower(d.Name()+strings.TrimSuffix(f.Name(), ".debug"))] = true
		}
	}
	return out
}

// regroup writes one old group's symbolized-again reports.
func (c *Collector) regroup(old string, redos []redo) (merged *Merged, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err = c.inTx(func(tx *sql.Tx) error {
		var kept int
		if err := tx.QueryRow(`SELECT count(*) FROM reports WHERE group_id = ?`, old).Scan(&kept); err != nil {
			return err
		}
		targets := map[string]bool{}
		for _, r := range redos {
			targets[r.in.group] = true
		}
		whole := len(redos) == kept && len(targets) == 1 && !targets[old]
		for _, r := range redos {
			in := r.in
			if in.group != old {
				if err := addToGroup(tx, in.group, in.sig, in.r.Signal.Number, in.r.ID, in.seen); err != nil {
					return err
				}
				if whole {
					// Counted below, with the old group's whole numbers.
					if _, err := tx.Exec(`UPDATE groups SET count = count - 1 WHERE id = ?`, in.group); err != nil {
						return err
					}
				} else {
					if _, err := tx.Exec(`UPDATE groups SET count = count - 1 WHERE id = ?`, old); err != nil {
						return err
					}
					fs := facetsOf(in)
					if err := addFacets(tx, old, fs, -1, in.seen, in.seen); err != nil {
						return err
					}
					if err := addFacets(tx, in.group, fs, 1, in.seen, in.seen); err != nil {
						return err
					}
				}
			}
			if _, err := tx.Exec(`UPDATE reports SET group_id = ?, signature = ?, missing = ?, symbolized = ?, size = ?, lacking = ? WHERE id = ?`,
				in.group, in.sig.Text, in.missing, in.symbolized, len(in.raw)+len(in.symbolized), in.lacking, r.id); err != nil {
				return err
			}
		}
		if whole {
			var to string
			for t := range targets {
				to = t
			}
			if err := mergeGroup(tx, old, to); err != nil {
				return err
			}
			merged = &Merged{From: old, To: to}
		} else if _, err := tx.Exec(`UPDATE groups SET sample =
			(SELECT r.id FROM reports r WHERE r.group_id = groups.id ORDER BY r.received DESC, r.id LIMIT 1)
			WHERE id = ?`, old); err != nil {
			return err
		}
		return nil
	})
	return merged, err
}

// mergeGroup adds group from's numbers and facets to group to, and leaves
// from as a pointer to it.
func mergeGroup(tx *sql.Tx, from, to string) error {
	if _, err := tx.Exec(`UPDATE groups SET
		count = count + (SELECT count FROM groups WHERE id = ?1),
		first_seen = min(first_seen, (SELECT first_seen FROM groups WHERE id = ?1)),
		last_seen = max(last_seen, (SELECT last_seen FROM groups WHERE id = ?1))
		WHERE id = ?2`, from, to); err != nil {
		return err
	}
	if _, err := tx.Exec(`INSERT INTO facets (group_id, facet, value, count, first_seen, last_seen)
		SELECT ?2, facet, value, count, first_seen, last_seen FROM facets WHERE group_id = ?1 AND true
		ON CONFLICT(group_id, facet, value) DO UPDATE SET count = count + excluded.count,
			first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)`, from, to); err != nil {
		return err
	}
	if _, err := tx.Exec(`DELETE FROM facets WHERE group_id = ?`, from); err != nil {
		return err
	}
	if _, err := tx.Exec(`UPDATE groups SET count = 0, sample = NULL, merged_into = ?2 WHERE id = ?1`, from, to); err != nil {
		return err
	}
	// Groups merged into from before now point at to.
	_, err := tx.Exec(`UPDATE groups SET merged_into = ?2 WHERE merged_into = ?1`, from, to)
	return err
}
