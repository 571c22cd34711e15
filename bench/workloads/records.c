/* --record-slower-than: slow calls at a steady rate.
 *
 * Usage: records N [RATE]
 * Prints "ready PID", waits for one byte on stdin (the go signal), then
 * calls traced_slow(i, N) N times at RATE calls per second (default
 * 10000): call i starts at t0 + i / RATE, after a spin to that moment.
 * Each call spins 20 us from its own start, so every call is slower than a
 * 10 us threshold. The caller times each call with
 * clock_gettime(CLOCK_MONOTONIC) and prints
 *   "calls N ns_per_call X.XXX mean_ns Y.YYY rate R"
 * where X is the median time of one call (what the probes add shows in it;
 * the pacing does not; a call preempted by another program on a busy
 * machine does not move it as it moves the mean Y) and R the calls per
 * second achieved. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

__attribute__((noinline, noclone)) long traced_slow(long i, long n)
{
	double end = now_ns() + 20000.0;
	long spins = 0;
	while (now_ns() < end)
		spins++;
	sink = spins;
	return i + n;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	double rate = argc > 2 ? atof(argv[2]) : 10000.0;
	double step = 1e9 / rate, inside = 0.0;
	double *took = calloc(n > 0 ? (size_t)n : 1, sizeof(double));
	char go;
	if (!took)
		return 2;
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	if (read(0, &go, 1) != 1)
		return 3;
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		while (now_ns() < t0 + (double)i * step)
			;
		double a = now_ns();
		sink = traced_slow(i, n);
		took[i] = now_ns() - a;
		inside += took[i];
	}
	double t1 = now_ns();
	qsort(took, (size_t)n, sizeof(double), by_value);
	printf("calls %ld ns_per_call %.3f mean_ns %.3f rate %.0f\n", n,
	       n > 0 ? took[n / 2] : 0.0, inside / (double)(n > 0 ? n : 1),
	       (double)n * 1e9 / (t1 - t0));
	fflush(stdout);
	return 0;
}
