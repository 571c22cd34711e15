/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Reading the traced thread: its registers at a probe, its memory, and the
 * operands of --filter terms and --by arguments.
 */
#ifndef __TACHY_REGS_H
#define __TACHY_REGS_H

/*
 * The traced thread's registers at a uprobe, for x86-64 and arm64 (the
 * target architecture, __TARGET_ARCH_x86 or __TARGET_ARCH_arm64, is set by
 * the build). Everything that reads a user register goes through these:
 *
 *   PT_REGS_SP(ctx), PT_REGS_IP(ctx)  SP and PC (bpf_tracing.h)
 *   reg_retval(ctx)     the return value: rax, x0
 *   reg_flags(ctx)      the condition flags in x86's EFLAGS layout
 *   reg_go_g(ctx)       Go's current goroutine: r14, x28
 *   reg_link(ctx)       the return address where a register holds it
 *                       (arm64's x30 at a `ret`); 0 on x86 (on the stack)
 *   frame_key(sp)       a traced function's frame key from its entry SP
 *   uret_key(ctx)       a uretprobe's frame key (see tachy.bpf.c)
 *   save_regs(ctx, r)   the general registers as the plan numbers them
 *   save_args(ctx, r)   the first six integer arguments of a call
 *   sys_args(regs, r)   the six arguments of a system call (kernel pt_regs)
 *
 * On arm64 a uprobe's context is the kernel's pt_regs, whose start is
 * user_pt_regs (regs[31], sp, pc, pstate).
 */
#if defined(__TARGET_ARCH_arm64)

static __always_inline __u64 reg_retval(struct pt_regs *ctx)
{
	return ctx->regs[0];
}

/*
 * NZCV (pstate bits 31-28) as x86 flags: SF = N, ZF = Z, CF = !C, OF = V;
 * the plan words ARM conditions as the x86 ones that hold on these
 * (disasm/arm64.rs x86_condition). PF is never read for ARM code.
 */
static __always_inline __u64 reg_flags(struct pt_regs *ctx)
{
	__u64 p = ctx->pstate;

	return ((p >> 31) & 1) << 7 | ((p >> 30) & 1) << 6 | (~(p >> 29) & 1) |
	       ((p >> 28) & 1) << 11;
}

static __always_inline __u64 reg_go_g(struct pt_regs *ctx)
{
	return ctx->regs[28];
}

static __always_inline __u64 reg_link(struct pt_regs *ctx)
{
	return ctx->regs[30];
}

/*
 * A function's frame is keyed 8 bytes below its entry SP, where x86's
 * return-address slot would be: `bl` leaves SP as it was, so keyed by SP
 * itself the callee's frame would share the key of the call site that
 * called it (keyed by SP at the `bl`, which is SP again at the return
 * address), and its entry would take the site for a frame left by
 * unwinding. One slot below, they nest as on x86. Nothing reads memory at
 * the key on arm64 (the return address is x30).
 */
static __always_inline __u64 frame_key(__u64 sp)
{
	return sp - 8;
}

/* After the return SP is the caller's, the entry SP. */
static __always_inline __u64 uret_key(struct pt_regs *ctx)
{
	return frame_key(PT_REGS_SP(ctx));
}

/* x0-x15 as r[0..15]. */
static __always_inline void save_regs(struct pt_regs *ctx, __u64 r[16])
{
	r[0] = ctx->regs[0];
	r[1] = ctx->regs[1];
	r[2] = ctx->regs[2];
	r[3] = ctx->regs[3];
	r[4] = ctx->regs[4];
	r[5] = ctx->regs[5];
	r[6] = ctx->regs[6];
	r[7] = ctx->regs[7];
	r[8] = ctx->regs[8];
	r[9] = ctx->regs[9];
	r[10] = ctx->regs[10];
	r[11] = ctx->regs[11];
	r[12] = ctx->regs[12];
	r[13] = ctx->regs[13];
	r[14] = ctx->regs[14];
	r[15] = ctx->regs[15];
}

/* AAPCS64: x0-x5. */
static __always_inline void save_args(struct pt_regs *ctx, __u64 r[6])
{
	r[0] = ctx->regs[0];
	r[1] = ctx->regs[1];
	r[2] = ctx->regs[2];
	r[3] = ctx->regs[3];
	r[4] = ctx->regs[4];
	r[5] = ctx->regs[5];
}

static __always_inline void sys_args(struct pt_regs *regs, __u64 r[6])
{
	r[0] = BPF_CORE_READ(regs, regs[0]);
	r[1] = BPF_CORE_READ(regs, regs[1]);
	r[2] = BPF_CORE_READ(regs, regs[2]);
	r[3] = BPF_CORE_READ(regs, regs[3]);
	r[4] = BPF_CORE_READ(regs, regs[4]);
	r[5] = BPF_CORE_READ(regs, regs[5]);
}

