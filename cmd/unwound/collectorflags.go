package main

import "flag"

// collectorFlags are the flags of commands that open a collector
// directory: where symbols are, retention. The signature rules are the
// directory's own (DIR/signature.toml).
type collectorFlags struct {
	dirs     multiFlag
	sysroot  string
	keepDays int
	maxBytes int64
}

func (cf *collectorFlags) register(fs *flag.FlagSet, retention bool) {
	fs.Var(&cf.dirs, "debug-dir", "debug file `directory` (.build-id tree, <dir>/<path>.debug), searched after DIR/symbols; repeatable")
	fs.StringVar(&cf.sysroot, "sysroot", "", "the target's root filesystem `dir`: report paths are looked up under it (default DIR/sysroot)")
	if retention {
		fs.IntVar(&cf.keepDays, "keep-days", 0, "prune reports received more than `N` days ago (0: keep them); groups keep their counts")
		fs.Int64Var(&cf.maxBytes, "max-bytes", 0, "prune the oldest reports while the kept reports exceed `N` bytes (0: no bound)")
	}
}
