/* The privacy test's crash program (handler/privacy_test.go): argv[1], a
 * string secret, is copied to the stack and the heap; argv[2], a number
 * secret, sits in a register (r12 on x86_64) and is the faulting address.
 * The environment carries a third secret. With argv[3] = "jump" the
 * program calls the number secret as a function instead: the crashing PC is
 * the secret, outside every executable mapping. */
#include <stdlib.h>
#include <string.h>
char *volatile heap;
__attribute__((noinline)) void crash(const char *s, unsigned long key, int jump) {
	char stackbuf[64];
	strcpy(stackbuf, s);
	heap = malloc(64);
	strcpy(heap, stackbuf);
	register unsigned long r asm("r12") = key;
	asm volatile("" ::"r"(r), "r"(stackbuf));
	if (jump)
		((void (*)(void))key)();
	*(volatile int *)key = 1;
}
int main(int argc, char **argv) {
	crash(argv[1], strtoul(argv[2], 0, 16), argc > 3 && strcmp(argv[3], "jump") == 0);
	return 0;
}
