// (e): a C++ function an exception passes through on every call: it calls
// a helper that throws, and the caller catches.
#include <stdexcept>

#include "harness.h"

volatile int sink;

struct Guard {
	int v;
	explicit Guard(int x) : v(x) { sink = x; }
	~Guard() { sink = v + 1; }
};

__attribute__((noinline, noclone)) int thrower(int x)
{
	if (x >= 0)
		throw std::runtime_error("boom");
	return -x;
}

namespace bench {
__attribute__((noinline, noclone)) int pass_through(int x)
{
	Guard g(x);
	int r = thrower(x);
	return r + g.v;
}
} // namespace bench

extern "C" void bench_call(long i)
{
	try {
		sink = bench::pass_through((int)i);
	} catch (const std::runtime_error &) {
		sink = -1;
	}
}
