/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --stack: the user stack of a recorded call, taken at its exit (tachy.h,
 * enum tachy_stack_how). At a `ret` SP points at the return-address slot,
 * as at the entry, and every caller's frame above it is as it was then;
 * so only the calls recorded pay, and none pays at its entry.
 */
#ifndef __TACHY_STACKS_H
#define __TACHY_STACKS_H

/* How records carry stacks (TACHY_STACK_NONE: they do not). */
const volatile enum tachy_stack_how stack_how = TACHY_STACK_NONE;

/* The thread's frame pointer (rbp), from its saved user registers. */
static __always_inline __u64 user_fp(void)
{
	struct pt_regs *regs =
		(struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());

	if (!regs)
		return 0;
#if defined(__TARGET_ARCH_arm64)
	return BPF_CORE_READ(regs, regs[29]);
#else
	return BPF_CORE_READ(regs, bp);
#endif
}

struct fp_walk {
	struct tachy_record *r;
	__u64 bp;
	__u32 n;
};

/* One frame of the frame-pointer chain: the saved frame pointer at bp,
 * the return address above it. Callers' frames lie higher, on the same
 * stack. */
static long fp_one(__u64 i, void *data)
{
	struct fp_walk *w = data;
	__u64 ra = 0, next = 0;
	__u32 n = w->n;

	if (n >= TACHY_STACK_FRAMES || user_read8(w->bp + 8, &ra) || !ra)
		return 1;
	((__u64 *)w->r->stack)[n & (TACHY_STACK_FRAMES - 1)] = ra;
	w->n = n + 1;
	if (user_read8(w->bp, &next) || next <= w->bp ||
	    next - w->bp > TACHY_STACK_WINDOW)
		return 1;
	w->bp = next;
	return 0;
}

/*
 * The stack of the call whose return-address slot is at `slot` (its
 * return address `ret` where the probe knows it, else 0: the slot holds
 * it), into record r. The caller's frame pointer is the thread's rbp, or
 * the one saved below the slot where the function still has its own
 * frame (an exit standing before its `pop %rbp`).
 */
static __noinline void rec_stack(struct tachy_record *r, __u64 slot, __u64 ret)
{
	struct fp_walk w = {.r = r};
	__u64 bp = user_fp(), base;
	__u32 i;

	r->stack_how = stack_how;
	r->stack_len = 0;
	r->stack_base = 0;
	if (!ret && user_read8(slot, &ret))
		ret = 0;
	if (bp == slot - 8 && user_read8(bp, &bp))
		bp = 0;
	r->stack_ip = ret;
	r->stack_sp = slot + 8;
	r->stack_bp = bp;
	if (stack_how == TACHY_STACK_FP) {
		if (!ret)
			return;
		((__u64 *)r->stack)[0] = ret;
		w.n = 1;
		w.bp = bp;
		if (bp > slot && bp - slot < TACHY_STACK_WINDOW)
			bpf_loop(TACHY_STACK_FRAMES, fp_one, &w, 0);
		r->stack_len = w.n * 8;
		return;
	}
	/* Whole pages from the one holding the caller's SP: each read is of
	 * a constant size, and the last readable page ends the copy. */
	base = (slot + 8) & ~(__u64)(TACHY_STACK_PAGE - 1);
	r->stack_base = base;
	for (i = 0; i < TACHY_STACK_PAGES; i++) {
		if (bpf_probe_read_user(&r->stack[i * TACHY_STACK_PAGE],
					TACHY_STACK_PAGE,
					(void *)(base + i * TACHY_STACK_PAGE)))
			break;
		r->stack_len = (i + 1) * TACHY_STACK_PAGE;
	}
}

#endif /* __TACHY_STACKS_H */
