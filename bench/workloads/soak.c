/* Workload of `make soak` (bench/soak.py): every mode calls soak_fn and
 * prints "calls N", where N is every call to soak_fn the process and its
 * threads or children made (what a tracer must count).
 *
 * Usage:
 *   soak rate SECONDS RATE    calls soak_fn RATE times a second (in bursts
 *                             of 1000, paced on CLOCK_MONOTONIC) for
 *                             SECONDS, then prints "calls N seconds S"
 *   soak threads TOTAL BATCH CALLS
 *                             starts TOTAL threads, BATCH at a time, each
 *                             making CALLS calls and exiting; after
 *                             "calls N", waits for a second line on stdin
 *                             before it exits (the tracer is still
 *                             attached then)
 *   soak proc CALLS           makes CALLS calls and exits
 *   soak hold                 makes no call; exits on a second line on stdin
 *   soak fork CHILDREN CALLS  forks CHILDREN children, 10 alive at a time,
 *                             each making CALLS calls and exiting; the
 *                             parent makes CALLS calls itself too
 *
 * Every mode prints "ready PID" first; unless FIXTURE_NO_WAIT=1, it then
 * waits for one line on stdin (sent once the tracer is attached). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline, noclone)) long soak_fn(long x)
{
	sink = x;
	return x * 3 + 1;
}

static long calls_per_thread;

static void *thread_main(void *arg)
{
	(void)arg;
	for (long i = 0; i < calls_per_thread; i++)
		sink = soak_fn(i);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void wait_line(void)
{
	char buf[64];
	if (!fgets(buf, sizeof buf, stdin))
		exit(3);
}

static long run_rate(double seconds, double rate)
{
	double start = now_s(), end = start + seconds;
	long n = 0;
	for (;;) {
		double now = now_s();
		if (now >= end)
			break;
		/* Behind schedule: run a burst; ahead: sleep until due. */
		double due = start + (double)n / rate;
		if (now < due) {
			struct timespec ts = {0, (long)((due - now) * 1e9)};
			nanosleep(&ts, NULL);
			continue;
		}
		for (int i = 0; i < 1000; i++)
			sink = soak_fn(n++);
	}
	printf("calls %ld seconds %.3f\n", n, now_s() - start);
	return n;
}

static long run_threads(long total, long batch, long calls)
{
	pthread_t *t = calloc((size_t)batch, sizeof *t);
	long started = 0;
	if (!t)
		exit(4);
	calls_per_thread = calls;
	while (started < total) {
		long k = total - started < batch ? total - started : batch;
		for (long i = 0; i < k; i++)
			if (pthread_create(&t[i], NULL, thread_main, NULL)) {
				perror("pthread_create");
				exit(4);
			}
		for (long i = 0; i < k; i++)
			pthread_join(t[i], NULL);
		started += k;
	}
	free(t);
	return started * calls;
}

static long run_fork(long children, long calls)
{
	long done = 0, alive = 0, n = 0;
	int status;
	for (long c = 0; c < children; c++) {
		if (alive == 10) {
			if (wait(&status) > 0 && WIFEXITED(status) &&
			    WEXITSTATUS(status) == 0)
				done++;
			alive--;
		}
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			break;
		}
		if (pid == 0) {
			for (long i = 0; i < calls; i++)
				sink = soak_fn(i);
			_exit(0);
		}
		alive++;
	}
	while (alive > 0) {
		if (wait(&status) > 0 && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 0)
			done++;
		alive--;
	}
	for (long i = 0; i < calls; i++)
		sink = soak_fn(i);
	n = (done + 1) * calls;
	if (done != children)
		fprintf(stderr, "soak: only %ld of %ld children exited 0\n", done,
			children);
	return n;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const char *nowait = getenv("FIXTURE_NO_WAIT");
	long n = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	if (!nowait || strcmp(nowait, "1") != 0)
		wait_line();
	if (!strcmp(mode, "rate") && argc == 4) {
		run_rate(atof(argv[2]), atof(argv[3]));
		return 0;
	} else if (!strcmp(mode, "threads") && argc == 5) {
		n = run_threads(atol(argv[2]), atol(argv[3]), atol(argv[4]));
		printf("calls %ld\n", n);
		wait_line();
		return 0;
	} else if (!strcmp(mode, "proc") && argc == 3) {
		long calls = atol(argv[2]);
		for (long i = 0; i < calls; i++)
			sink = soak_fn(i);
		n = calls;
	} else if (!strcmp(mode, "hold") && argc == 2) {
		wait_line();
		return 0;
	} else if (!strcmp(mode, "fork") && argc == 4) {
		n = run_fork(atol(argv[2]), atol(argv[3]));
	} else {
		fprintf(stderr, "usage: soak rate|threads|proc|hold|fork ...\n");
		return 2;
	}
	printf("calls %ld\n", n);
	return 0;
}
