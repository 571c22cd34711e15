/* bench/inlined.py: `work` is static inline. Built plain, bench_call's
 * call of it is inlined (tachy times the inlined instance); built with
 * -DOUT_OF_LINE it is called through a pointer, which leaves one
 * out-of-line copy (timed as any function, by tachy and by bpftrace). */
#include "harness.h"

volatile long sink;

static inline long work(long x)
{
	long acc = x;
	for (int k = 0; k < 8; k++)
		acc = acc * 31 + k;
	sink = acc;
	return acc;
}

#ifdef OUT_OF_LINE
long (*volatile work_ptr)(long) = work;
#endif

__attribute__((noinline)) void bench_call(long i)
{
#ifdef OUT_OF_LINE
	sink = work_ptr(i);
#else
	sink = work(i);
#endif
}
