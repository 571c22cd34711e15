/*
 * tails.c - fixture of the arm64 suite (tests/arm64/): the exit kinds of
 * AArch64 code besides a plain `ret`, from C that GCC -O2 compiles to them.
 *
 * Usage:  tails <iterations=20>
 *
 * Protocol: as every fixture (see tests/fixtures/plain.c). Per iteration:
 *   tail_direct(i)     spins, then `return chain_end(i)`: its frame is torn
 *                      down and it leaves by `b chain_end`
 *   tail_reg(fn, i)    spins, then `return fn(i)` through a pointer read
 *                      from a volatile global: leaves by `br`
 *   chain_end(i)       called once by each of the two above (so twice):
 *                      spins, calls spin_leaf, returns with `ret`
 *   spin_leaf(i)       a leaf without a frame: its entry probe stands on
 *                      its first instruction; called by chain_end
 * Then "count <function> <calls>" for each, and "done".
 */
#define _POSIX_C_SOURCE 200809L

#include <time.h>

#include "fixture.h"

#define NOINLINE __attribute__((noinline, noclone))

static unsigned long n_direct, n_reg, n_end, n_leaf;
static volatile long g_sink;

/* One thread: plain increments (an atomic one is a call to libgcc's
 * outline atomics on arm64, which would make spin_leaf no leaf). */
static void bump(unsigned long *n)
{
	*n += 1;
}

/* Sleeps ~us microseconds: each call lasts far longer than its probes. */
NOINLINE void nap(long us)
{
	struct timespec ts = {0, us * 1000};

	nanosleep(&ts, NULL);
}

NOINLINE long spin_leaf(long n)
{
	long s = 0;

	bump(&n_leaf);
	for (long i = 0; i < 2000; i++)
		s += i ^ n;
	return s;
}

NOINLINE long chain_end(long n)
{
	bump(&n_end);
	nap(200);
	return spin_leaf(n) + 1;
}

NOINLINE long tail_direct(long n)
{
	bump(&n_direct);
	nap(200);
	return chain_end(n);
}

long (*volatile g_next)(long) = chain_end;

NOINLINE long tail_reg(long n)
{
	long (*fn)(long) = g_next;

	bump(&n_reg);
	nap(200);
	return fn(n);
}

int main(int argc, char **argv)
{
	int iterations = argc > 1 ? atoi(argv[1]) : 20;

	fixture_ready();
	fixture_wait_go();
	for (int i = 0; i < iterations; i++) {
		g_sink += tail_direct(i);
		g_sink += tail_reg(i);
	}
	printf("count tail_direct %lu\n", n_direct);
	printf("count tail_reg %lu\n", n_reg);
	printf("count chain_end %lu\n", n_end);
	printf("count spin_leaf %lu\n", n_leaf);
	printf("done\n");
	fflush(stdout);
	return 0;
}
