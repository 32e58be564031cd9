/* Inlining test program for host/symbolize: built with -O2 -g by the
 * tests, never run. Static helpers get inlined, nested, into callers. */
#include <stdlib.h>

volatile int sink;

static inline int leaf(int v) { sink += v; return v * 3; }
static inline int mid(int v) { int r = leaf(v + 1); sink ^= r; return r + leaf(r); }
static int outer(int v) { int r = mid(v) + mid(v * 2); sink -= r; return r; }

__attribute__((noinline)) int work(int n) {
	int t = 0;
	for (int i = 0; i < n; i++)
		t += outer(i);
	return t;
}

int main(int argc, char **argv) {
	(void)argv;
	if (argc > 5)
		abort();
	return work(argc) + mid(argc);
}
