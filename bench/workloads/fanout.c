/*
 * fanout.c - a process for the explorer's benchmark (bench/explore.py).
 *
 * Usage: fanout
 *
 * Prints "ready <pid>", then until killed calls fanout() about 1,000 times
 * a second (a 1 ms sleep between calls). fanout() holds 50 call sites: 49
 * calls of five small leaves and one of fan_mid(), which holds two call
 * sites of its own (the level a drill-down attaches).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void leaf_a(void) { sink += 1; }
__attribute__((noinline)) void leaf_b(void) { sink += 2; }
__attribute__((noinline)) void leaf_c(void) { sink += 3; }
__attribute__((noinline)) void leaf_d(void) { sink += 4; }
__attribute__((noinline)) void leaf_e(void) { sink += 5; }

__attribute__((noinline)) void fan_mid(void)
{
    leaf_a();
    leaf_b();
    sink += 6;
}

#define FIVE leaf_a(); leaf_b(); leaf_c(); leaf_d(); leaf_e();

__attribute__((noinline)) void fanout(void)
{
    fan_mid();
    FIVE FIVE FIVE FIVE FIVE FIVE FIVE FIVE FIVE
    leaf_a(); leaf_b(); leaf_c(); leaf_d();
    sink += 7;
}

int main(void)
{
    printf("ready %d\n", getpid());
    fflush(stdout);
    struct timespec ms = { 0, 1000000 };
    for (;;) {
        fanout();
        nanosleep(&ms, NULL);
    }
}
