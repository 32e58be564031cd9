package testbin

import "testing"

// Collector runs `unwound serve`, the fleet's collector, on a free
// loopback port with args (--dir DIR and the rest) and returns once it
// listens.
func Collector(t testing.TB, args ...string) *Server {
	t.Helper()
	return Serve(t, Build(t, "unwound", ""), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
}
