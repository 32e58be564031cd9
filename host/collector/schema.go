package collector

import (
	"database/sql"
	"fmt"
)

// migrations are the schema, one step per version: migrations[i] takes a
// database from PRAGMA user_version i to i+1. Steps are only ever
// appended; a shipped step never changes (a user's database already ran
// it).
//
// The tables:
//
//	reports  one row per kept report: the raw bytes as received (zstd),
//	         the symbolized result (zstd JSON of symbolize.Result), and
//	         the columns the queries filter on. Pruned by retention.
//	groups   one row per signature and signal: the group's numbers
//	         (count, first and last seen) outlive its reports.
//	facets   per group, what its reports had: device, release, program,
//	         kernel, arch, day, attr:KEY; each with a count and first and
//	         last seen. "Boards affected" is the number of device facets.
//	         Facets outlive the reports too (retention keeps the counts).
//	gone     ids of pruned reports: an uploader's retry of one is still a
//	         duplicate.
var migrations = []string{
	// 1: the store.
	`CREATE TABLE groups (
		id          TEXT PRIMARY KEY,   -- 12 hex digits of sha256(signal, signature)
		signature   TEXT NOT NULL,
		signal      INTEGER NOT NULL,
		symbolized  INTEGER NOT NULL,   -- 1: every frame of the signature had a symbol
		count       INTEGER NOT NULL,   -- reports ever grouped here (pruned ones too)
		first_seen  INTEGER NOT NULL,   -- unix seconds
		last_seen   INTEGER NOT NULL,
		sample      TEXT,               -- a kept report of the group, NULL when all are pruned
		merged_into TEXT                -- set when regrouping moved every report elsewhere
	);
	CREATE UNIQUE INDEX groups_key ON groups(signature, signal);
	CREATE TABLE reports (
		id         TEXT PRIMARY KEY,    -- 32 hex digits, the report's own id
		received   INTEGER NOT NULL,    -- unix seconds, the collector's clock
		seen       INTEGER NOT NULL,    -- the report's time when trusted, else received
		device     TEXT NOT NULL,
		program    TEXT NOT NULL,       -- exe path, else comm
		arch       TEXT NOT NULL,
		kernel     TEXT NOT NULL,
		signal     INTEGER NOT NULL,
		release    TEXT NOT NULL,       -- release label, "unknown" when the report has none
		group_id   TEXT NOT NULL REFERENCES groups(id),
		signature  TEXT NOT NULL,
		missing    INTEGER NOT NULL,    -- crashed-thread frames in a module but without a symbol
		raw        BLOB NOT NULL,       -- the report as received, zstd
		symbolized BLOB,                -- zstd JSON of symbolize.Result
		size       INTEGER NOT NULL     -- bytes kept for this report: raw + symbolized
	);
	CREATE INDEX reports_group ON reports(group_id, received);
	CREATE INDEX reports_received ON reports(received);
	CREATE INDEX reports_missing ON reports(missing) WHERE missing > 0;
	CREATE TABLE facets (
		group_id   TEXT NOT NULL,
		facet      TEXT NOT NULL,       -- device, release, program, kernel, arch, attr:KEY
		value      TEXT NOT NULL,
		count      INTEGER NOT NULL,
		first_seen INTEGER NOT NULL,
		last_seen  INTEGER NOT NULL,
		PRIMARY KEY (group_id, facet, value)
	) WITHOUT ROWID;
	CREATE INDEX facets_value ON facets(facet, value);
	CREATE TABLE gone (
		id     TEXT PRIMARY KEY,
		pruned INTEGER NOT NULL
	) WITHOUT ROWID;`,

	// 2: the report's release and device attributes as JSON (for the
	// pages' per-attribute counts), and crashes per day as a facet (the
	// group page's chart), backfilled from the kept reports.
	`ALTER TABLE reports ADD COLUMN release_json TEXT NOT NULL DEFAULT '{}';
	ALTER TABLE reports ADD COLUMN attributes TEXT NOT NULL DEFAULT '{}';
	INSERT INTO facets (group_id, facet, value, count, first_seen, last_seen)
		SELECT group_id, 'day', date(seen, 'unixepoch'), count(*), min(seen), max(seen)
		FROM reports GROUP BY group_id, date(seen, 'unixepoch');`,

	// 3: the build ids whose symbols each report lacked (" id1 id2 "),
	// so that new symbols resymbolize only the reports they can help.
	// Reports from before are resymbolized at the next change.
	`ALTER TABLE reports ADD COLUMN lacking TEXT NOT NULL DEFAULT '*';`,
}

// SchemaVersion is the PRAGMA user_version of a database this package
// made or migrated.
var SchemaVersion = len(migrations)

// migrate brings db to SchemaVersion, one transaction per step. A
// database newer than this binary is refused: its columns may mean
// something this code does not know.
func migrate(db *sql.DB) error {
	return migrateTo(db, len(migrations))
}

func migrateTo(db *sql.DB, target int) error {
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this unwound's (%d)", v, len(migrations))
	}
	for ; v < target; v++ {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("schema migration %d→%d: %w", v, v+1, err)
		}
		// PRAGMA takes no bound parameters.
		if _, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("schema migration %d→%d: %w", v, v+1, err)
		}
	}
	return nil
}
