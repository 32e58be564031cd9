static int __attribute__((noinline)) leaf(volatile int *p) { return *p + 1; }
static int __attribute__((noinline)) mid(volatile int *p) { return leaf(p) * 2; }
int entry(volatile int *p) { return mid(p) + 3; }
void _start(void) { volatile int x = 1; entry(&x); for (;;) ; }
