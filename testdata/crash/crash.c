/*
 * Crash scenarios for unwound's tests: each one dies in a way that stresses
 * a different part of the unwinder. Run as `crash SCENARIO`.
 *
 * Every function is noinline and does a little work after its call, so
 * -O2 keeps real frames instead of tail calls; the unwinder must then
 * recover them from unwind tables alone (-fomit-frame-pointer).
 */
#define _GNU_SOURCE
#include <alloca.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

volatile int sink;
static volatile int *volatile null_ptr;

NOINLINE static void null_write(int v) { *null_ptr = v; sink++; }

/* nullwrite: a NULL store four calls deep. */
NOINLINE static void nw3(int v) { null_write(v + 1); sink++; }
NOINLINE static void nw2(int v) { nw3(v + 1); sink++; }
NOINLINE static void nw1(int v) { nw2(v + 1); sink++; }

/* abort: the noreturn call is the caller's last instruction, so its return
 * address points past the function: lookups must use pc-1. */
NOINLINE static void ab2(int v) { sink = v; abort(); }
NOINLINE static void ab1(int v) { ab2(v + 1); sink++; }

/* sighandler / sigaltstack: the crash happens inside a handler; the trace
 * must cross the signal frame back into the interrupted code. */
NOINLINE static void in_handler2(int v) { null_write(v); sink++; }
NOINLINE static void in_handler(int v) { in_handler2(v + 1); sink++; }
static void handler(int sig, siginfo_t *si, void *uc) { (void)si; (void)uc; in_handler(sig); sink++; }
NOINLINE static void raiser2(void) { raise(SIGUSR1); sink++; }
NOINLINE static void raiser1(void) { raiser2(); sink++; }
static void install(int onstack) {
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | (onstack ? SA_ONSTACK : 0);
	if (onstack) {
		static char altstack[64 * 1024];
		stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
		sigaltstack(&ss, 0);
	}
	sigaction(SIGUSR1, &sa, 0);
}

/* threads: three threads parked in distinct call chains while main crashes. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static volatile int parked;
NOINLINE static void park(void) {
	pthread_mutex_lock(&mu);
	parked++;
	for (;;)
		pthread_cond_wait(&never, &mu);
}
NOINLINE static void sleeper2(void) { for (;;) { __atomic_add_fetch(&parked, 1, __ATOMIC_SEQ_CST); pause(); } }
NOINLINE static void *t_a2(void *p) { park(); return p; }
NOINLINE static void *t_a(void *p) { sink++; return t_a2(p); }
NOINLINE static void *t_b(void *p) { sleeper2(); return p; }
NOINLINE static void t_c3(void) { park(); sink++; }
NOINLINE static void t_c2(void) { t_c3(); sink++; }
NOINLINE static void *t_c(void *p) { t_c2(); return p; }
NOINLINE static void threads(void) {
	pthread_t t[3];
	pthread_create(&t[0], 0, t_a, 0);
	pthread_create(&t[1], 0, t_b, 0);
	pthread_create(&t[2], 0, t_c, 0);
	while (parked < 3)
		usleep(1000);
	usleep(20000); /* let every thread reach its blocking call */
	nw1(7);
}

/* alloca: dynamic stack allocation changes the CFA rule mid-function. */
NOINLINE static void vla(int n) {
	int a[n];
	for (int i = 0; i < n; i++)
		a[i] = i;
	sink = a[n / 2];
	null_write(a[1]);
	sink++;
}
NOINLINE static void with_alloca(int n) {
	char *p = alloca(n);
	memset(p, 1, n);
	sink = p[n - 1];
	vla(n / 8 + 3);
	sink++;
}

/* recursion: unbounded, until the stack overflows. */
NOINLINE static int recurse(int n) {
	volatile char pad[64];
	pad[n & 63] = (char)n;
	return recurse(n + 1) + pad[(n + 1) & 63];
}

/* nullfn: a call through a NULL function pointer: PC 0 in frame 0. */
static void (*volatile null_fn)(int);
NOINLINE static void nf2(int v) { null_fn(v); sink++; }
NOINLINE static void nf1(int v) { nf2(v + 1); sink++; }

/* memcpy / raise: the crash is inside libc, which on musl has no unwind
 * tables: memcpy through a wild pointer, raise(SIGBUS) with the default
 * action. */
static char *volatile wild_ptr = (char *)16;
NOINLINE static void mc2(int v) { static char buf[256]; memcpy(wild_ptr, buf, 64 + (size_t)v); sink++; }
NOINLINE static void mc1(int v) { mc2(v + 1); sink++; }
NOINLINE static void rs2(int v) { sink = v; raise(SIGBUS); sink++; }
NOINLINE static void rs1(int v) { rs2(v + 1); sink++; }

/* chainstore (issue 25): the crash is in a leaf store reached through
 * three small non-leaf functions; each calls the next, then stores the
 * result to a global, so none is a tail call. On ARM and Thumb GCC gives
 * each a two-register push around its call. */
int cs_g1, cs_g2, cs_g3;
NOINLINE static int cs_leaf(int v) { *null_ptr = v; return v + 1; }
NOINLINE static int cs_l3(int v) { int r = cs_leaf(v + 1); cs_g3 = r; return r; }
NOINLINE static int cs_l2(int v) { int r = cs_l3(v + 1); cs_g2 = r; return r; }
NOINLINE static int cs_l1(int v) { int r = cs_l2(v + 1); cs_g1 = r; return r; }

/* killhandler (issue 25): a signal handler that crashes, the signal sent
 * by kill(getpid(), ...), so the interrupted PC is inside libc's kill
 * (which has no CFI in musl). */
