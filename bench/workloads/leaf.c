/* (d): a leaf function that is only `lea 0x1(%rdi),%eax; ret`. */
#include "harness.h"

volatile int sink;

__attribute__((noinline, noclone)) int traced_leaf(int x)
{
	return x + 1;
}

void bench_call(long i)
{
	sink = traced_leaf((int)i);
}
