/* A process with three threads whose second thread writes through NULL.
 * The crashing thread writes its tid to ./tid first. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *spin(void *a) { (void)a; for (;;) pause(); return 0; }

static void *crash(void *a) {
	(void)a;
	FILE *f = fopen("tid", "w");
	fprintf(f, "%ld\n", (long)syscall(SYS_gettid));
	fclose(f);
	*(volatile int *)0 = 1;
	return 0;
}

int main(void) {
	pthread_t t;
	pthread_create(&t, 0, spin, 0);
	usleep(10000);
	pthread_create(&t, 0, crash, 0);
	for (;;) pause();
}
