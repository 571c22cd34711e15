/* (a) and (b): a function with a frame-pointer prologue that calls a helper.
 * Built with -fno-omit-frame-pointer: the first instruction is `push %rbp`
 * (after `endbr64` when built with -fcf-protection). */
#include "harness.h"

volatile int sink;

__attribute__((noinline, noclone)) int helper(int x)
{
	sink = x;
	return x ^ 0x5a;
}

__attribute__((noinline, noclone)) int traced_push(int x)
{
	int y = helper(x);
	return y * 3 + x;
}

void bench_call(long i)
{
	sink = traced_push((int)i);
}
