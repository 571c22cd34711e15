// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tachy's probes. One generic program per probe kind, attached at many
 * sites and told apart by the BPF cookie (layouts in tachy.h):
 *
 *   entry:    where a traced function's entry probe stands (its first
 *             instruction, or a cheaper one of its straight-line start).
 *             Cookie: function id in bits 0-30, TACHY_ENTRY_TAILING in bit
 *             31, signed SP adjustment in bits 32-63.
 *   exit:     a `ret` of a traced function or of a function it tail-calls.
 *             No cookie: the frame is found by the stack pointer.
 *   tail:     a tail jump out of a traced function. Cookie: TACHY_TAIL_*.
 *   ijmp:     an indirect jump that may stay inside its function or leave
 *             it: decided from its target. Cookie: TACHY_JUMP_*.
 *   uret:     a uretprobe, where the plan proves no unwinder can cross the
 *             frame (or on --uretprobe). No cookie.
 *   site:     a call site of `tachy nested`; site end: where it returns.
 *   kentry/kexit, fentry/fexit, sys_enter/sys_exit: kernel functions and
 *             system calls; fork and thread exit: --follow and cleanup.
 *
 * Each thread keeps a stack of open frames keyed by the address of the
 * return-address slot: at a function's first instruction SP points at it,
 * and at its `ret` SP points at it again. An exit closes the frames whose
 * SP equals the current one; frames below it were abandoned (exception,
 * longjmp) and are counted as unwound, never timed. Nothing here ever
 * writes to the traced process. A uretprobe stands only where nothing can
 * unwind through the frame, since an unwinder that meets the kernel's
 * trampoline address aborts the process.
 *
 * The code is split by concern into the headers below, each using what
 * the ones before it define; this file holds the programs, each a call
 * into them.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tachy.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "process.h"
#include "counters.h"
#include "cpu.h"
#include "pending.h"
#include "regs.h"
#include "stacks.h"
#include "records.h"
#include "groups.h"
#include "filters.h"
#include "frames.h"
#include "calls.h"
#include "sites.h"
#include "go.h"
#include "syscalls.h"
#include "kernel.h"
#include "sched.h"

/*
 * The uprobe programs, one per probe kind. Their sections say "uprobe":
 * where the kernel has uprobe_multi links, user space sets the attach type
 * of those it loads to BPF_TRACE_UPROBE_MULTI before load (as libbpf does
 * for USDT probes), and attaches them one link per object and kind; else
 * one link per probe. The kernel binds bpf_get_attach_cookie() to the link
 * type at load, so one loaded program serves one link type.
 */
SEC("uprobe")
int tachy_entry(struct pt_regs *ctx)
{
	return do_entry(ctx);
}

SEC("uprobe")
int tachy_exit(struct pt_regs *ctx)
{
	return do_exit_probe(ctx);
}

/*
 * A uretprobe: runs after the return, with SP one slot above. Only where
 * the plan proves nothing can unwind through the frame (a leaf, an object
 * with no unwinding code), or on --uretprobe: a C++ exception unwinding
 * through the frame meets the kernel's trampoline address and aborts the
 * process.
 */
SEC("uretprobe")
int tachy_uret(struct pt_regs *ctx)
{
	return do_exit(uret_key(ctx), PT_REGS_IP(ctx), reg_retval(ctx));
}

SEC("uprobe")
int tachy_tail(struct pt_regs *ctx)
{
	return do_tail(ctx);
}

SEC("uprobe")
int tachy_ijmp(struct pt_regs *ctx)
{
	return do_jump(ctx);
}

SEC("uprobe")
int tachy_site(struct pt_regs *ctx)
{
	return do_site(ctx);
}

SEC("uprobe")
int tachy_send(struct pt_regs *ctx)
{
	return do_site_end(ctx);
}

SEC("uprobe")
int tachy_go(struct pt_regs *ctx)
{
	return do_go(ctx);
}

SEC("uprobe")
int tachy_gsite(struct pt_regs *ctx)
{
	return do_gsite(ctx, false);
}

SEC("uprobe")
int tachy_gsend(struct pt_regs *ctx)
{
	return do_gsite(ctx, true);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(tachy_sys_enter, struct pt_regs *regs, long nr)
{
	return sys_enter(regs, nr);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(tachy_sys_exit, struct pt_regs *regs, long ret)
{
	return sys_exit(ret);
}

SEC("kprobe")
int tachy_kentry(struct pt_regs *ctx)
{
	return kfunc_enter(bpf_get_attach_cookie(ctx));
}

SEC("kretprobe")
int tachy_kexit(struct pt_regs *ctx)
{
	return kfunc_exit(bpf_get_attach_cookie(ctx));
}

/* Attach targets are set by user space before load. */
SEC("fentry")
int BPF_PROG(tachy_fentry)
{
	return kfunc_enter(kfunc_id);
}

SEC("fexit")
int BPF_PROG(tachy_fexit)
{
	return kfunc_exit(kfunc_id);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(tachy_fork, struct task_struct *parent, struct task_struct *child)
{
	return follow_fork(parent, child);
}

/*
 * A thread that exits with open frames left them without returning: count
 * them (frames.h).
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(tachy_thread_exit, struct task_struct *task)
{
	return thread_exit(task);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(tachy_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	return cpu_switch(preempt, prev, next, prev_state);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(tachy_wakeup, struct task_struct *p)
{
	return cpu_wakeup(p);
}
