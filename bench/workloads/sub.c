/* (c): a function whose first instruction is `sub $N,%rsp`: a local array
 * passed to a helper, built with -fomit-frame-pointer. */
#include "harness.h"

volatile int sink;

__attribute__((noinline, noclone)) int fill(int *a, int x)
{
	for (int k = 0; k < 4; k++)
		a[k] = x + k;
	return a[sink & 3];
}

__attribute__((noinline, noclone)) int traced_sub(int x)
{
	int buf[8];
	int r = fill(buf, x);
	return r + buf[1];
}

void bench_call(long i)
{
	sink = traced_sub((int)i);
}
