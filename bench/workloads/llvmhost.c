/* Start-up benchmark target: maps libLLVM (dlopen, path in argv[1]) and
 * waits until stdin closes, so a tracer can attach to it with -p PID. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char c;
	if (argc < 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	while (read(0, &c, 1) == 1)
		;
	return 0;
}
