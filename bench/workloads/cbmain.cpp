// (g), the program half: a C++ callback that throws on every call, passed
// to the C library's cb_apply; the exception unwinds through cb_apply's
// frame and is caught here.
#include <stdexcept>

#include "harness.h"

extern "C" int cb_apply(int (*fn)(int), int x);

volatile int sink;

static int throwing_callback(int x)
{
	if (x >= 0)
		throw std::runtime_error("from the callback");
	return x;
}

extern "C" void bench_call(long i)
{
	try {
		sink = cb_apply(throwing_callback, (int)i);
	} catch (const std::runtime_error &) {
		sink = -1;
	}
}
