/*
 * kinds.c - fixture of the arm64 bench and probe-time check (tests/arm64/):
 * one function per kind of instruction tachy probes on AArch64, written in
 * assembly so that the instructions under the probes are known exactly,
 * each with an untraced twin (suffix _u) timed right after it in every
 * iteration.
 *
 * Usage:  kinds <function> <iterations> <spin>
 *
 * Protocol: as every fixture (see tests/fixtures/fixture.h). Then calls
 * <function>(spin) and its twin <iterations> times each, alternating, and
 * prints "count <function> <calls>", "traced <function> <ns>", "untraced
 * <function> <ns>" (the median call of each: an emulated machine's
 * hiccups of milliseconds stay out) and "done". The difference of the two
 * is what the probes cost each call.
 *
 *   spin_stp(n)     entry on `stp x29, x30, [sp, #-16]!` (single-stepped):
 *                   a loop starts right after it, so nothing the kernel
 *                   simulates runs once per call before it; leaves by `ret`
 *   spin_moved(n)   the same with `bl k_noop` after the frame: the entry
 *                   moves onto the `bl` (simulated); leaves by `ret`
 *   spin_tail(n)    moved entry (`adr`); leaves by `b k_leaf`, a tail call
 *                   to a function that returns with `ret` (probed too)
 *   spin_br(n)      moved entry; leaves by `br x16` to k_leaf, read from
 *                   a global
 *   site_parent(n)  moved entry; one call site, `bl spin_callee`, whose
 *                   return address holds a `mov` (single-stepped) and
 *                   then a `cbz` (simulated), where tachy ends the site
 *   spin_callee(n)  the spin, as a leaf (its first instruction is no
 *                   branch target: a probe there runs once per call)
 *
 * A spin of n runs `subs; b.ne` n times.
 */
#define _POSIX_C_SOURCE 200809L

#include <time.h>

#include "fixture.h"

long spin_stp(long), spin_moved(long), spin_tail(long), spin_br(long);
long site_parent(long), spin_callee(long);
long spin_stp_u(long), spin_moved_u(long), spin_tail_u(long), spin_br_u(long);
long site_parent_u(long), spin_callee_u(long);

/* The targets of the `br` of spin_br and of its twin: each twin has a
 * k_leaf of its own, whose `ret` the probes of the traced one never see. */
void *volatile k_next, *volatile k_next_u;
void k_leaf(void), k_leaf_u(void);

#define FUNC(name) \
	"    .p2align 5\n" \
	"    .globl " name "\n    .type " name ",%function\n" name ":\n"
#define END(name) "    .size " name ",.-" name "\n"
#define FRAME "    stp x29, x30, [sp, #-16]!\n    mov x29, sp\n"
#define UNFRAME "    ldp x29, x30, [sp], #16\n"
#define SPIN "1:  subs x0, x0, #1\n    b.ne 1b\n"

#define KINDS(S) \
	FUNC("spin_stp" S) FRAME SPIN "    bl k_noop\n" UNFRAME "    ret\n" END("spin_stp" S) \
	FUNC("spin_moved" S) FRAME "    bl k_noop\n" SPIN UNFRAME "    ret\n" END("spin_moved" S) \
	FUNC("spin_tail" S) FRAME "    adr x9, .\n" SPIN UNFRAME "    b k_leaf" S "\n" END("spin_tail" S) \
	FUNC("spin_br" S) FRAME "    adr x9, .\n" SPIN UNFRAME "    adrp x16, k_next" S "\n" \
	"    ldr x16, [x16, :lo12:k_next" S "]\n    br x16\n" END("spin_br" S) \
	FUNC("site_parent" S) FRAME "    adr x9, .\n    bl spin_callee" S "\n" \
	"    mov x9, x0\n    cbz x9, 2f\n    add x0, x0, #1\n2:\n" UNFRAME "    ret\n" \
	END("site_parent" S) \
	FUNC("spin_callee" S) "    mov x9, x0\n" SPIN "    ret\n" END("spin_callee" S) \
	FUNC("k_leaf" S) "    ret\n" END("k_leaf" S)

__asm__(".text\n"
	FUNC("k_noop") "    ret\n" END("k_noop")
	KINDS("") KINDS("_u"));

static const struct {
	const char *name;
	long (*traced)(long);
	long (*untraced)(long);
} kinds[] = {
	{"spin_stp", spin_stp, spin_stp_u},
	{"spin_moved", spin_moved, spin_moved_u},
	{"spin_tail", spin_tail, spin_tail_u},
	{"spin_br", spin_br, spin_br_u},
	{"site_parent", site_parent, site_parent_u},
	{"spin_callee", spin_callee, spin_callee_u},
};

static long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return (x > y) - (x < y);
}

/* The median of n times (sorted in place). */
static long median(long *t, long n)
{
	qsort(t, n, sizeof(*t), by_value);
	return t[n / 2];
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "spin_moved";
	long iterations = argc > 2 ? atol(argv[2]) : 100;
	long spin = argc > 3 ? atol(argv[3]) : 1000;
	long *traced, *untraced;
	unsigned k;

	for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		if (strcmp(kinds[k].name, name) == 0)
			break;
	if (k == sizeof(kinds) / sizeof(kinds[0]) || iterations < 1 || spin < 1) {
		fprintf(stderr, "usage: kinds <function> <iterations> <spin>\n");
		return 2;
	}
	traced = calloc(iterations, sizeof(long));
	untraced = calloc(iterations, sizeof(long));
	if (!traced || !untraced)
		return 1;
	k_next = (void *)k_leaf;
	k_next_u = (void *)k_leaf_u;
	fixture_ready();
	fixture_wait_go();
	for (long i = 0; i < iterations; i++) {
		long t0 = now_ns();

		kinds[k].traced(spin);
		long t1 = now_ns();

		kinds[k].untraced(spin);
		long t2 = now_ns();

		traced[i] = t1 - t0;
		untraced[i] = t2 - t1;
	}
	printf("count %s %ld\n", name, iterations);
	printf("traced %s %ld\n", name, median(traced, iterations));
	printf("untraced %s %ld\n", name, median(untraced, iterations));
	printf("done\n");
	fflush(stdout);
	return 0;
}
