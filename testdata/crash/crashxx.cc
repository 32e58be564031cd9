// C++ crash scenario for unwound's tests: an uncaught exception thrown three
// calls deep ends in std::terminate -> abort, through libstdc++ and libgcc.
#include <cstring>
#include <stdexcept>

#define NOINLINE __attribute__((noinline))

volatile int sink;

NOINLINE static void thrower(int v) {
	if (v > 0)
		throw std::runtime_error("unwound test exception");
	sink++;
}
NOINLINE static void level2(int v) { thrower(v + 1); sink++; }
NOINLINE static void level1(int v) { level2(v + 1); sink++; }

int main(int argc, char **argv) {
	if (argc > 1 && std::strcmp(argv[1], "throw") != 0)
		return 2;
	level1(argc);
	return 0;
}
