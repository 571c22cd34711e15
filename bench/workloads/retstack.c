/* bench/deeper.py: a C function (no unwinding code in the process: its
 * returns are uretprobes) that returns one of four values, reached from
 * main through two callers, built with frame pointers so that its callers
 * can be walked in the kernel as well as copied and unwound. */
#include "harness.h"

volatile long sink;

__attribute__((noinline, noclone)) long helper(long x)
{
	sink = x;
	return x & 3;
}

/* push %rbp first (emulated by the kernel, as most functions' entries). */
__attribute__((noinline, noclone)) long traced_ret(long x)
{
	return helper(x) - 1;
}

__attribute__((noinline, noclone)) long route(long x)
{
	long r = traced_ret(x);
	sink = r;
	return r + 1;
}

void bench_call(long i)
{
	sink = route(i);
}
