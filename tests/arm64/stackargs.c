/*
 * stackargs.c - fixture of the arm64 suite (tests/arm64/): a function with
 * more integer parameters than AAPCS64 has registers for, so that its
 * ninth and tenth come on the stack.
 *
 * Usage:  stackargs <iterations=100>
 *
 * Protocol: as every fixture (see tests/fixtures/plain.c). Per iteration i:
 * wide10(i, ..., i % 10 + 100, i % 5 + 200): a8 is i % 10 + 100 and a9
 * i % 5 + 200. Then "count wide10 <calls>" and "done".
 */
#include "fixture.h"

#define NOINLINE __attribute__((noinline, noclone))

static unsigned long n_wide;
static volatile long g_sink;

NOINLINE long wide10(long a0, long a1, long a2, long a3, long a4, long a5,
		     long a6, long a7, long a8, long a9)
{
	n_wide++;
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 * a9;
}

int main(int argc, char **argv)
{
	int iterations = argc > 1 ? atoi(argv[1]) : 100;

	fixture_ready();
	fixture_wait_go();
	for (long i = 0; i < iterations; i++)
		g_sink += wide10(i, 1, 2, 3, 4, 5, 6, i % 3, i % 10 + 100, i % 5 + 200);
	printf("count wide10 %lu\n", n_wide);
	printf("done\n");
	fflush(stdout);
	return 0;
}
