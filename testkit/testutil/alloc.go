package testutil

import "runtime"

// Allocated runs f and returns the bytes allocated meanwhile, for tests
// that bound what a hostile input costs a parser.
func Allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}
