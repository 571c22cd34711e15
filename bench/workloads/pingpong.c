/*
 * pingpong.c - context switches for the --cpu benchmark (bench/why.py).
 *
 * Usage: pingpong <round trips>
 *
 * Two threads pinned to CPU 0 pass a byte back and forth through two pipes:
 * each round trip is two context switches. Each thread does all of its
 * round trips inside one call of traced_pingpong(), so with tachy tracing
 * it every switch is one of a thread with an open traced frame; traced
 * elsewhere (other_function, never called during the loop), none is.
 * Prints "ready <pid>", waits for a line on stdin, then prints
 * "switch_ns <ns per context switch>".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static long trips;

static void pin(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
        fprintf(stderr, "cannot pin to CPU 0\n");
        exit(1);
    }
}

__attribute__((noinline)) void traced_pingpong(int rd, int wr, int first)
{
    char c = 0;
    for (long i = 0; i < trips; i++) {
        if (first && write(wr, &c, 1) != 1)
            exit(1);
        if (read(rd, &c, 1) != 1)
            exit(1);
        if (!first && write(wr, &c, 1) != 1)
            exit(1);
    }
}

__attribute__((noinline)) int other_function(int x)
{
    return x * 3 + 1;
}

static void *echo(void *arg)
{
    (void)arg;
    pin();
    traced_pingpong(ab[0], ba[1], 0);
    return NULL;
}

int main(int argc, char **argv)
{
    trips = argc > 1 ? atol(argv[1]) : 100000;
    if (pipe(ab) || pipe(ba))
        return 1;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof(line), stdin) && ferror(stdin))
        return 1;
    pin();
    pthread_t t;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_create(&t, NULL, echo, NULL);
    traced_pingpong(ba[0], ab[1], 1);
    pthread_join(t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("switch_ns %.1f\n", ns / (2.0 * trips));
    printf("other %d\n", other_function(argc));
    return 0;
}
