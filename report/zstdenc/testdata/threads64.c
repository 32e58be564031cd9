/* threads64: 64 threads parked at different depths in a few call chains
 * (a thread pool, workers, timers), then a crash in main: the shape of
 * a busy embedded daemon's report. */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <math.h>

#define NOINLINE __attribute__((noinline))
static volatile int sink, parked;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

NOINLINE static void park(void) {
	pthread_mutex_lock(&mu);
	parked++;
	for (;;)
		pthread_cond_wait(&never, &mu);
}
NOINLINE static void sleeper(void) {
	__atomic_add_fetch(&parked, 1, __ATOMIC_SEQ_CST);
	for (;;) pause();
}
NOINLINE static int deep(int n, int kind) {
	volatile double x = sqrt((double)n);
	if (n == 0) {
		if (kind & 1) park(); else sleeper();
	}
	return deep(n - 1, kind) + (int)x;
}
NOINLINE static void *pool(void *p) { sink += deep(3 + ((long)p % 5), 0); return p; }
NOINLINE static void *worker(void *p) { sink += deep(8 + ((long)p % 23), 1); return p; }
NOINLINE static void *timer(void *p) { sink += deep(1, (long)p); return p; }

int main(void) {
	pthread_t t[64];
	for (long i = 0; i < 64; i++)
		pthread_create(&t[i], 0, i % 3 == 0 ? pool : i % 3 == 1 ? worker : timer, (void *)i);
	while (parked < 64) usleep(1000);
	usleep(50000);
	write(1, "ready\n", 6);
	for (;;) pause();
}
