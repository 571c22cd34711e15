/* Start-up benchmark target: maps libLLVM (dlopen, path in argv[1]) and
 * waits until stdin closes, so a tracer can attach to it with -p PID.
 * With "contexts" as argv[2], a thread also calls LLVMContextCreate() and
 * LLVMContextDispose() in turn, about 1,000 times a second: a function of
 * the library with call sites of its own, for `tachy explore` to drill
 * into (bench/explore.py). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *(*create)(void);
static void (*dispose)(void *);

static void *contexts(void *arg)
{
	struct timespec ms = { 0, 1000000 };
	(void)arg;
	for (;;) {
		dispose(create());
		nanosleep(&ms, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char c;
	pthread_t t;
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	if (argc > 2 && !strcmp(argv[2], "contexts")) {
		create = (void *(*)(void))dlsym(h, "LLVMContextCreate");
		dispose = (void (*)(void *))dlsym(h, "LLVMContextDispose");
		if (!create || !dispose) {
			fprintf(stderr, "dlsym: %s\n", dlerror());
			return 1;
		}
		pthread_create(&t, NULL, contexts, NULL);
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (read(0, &c, 1) == 1)
		;
	return 0;
}
