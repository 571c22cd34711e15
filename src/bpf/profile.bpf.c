// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * `tachy explore`'s sampling profile of one process (layouts in
 * profile.h). Two programs, both filtered to the target's tgid:
 *
 *   sample:  a perf event timer on each CPU (~99 Hz): a thread of the
 *            target on the CPU sends its user registers and the top of its
 *            user stack (PROFILE_ON_CPU).
 *   switch:  sched_switch: a thread of the target that blocks (not
 *            preempted, not runnable) sends the same (PROFILE_OFF); when it
 *            runs again, the time (PROFILE_BACK).
 *
 * Stacks are unwound in user space from the copy, with the objects' unwind
 * tables: the kernel's own user-stack walk follows frame pointers, which
 * libc and most optimized code do not keep. Nothing here writes to the
 * target.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "profile.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The event layouts, in BTF for the skeleton's Rust types. */
struct profile_stack *unused_stack __attribute__((unused));
enum profile_kind unused_kind __attribute__((unused));

/* The process profiled. */
const volatile __u32 target_tgid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events SEC(".maps");

/* Events that found the ring buffer full. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Threads asleep since a PROFILE_OFF, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} asleep SEC(".maps");

static void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);

	if (n)
		*n += 1;
}

/* Sends the current thread's user registers and stack top as `kind`. */
static int send_stack(__u32 kind, __u32 tid, __u64 now)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	struct profile_stack *e;
	__u64 base;
	int i;

	if (!regs)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost();
		return 0;
	}
	e->head.kind = kind;
	e->head.tid = tid;
	e->head.ns = now;
#if defined(__TARGET_ARCH_arm64)
	/* The frame pointer is x29. */
	e->ip = BPF_CORE_READ(regs, pc);
	e->sp = BPF_CORE_READ(regs, sp);
	e->bp = BPF_CORE_READ(regs, regs[29]);
#else
	e->ip = BPF_CORE_READ(regs, ip);
	e->sp = BPF_CORE_READ(regs, sp);
	e->bp = BPF_CORE_READ(regs, bp);
#endif
	e->pages = 0;
	e->pad = 0;
	base = e->sp & ~(__u64)(PROFILE_PAGE - 1);
	for (i = 0; i < PROFILE_PAGES; i++) {
		if (bpf_probe_read_user(&e->stack[i * PROFILE_PAGE],
					PROFILE_PAGE,
					(void *)(base + i * PROFILE_PAGE)))
			break;
		e->pages = i + 1;
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("perf_event")
int profile_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();

	if ((__u32)(id >> 32) != target_tgid || !target_tgid)
		return 0;
	return send_stack(PROFILE_ON_CPU, (__u32)id, bpf_ktime_get_ns());
}

SEC("tp_btf/sched_switch")
int BPF_PROG(profile_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	struct profile_head *h;
	__u32 tid;
	__u8 one = 1;

	/* prev is still the current task: its user stack is readable. */
	if (prev->tgid == target_tgid && !preempt && prev_state) {
		tid = prev->pid;
		if (!bpf_map_update_elem(&asleep, &tid, &one, BPF_ANY))
			send_stack(PROFILE_OFF, tid, bpf_ktime_get_ns());
	}
	if (next->tgid == target_tgid) {
		tid = next->pid;
		if (!bpf_map_lookup_elem(&asleep, &tid))
			return 0;
		bpf_map_delete_elem(&asleep, &tid);
		h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
		if (!h) {
			count_lost();
			return 0;
		}
		h->kind = PROFILE_BACK;
		h->tid = tid;
		h->ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(h, 0);
	}
	return 0;
}