NOINLINE static void kh2(int v) { null_write(v * 3); sink += 2; }
NOINLINE static void kh1(int v) { kh2(v + 5); sink += 3; }
static void kill_handler(int sig) { kh1(sig); sink++; }
NOINLINE static void killer2(void) { kill(getpid(), SIGUSR1); sink++; }
NOINLINE static void killer1(void) { killer2(); sink++; }

/* deeprec (issue 25): DEEPREC frames of a recursive function that keeps a
 * frame (a small local array, a non-tail call) and crashes at the bottom:
 * gdb walks every frame, well inside the handler's frame budget. */
#define DEEPREC 200
NOINLINE static int deep(int n) {
	volatile char pad[16];
	pad[n & 15] = (char)n;
	if (n == 1) {
		null_write(n);
		return pad[0];
	}
	return deep(n - 1) + pad[(n + 1) & 15];
}

/* pltstub (issue 25): frame 0 inside a PLT stub, its return address
 * still in the link register (on x86_64 at the top of the stack) and SP
 * untouched. The pages holding the program's PLT slots (the GOT entries
 * its stubs jump through) are made inaccessible, then memchr is called
 * through its stub: the stub's load of the slot faults, so the PC is
 * inside the stub (.plt, .plt.sec; .iplt in a static glibc program, where
 * memchr is an IFUNC on x86_64, AArch64 and ARM). Programs without PLT
 * slots (static musl, static RISC-V glibc) say so and exit 3. */
static uintptr_t slot_lo = UINTPTR_MAX, slot_hi;
static volatile size_t plt_len = 1;
static void add_slot(uintptr_t slot) {
	if (slot < slot_lo)
		slot_lo = slot;
	if (slot > slot_hi)
		slot_hi = slot;
}
static int find_plt(struct dl_phdr_info *info, size_t size, void *data) {
	uintptr_t jmprel = 0, relsz = 0, pltrel = 0;
	(void)size, (void)data;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		for (ElfW(Dyn) *d = (ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr); d->d_tag != DT_NULL; d++) {
			if (d->d_tag == DT_JMPREL)
				jmprel = d->d_un.d_ptr;
			else if (d->d_tag == DT_PLTRELSZ)
				relsz = d->d_un.d_val;
			else if (d->d_tag == DT_PLTREL)
				pltrel = d->d_un.d_val;
		}
	}
	/* glibc relocates the dynamic section's pointers in place, musl not. */
	if (jmprel && jmprel < info->dlpi_addr)
		jmprel += info->dlpi_addr;
	size_t ent = pltrel == DT_RELA ? sizeof(ElfW(Rela)) : sizeof(ElfW(Rel));
	for (size_t off = 0; jmprel && off < relsz; off += ent)
		add_slot(info->dlpi_addr + ((const ElfW(Rel) *)(jmprel + off))->r_offset);
	return 1; /* the program is the first object: stop there */
}
#if defined(__arm__)
#define IREL ElfW(Rel)
extern const IREL __rel_iplt_start[] __attribute__((weak)), __rel_iplt_end[] __attribute__((weak));
#define IPLT_START __rel_iplt_start
#define IPLT_END __rel_iplt_end
#else
#define IREL ElfW(Rela)
extern const IREL __rela_iplt_start[] __attribute__((weak)), __rela_iplt_end[] __attribute__((weak));
#define IPLT_START __rela_iplt_start
#define IPLT_END __rela_iplt_end
#endif
NOINLINE static void pl2(const char *s) {
	uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	size_t len = plt_len; /* globals may share the protected pages */
	dl_iterate_phdr(find_plt, 0);
	for (const IREL *r = IPLT_START; r && r < IPLT_END; r++)
		add_slot(r->r_offset); /* static: no load bias */
	if (slot_hi == 0) {
		fprintf(stderr, "pltstub: no PLT slot in this program\n");
		exit(3);
	}
	/* One call: mprotect's own slot is among those protected. */
	uintptr_t lo = slot_lo & ~(ps - 1), hi = (slot_hi | (ps - 1)) + 1;
	if (mprotect((void *)lo, hi - lo, PROT_NONE) != 0)
		abort();
	sink = memchr(s, 0, len) != 0;
}
NOINLINE static void pl1(const char *s) { pl2(s + 1); sink++; }

int main(int argc, char **argv) {
	const char *s = argc > 1 ? argv[1] : "nullwrite";
	if (!strcmp(s, "nullwrite"))
		nw1(argc);
	else if (!strcmp(s, "abort"))
		ab1(argc);
	else if (!strcmp(s, "sighandler")) {
		install(0);
		raiser1();
	} else if (!strcmp(s, "sigaltstack")) {
		install(1);
		raiser1();
	} else if (!strcmp(s, "threads"))
		threads();
	else if (!strcmp(s, "alloca"))
		with_alloca(100 + argc);
	else if (!strcmp(s, "recursion"))
		sink = recurse(argc);
	else if (!strcmp(s, "nullfn"))
		nf1(argc);
	else if (!strcmp(s, "memcpy"))
		mc1(argc);
	else if (!strcmp(s, "raise"))
		rs1(argc);
	else if (!strcmp(s, "chainstore"))
		sink = cs_l1(argc);
	else if (!strcmp(s, "killhandler")) {
		signal(SIGUSR1, kill_handler);
		killer1();
	} else if (!strcmp(s, "deeprec"))
		sink = deep(DEEPREC + argc - 2);
	else if (!strcmp(s, "pltstub"))
		pl1(argv[0]);
	else {
		fprintf(stderr, "unknown scenario %s\n", s);
		return 2;
	}
	return 0;
}
