/* The symbolization benchmark's program: 63 threads parked at call depths
 * of 4 to 32 frames (two mutually recursive functions with an inlined
 * helper), then main crashes: a report with 64 threads. */
#include <pthread.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t ready;
static volatile int sink;

static inline int mix(int x) { return x * 31 + 7; }

NOINLINE static void park(void) {
	pthread_barrier_wait(&ready);
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&never, &mu);
}

NOINLINE static void down_a(int n);

NOINLINE static void down_b(int n) {
	sink = mix(n);
	if (n > 0)
		down_a(n - 1);
	else
		park();
	sink++; /* no tail call */
}

NOINLINE static void down_a(int n) {
	sink = mix(n) ^ 1;
	if (n > 0)
		down_b(n - 1);
	else
		park();
	sink++;
}

static void *worker(void *arg) {
	down_a((int)(long)arg);
	return 0;
}

int main(void) {
	pthread_t t[63];
	pthread_barrier_init(&ready, 0, 64);
	for (long i = 0; i < 63; i++)
		pthread_create(&t[i], 0, worker, (void *)(4 + i % 29));
	pthread_barrier_wait(&ready);
	usleep(50000); /* let every thread reach pthread_cond_wait */
	*(volatile int *)0 = 1;
	return 0;
}
