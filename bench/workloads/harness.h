/* Shared driver for the benchmark workloads (C and C++).
 *
 * Usage: WORKLOAD N [WARMUP]
 * Prints "ready PID" on stdout, waits for one byte on stdin (the go signal,
 * sent once the tracer is attached), runs WARMUP calls, then times N calls
 * with clock_gettime(CLOCK_MONOTONIC) and prints
 *   "calls TOTAL ns_per_call X.XXX"
 * where TOTAL = WARMUP + N is every call the process made to the traced
 * function (what a tracer should count).
 *
 * A workload defines bench_call(i), which calls the traced function once. */
#ifndef BENCH_HARNESS_H
#define BENCH_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The ready line, as the test fixtures print it; the go signal here is one
 * byte, without FIXTURE_NO_WAIT. */
#include "../../tests/fixtures/fixture.h"

#ifdef __cplusplus
extern "C" {
#endif
void bench_call(long i);
#ifdef __cplusplus
}
#endif

static double bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	long warm = argc > 2 ? atol(argv[2]) : 1000;
	char go;
	fixture_ready();
	if (read(0, &go, 1) != 1)
		return 3;
	for (long i = 0; i < warm; i++)
		bench_call(i);
	double t0 = bench_now_ns();
	for (long i = 0; i < n; i++)
		bench_call(i);
	double t1 = bench_now_ns();
	printf("calls %ld ns_per_call %.3f\n", warm + n, (t1 - t0) / (double)n);
	fflush(stdout);
	return 0;
}

#endif
