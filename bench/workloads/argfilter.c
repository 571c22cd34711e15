/* --filter: a function of two integer arguments, called with key = i % 10;
 * it starts with `push`, so the entry probe is emulated and what a filter
 * adds to it shows. */
#include "harness.h"

volatile long sink;

__attribute__((noinline, noclone)) long traced_args(long key, long n)
{
	long s = 0;
	for (long j = 0; j < (n & 3); j++)
		s += key ^ j;
	sink = s;
	return s + key;
}

void bench_call(long i)
{
	traced_args(i % 10, i);
}
