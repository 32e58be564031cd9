package collector

import (
	"database/sql"
	"time"
)

// PruneResult says what one retention pass removed.
type PruneResult struct {
	Reports int   `json:"reports"`
	Bytes   int64 `json:"bytes"`
}

// Prune applies the retention: reports received more than KeepDays ago
// go, then the oldest while the kept reports' bytes exceed MaxBytes.
// Their groups and facets keep their counts; a group whose sample went
// takes its newest kept report as the sample. The ids are remembered
// (table gone) so that a retry of a pruned report stays a duplicate.
func (c *Collector) Prune() (PruneResult, error) {
	var res PruneResult
	c.wmu.Lock()
	defer c.wmu.Unlock()
	now := c.opts.Now()
	err := c.inTx(func(tx *sql.Tx) error {
		type victim struct {
			id   string
			size int64
		}
		var victims []victim
		collect := func(q string, args ...any) error {
			rows, err := tx.Query(q, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var v victim
				if err := rows.Scan(&v.id, &v.size); err != nil {
					return err
				}
				victims = append(victims, v)
			}
			return rows.Err()
		}
		if c.opts.KeepDays > 0 {
			cutoff := now.Add(-time.Duration(c.opts.KeepDays) * 24 * time.Hour).Unix()
			if err := collect(`SELECT id, size FROM reports WHERE received < ? ORDER BY received, id`, cutoff); err != nil {
				return err
			}
		}
		if c.opts.MaxBytes > 0 {
			var total int64
			if err := tx.QueryRow(`SELECT coalesce(sum(size), 0) FROM reports`).Scan(&total); err != nil {
				return err
			}
			for _, v := range victims {
				total -= v.size
			}
			if total > c.opts.MaxBytes {
				// The oldest beyond those already chosen, until under.
				rows, err := tx.Query(`SELECT id, size FROM reports ORDER BY received, id`)
				if err != nil {
					return err
				}
				chosen := map[string]bool{}
				for _, v := range victims {
					chosen[v.id] = true
				}
				for total > c.opts.MaxBytes && rows.Next() {
					var v victim
					if err := rows.Scan(&v.id, &v.size); err != nil {
						rows.Close()
						return err
					}
					if chosen[v.id] {
						continue
					}
					victims = append(victims, v)
					total -= v.size
				}
				rows.Close()
			}
		}
		if len(victims) == 0 {
			return nil
		}
		del, err := tx.Prepare(`DELETE FROM reports WHERE id = ?`)
		if err != nil {
			return err
		}
		defer del.Close()
		ins, err := tx.Prepare(`INSERT OR IGNORE INTO gone (id, pruned) VALUES (?, ?)`)
		if err != nil {
			return err
		}
		defer ins.Close()
		for _, v := range victims {
			if _, err := del.Exec(v.id); err != nil {
				return err
			}
			if _, err := ins.Exec(v.id, now.Unix()); err != nil {
				return err
			}
			res.Reports++
			res.Bytes += v.size
		}
		if _, err := tx.Exec(`UPDATE groups SET sample =
			(SELECT r.id FROM reports r WHERE r.group_id = groups.id ORDER BY r.received DESC, r.id LIMIT 1)
			WHERE sample IS NOT NULL AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.id = groups.sample)`); err != nil {
			return err
		}
		return nil
	})
	if err != nil || res.Reports == 0 {
		return res, err
	}
	// Give the freed pages back to the file system (auto_vacuum is
	// INCREMENTAL in databases this package created).
	c.db.Exec(`PRAGMA incremental_vacuum`)
	c.opts.Log("pruned %d reports (%d bytes)", res.Reports, res.Bytes)
	return res, nil
}

// maybePrune prunes when the kept bytes may exceed MaxBytes: checked
// every 64 stored reports, so that a burst cannot run far past the bound.
func (c *Collector) maybePrune() {
	c.putMu.Lock()
	c.puts++
	due := c.puts%64 == 0
	c.putMu.Unlock()
	if !due {
		return
	}
	var total int64
	if c.db.QueryRow(`SELECT coalesce(sum(size), 0) FROM reports`).Scan(&total) == nil && total > c.opts.MaxBytes {
		if _, err := c.Prune(); err != nil {
			c.opts.Log("pruning: %v", err)
		}
	}
}

// Start runs the collector's background work until Close: retention
// every minute (and once now), and a resymbolization whenever
// DIR/symbols/generation changes (polled every two seconds).
func (c *Collector) Start() {
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		gen := c.generation()
		prune := time.NewTicker(time.Minute)
		poll := time.NewTicker(2 * time.Second)
		defer prune.Stop()
		defer poll.Stop()
		if c.opts.KeepDays > 0 || c.opts.MaxBytes > 0 {
			if _, err := c.Prune(); err != nil {
				c.opts.Log("pruning: %v", err)
			}
		}
		for {
			select {
			case <-c.stop:
				return
			case <-prune.C:
				if c.opts.KeepDays > 0 || c.opts.MaxBytes > 0 {
					if _, err := c.Prune(); err != nil {
						c.opts.Log("pruning: %v", err)
					}
				}
			case <-poll.C:
				if g := c.generation(); g != gen {
					gen = g
					res, err := c.resymbolize(c.available())
					if err != nil {
						c.opts.Log("resymbolizing: %v", err)
						continue
					}
					c.opts.Log("new symbols: %d reports symbolized again, %d changed group, %d groups merged", res.Reports, res.Regrouped, len(res.Merged))
				}
			}
		}
	}()
}
