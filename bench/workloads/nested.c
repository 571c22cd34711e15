/* (f): a function with 8 call sites, for `tachy nested`. */
#include "harness.h"

volatile int sink;

__attribute__((noinline, noclone)) int step(int x)
{
	sink = x;
	return x * 5 + 1;
}

__attribute__((noinline, noclone)) int traced_nested(int x)
{
	int a = step(x);
	a = step(a + 1);
	a = step(a + 2);
	a = step(a + 3);
	a = step(a + 4);
	a = step(a + 5);
	a = step(a + 6);
	a = step(a + 7);
	return a + x;
}

void bench_call(long i)
{
	sink = traced_nested((int)i);
}
