/* The systemd guest's crashing program (qemu/systemd_test.go): a NULL
   store, so the kernel dumps it through whatever core_pattern holds. */
#include <stdio.h>

int main(void)
{
	volatile int *p = 0;
	printf("unwound-systemd: crashing\n");
	fflush(stdout);
	*p = 1;
	return 0;
}
