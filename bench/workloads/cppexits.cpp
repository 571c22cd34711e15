/* (h) and (i): a C++ function in an object with exception tables, `push`
 * first, that calls a helper and returns normally. Built twice: (h) the
 * helper cannot throw, so tachy may time the return with a uretprobe; (i)
 * with -DHELPER_MAY_THROW the helper throws on a value the run never
 * passes, so tachy keeps probes on each `ret` (an exception could pass). */
#include <stdexcept>

#include "harness.h"

volatile int sink;

__attribute__((noinline, noclone)) int helper(int x)
{
#ifdef HELPER_MAY_THROW
	if (x < 0)
		throw std::invalid_argument("negative");
#endif
	sink = x;
	return x ^ 0x5a;
}

namespace bench {
__attribute__((noinline, noclone)) int traced(int x)
{
	int y = helper(x);
	return y * 3 + x;
}
} // namespace bench

/* Run once at start-up: it gives the object exception tables and an
 * import of __cxa_throw in both builds, as any C++ service has. */
volatile int never;

__attribute__((noinline)) static int start_up()
{
	try {
		if (never)
			throw std::runtime_error("never");
	} catch (const std::exception &) {
		return -1;
	}
	return 0;
}

static int started = start_up();

extern "C" void bench_call(long i)
{
	try {
		sink = bench::traced((int)i) + started;
	} catch (const std::exception &) {
		sink = -1;
	}
}
