// Package loadtest drives a real `unwound serve` process over HTTP, as a
// fleet and a hostile client would: bad input of every kind, memory
// under parallel zstd bombs, a full disk, load from many simulated
// devices, and kill -9 during ingest. It holds tests and benchmarks only;
// docs/collector-limits.md has the figures.
package loadtest
