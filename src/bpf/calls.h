/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A traced function's probes: its entry, its `ret`s and early exits, its
 * tail jumps, and indirect jumps that may leave it (cookies in tachy.h).
 */
#ifndef __TACHY_CALLS_H
#define __TACHY_CALLS_H

static __always_inline int do_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 id = cookie & TACHY_ENTRY_ID_MASK;
	__u64 sp = frame_key(PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32));
	struct tachy_thread *t;
	int i, open = FILTER_PASS;
	__u64 now;

	if (!entry_wanted(bpf_get_current_pid_tgid()))
		return 0;
	if (arg_filter)
		open = args_pass(id, ctx, sp, bpf_get_current_pid_tgid());
	if (open == FILTER_REJECT) {
		/*
		 * A rejected call opens no frame, but frames it proves gone
		 * are gone as for any call: else its return, at their key,
		 * would close one that an exception left.
		 */
		t = current_thread(false);
		if (t && t->depth)
			pop_abandoned(t, sp, bpf_ktime_get_ns(), false, id);
		return 0;
	}
	now = bpf_ktime_get_ns();
	t = current_thread(true);
	if (!t)
		return 0;

	pop_abandoned(t, sp, now, false, id);

	if (outermost) {
		for (i = 0; i < TACHY_MAX_DEPTH; i++) {
			if (i >= t->depth)
				break;
			if (t->frames[i].id == id) {
				struct tachy_corr *c =
					bpf_map_lookup_elem(&corr, &id);
				__u32 top_i = t->depth - 1;

				/* This call's probes run inside the outer
				 * one. */
				if (c && top_i < TACHY_MAX_DEPTH)
					t->frames[top_i].probe_ns += c->add_ns;
				return 0;
			}
		}
	}

	by_open(t, id, ctx, sp);
	/*
	 * The clock is read again last: what this program did before is not
	 * the call's time.
	 */
	if (push(t, sp, bpf_ktime_get_ns(), id,
		 TACHY_FRAME_ROOT |
			 ((cookie & TACHY_ENTRY_TAILING) ? TACHY_FRAME_TAILING
							 : 0),
		 open))
		rec_entry(ctx, t->depth - 1);
	return 0;
}

/* Whether a jcc with condition code cc is taken, from the saved flags. */
static __always_inline bool cond_taken(__u64 fl, __u32 cc)
{
	bool cf = fl & 0x1, pf = fl & 0x4, zf = fl & 0x40, sf = fl & 0x80,
	     of = fl & 0x800, r;

	switch (cc >> 1) {
	case 0:
		r = of;
		break;
	case 1:
		r = cf;
		break;
	case 2:
		r = zf;
		break;
	case 3:
		r = cf || zf;
		break;
	case 4:
		r = sf;
		break;
	case 5:
		r = pf;
		break;
	case 6:
		r = sf != of;
		break;
	default:
		r = zf || sf != of;
		break;
	}
	return (cc & 1) ? !r : r;
}

/*
 * A `ret`, an early exit that sees one coming, or the way out of an
 * inlined instance (cookie in tachy.h). An instance's frame is keyed a few
 * bytes below its enclosing frame's, off the 8-byte grid of return-address
 * slots: no slot holds its caller, and the exit's own address, in the
 * function it was inlined into, stands for it.
 */
static __always_inline int do_exit_probe(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 key, ip, link;

	if ((cookie & TACHY_EXIT_CONDITIONAL) &&
	    !cond_taken(reg_flags(ctx), cookie & TACHY_EXIT_COND_MASK))
		return 0;
	key = frame_key(PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32));
	/*
	 * Both registers are read before the choice: left to the compiler,
	 * it picks between their offsets in ctx and loads through the sum,
	 * which the verifier refuses (a modified ctx pointer).
	 */
	ip = PT_REGS_IP(ctx);
	link = reg_link(ctx);
	barrier_var(ip);
	barrier_var(link);
	return do_exit(key, (key & 7) ? ip : link, reg_retval(ctx));
}

/*
 * A tail jump leaves the frame keyed by SP here: to a known callee
 * (`indirect` false), whose returns end the frame, or to unknown code,
 * whose returns are not probed: the frame is timed up to the jump, and
 * with it end the sites that end with it (a tail-jump site that led here
 * shares its key), as at a `ret`.
 */
static __always_inline int leave_frame(struct pt_regs *ctx, bool indirect)
{
	struct tachy_thread *t;
	struct tachy_frame *f;

	t = current_thread(false);
	if (!t)
		return 0;
	if (indirect) {
		struct walk_ctx c = {.t = t,
				     .sp = frame_key(PT_REGS_SP(ctx)),
				     .now = bpf_ktime_get_ns(),
				     .only = ANY_ID,
				     .indirect = true};

		if (t->depth)
			exit_walk(&c);
		return 0;
	}
	f = top(t);
	if (!f || f->sp != frame_key(PT_REGS_SP(ctx)))
		return 0;
	f->flags |= TACHY_FRAME_TAILING;
	return 0;
}

static __always_inline int do_tail(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	if ((cookie & TACHY_TAIL_CONDITIONAL) &&
	    !cond_taken(reg_flags(ctx), cookie & TACHY_TAIL_COND_MASK))
		return 0;
	return leave_frame(ctx, cookie & TACHY_TAIL_INDIRECT);
}

/*
 * An indirect jump whose target the plan could not prove: computed here
 * from the registers (and the memory it reads, which the jump is about to
 * read too) and compared with the function's range around the jump. The
 * uprobe sets ip to the probed instruction before programs run. Inside,
 * the call goes on; outside, it is a tail jump to unknown code.
 */
/*
 * Where an indirect jump or call at `ip` goes: the register, or the pointer
 * in memory, that `op` (TACHY_JUMP_* layout, bits 0-31) names. Non-zero
 * when the pointer cannot be read.
 */
static __always_inline int operand_target(struct pt_regs *ctx, __u32 op,
					  __u64 ip, __u64 *target)
{
	__u64 addr, r[16];

	save_regs(ctx, r);
	if (!(op & TACHY_JUMP_MEM)) {
		*target = r[(op >> TACHY_JUMP_REG_SHIFT) & 15];
		return 0;
	}
	if (op & TACHY_JUMP_RIP) {
		addr = ip + ((__s32)op >> TACHY_JUMP_RIP_SHIFT);
	} else {
		addr = r[(op >> TACHY_JUMP_REG_SHIFT) & 15] +
		       ((__s32)op >> TACHY_JUMP_DISP_SHIFT);
		if (op & TACHY_JUMP_INDEX)
			addr += r[(op >> TACHY_JUMP_INDEX_SHIFT) & 15]
				<< ((op >> TACHY_JUMP_SCALE_SHIFT) & 3);
	}
	return user_read8(addr, target);
}

static __always_inline int do_jump(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = cookie;
	__u64 ip = PT_REGS_IP(ctx), target = 0, start;
	__u64 before = (cookie >> TACHY_JUMP_BEFORE_SHIFT) & 0xffff;
	__u64 after = (cookie >> TACHY_JUMP_AFTER_SHIFT) & 0xffff;

	if (operand_target(ctx, op, ip, &target)) {
		if (op & TACHY_JUMP_INSIDE)
			return 0;
		return leave_frame(ctx, true);
	}
	start = ip - before;
	if (target > start && target - start < before + after)
		return 0;
	return leave_frame(ctx, true);
}

#endif /* __TACHY_CALLS_H */