#else /* x86-64 */

static __always_inline __u64 reg_retval(struct pt_regs *ctx)
{
	return ctx->ax;
}

static __always_inline __u64 reg_flags(struct pt_regs *ctx)
{
	return ctx->flags;
}

static __always_inline __u64 reg_go_g(struct pt_regs *ctx)
{
	return ctx->r14;
}

static __always_inline __u64 reg_link(struct pt_regs *ctx)
{
	return 0;
}

/* At the entry SP is the return-address slot: the key. */
static __always_inline __u64 frame_key(__u64 sp)
{
	return sp;
}

/* After the return SP is one slot above the return address's. */
static __always_inline __u64 uret_key(struct pt_regs *ctx)
{
	return PT_REGS_SP(ctx) - 8;
}

/*
 * Numbered as x86 encodes them. Copied out with constant offsets: the
 * verifier refuses a context read at a computed one, which a switch on the
 * number compiles to.
 */
static __always_inline void save_regs(struct pt_regs *ctx, __u64 r[16])
{
	r[0] = ctx->ax;
	r[1] = ctx->cx;
	r[2] = ctx->dx;
	r[3] = ctx->bx;
	r[4] = ctx->sp;
	r[5] = ctx->bp;
	r[6] = ctx->si;
	r[7] = ctx->di;
	r[8] = ctx->r8;
	r[9] = ctx->r9;
	r[10] = ctx->r10;
	r[11] = ctx->r11;
	r[12] = ctx->r12;
	r[13] = ctx->r13;
	r[14] = ctx->r14;
	r[15] = ctx->r15;
}

/* SysV x86-64: rdi, rsi, rdx, rcx, r8, r9. */
static __always_inline void save_args(struct pt_regs *ctx, __u64 r[6])
{
	r[0] = ctx->di;
	r[1] = ctx->si;
	r[2] = ctx->dx;
	r[3] = ctx->cx;
	r[4] = ctx->r8;
	r[5] = ctx->r9;
}

/* The system call ABI: rdi, rsi, rdx, r10, r8, r9. */
static __always_inline void sys_args(struct pt_regs *regs, __u64 r[6])
{
	r[0] = BPF_CORE_READ(regs, di);
	r[1] = BPF_CORE_READ(regs, si);
	r[2] = BPF_CORE_READ(regs, dx);
	r[3] = BPF_CORE_READ(regs, r10);
	r[4] = BPF_CORE_READ(regs, r8);
	r[5] = BPF_CORE_READ(regs, r9);
}

#endif

/*
 * Reads the 8 bytes at user address `addr` into *out (0 where unreadable,
 * and then non-zero is returned). A function of its own so that its stack
 * stays under 64 bytes: the kernel then runs it on the task's stack rather
 * than on a per-CPU BPF stack, and the usercopy hardening check of the
 * destination is a bounds check there instead of a walk of the vmalloc
 * areas (the per-CPU stack's): ~60 ns less per read on 6.18.
 */
static __noinline long user_read8(__u64 addr, __u64 *out)
{
	__u64 v = 0;
	long err = bpf_probe_read_user(&v, sizeof(v), (const void *)addr);

	*out = v;
	return err;
}

/*
 * v, a register that holds operand t, as t's size and sign read it: the ABI
 * leaves the bits above a narrower argument or return value undefined.
 */
static __always_inline __u64 opnd_extend(struct tachy_term *t, __u64 v)
{
	__u32 shift = 64 - 8 * (t->size & 15);
	bool sgn = t->flags & TACHY_TERM_SIGNED;

	if (shift && shift < 64) {
		v <<= shift;
		v = sgn ? (__u64)((__s64)v >> shift) : v >> shift;
	}
	return v;
}

/*
 * The value of operand t (a --filter term's, or a --by argument's) at a
 * call's entry, with registers `r` and SP `sp`, extended from its size as
 * its sign says; non-zero when it cannot be read.
 */
static __always_inline int opnd_read(struct tachy_term *t, __u64 r[16],
				     __u64 sp, __u64 pid_tgid, __u64 *out)
{
	__u64 v = 0;

	switch (t->kind) {
	case TACHY_OPND_REG:
		v = r[t->reg & 15];
		break;
	case TACHY_OPND_STACK:
		if (user_read8(sp + t->off, &v))
			return -1;
		break;
	case TACHY_OPND_TID:
		v = (__u32)pid_tgid;
		break;
	default:
		v = pid_tgid >> 32;
	}
	*out = opnd_extend(t, v);
	return 0;
}

#endif /* __TACHY_REGS_H */
