/* The privacy test's crash program (handler/privacy_test.go): argv[1], a
 * string secret, is copied to the stack and the heap; argv[2], a number
 * secret, sits in a register (r12 on x86_64) and is the faulting address.
 * The environment carries a third secret. */
#include <stdlib.h>
#include <string.h>
char *volatile heap;
__attribute__((noinline)) void crash(const char *s, unsigned long key) {
	char stackbuf[64];
	strcpy(stackbuf, s);
	heap = malloc(64);
	strcpy(heap, stackbuf);
	register unsigned long r asm("r12") = key;
	asm volatile("" ::"r"(r), "r"(stackbuf));
	*(volatile int *)key = 1;
}
int main(int argc, char **argv) {
	crash(argv[1], strtoul(argv[2], 0, 16));
	return 0;
}
