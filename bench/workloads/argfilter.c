/* --filter: a function of two integer arguments, called with key = i % 10.
 * Its entry probe stands on an emulated `je` (after `and $3,%esi`, so a
 * filter on key, in rdi, keeps it there), and a leaf gets a uretprobe: the
 * cheapest probes, against which what a filter adds shows most. */
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
