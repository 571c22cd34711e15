/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --cpu, the thread's side: where a thread's time went while it had an
 * open traced frame (or system call), kept in its struct tachy_cpu from the
 * scheduler's switches and wakeups (sched.h), and the parts of one call.
 */
#ifndef __TACHY_CPU_H
#define __TACHY_CPU_H

/*
 * --cpu: the steal time (what the hypervisor ran instead of this virtual
 * CPU) of the CPU that task `p` is on, up to the scheduler's last clock
 * update there: at a context switch that is the switch itself; elsewhere
 * at most a tick ago. Read through the task's own run queue (its CFS
 * queue's rq), as per-CPU kernel symbols cannot be looked up without
 * CONFIG_KALLSYMS_ALL. 0 where the kernel does not account steal time.
 */
struct rq___steal {
	u64 prev_steal_time_rq;
} __attribute__((preserve_access_index));

static __always_inline __u64 steal_now(struct task_struct *p)
{
	struct rq___steal *rq;

	/*
	 * The field is there only with CONFIG_PARAVIRT_TIME_ACCOUNTING: named
	 * through a local flavor of struct rq (libbpf matches it to the
	 * kernel's rq), so that the program compiles against a vmlinux.h of
	 * a kernel without it too.
	 */
	if (!bpf_core_field_exists(struct rq___steal, prev_steal_time_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	/* Direct loads of BTF pointers: no helper call per step. */
	rq = (struct rq___steal *)p->se.cfs_rq->rq;
	return rq->prev_steal_time_rq;
}

/*
 * The scheduler's tracepoints can miss a thread's wakeup and its switch-in
 * together (measured here with no tracer but bpftrace attached: about one
 * 5 ms sleep in 200 shows a switch-out, then the next switch-out, nothing
 * between), which would leave the thread off its CPU while it runs: that
 * sleep would count as on-CPU time. So a thread seen running (its own
 * program, or its switch-out) while still off came back unseen. Its time
 * off is the time since it left less the CPU time the scheduler accounted
 * to it since (sum_exec_runtime: exact at a switch-out, behind by what it
 * ran since the last tick at most in a probe), in the state it left in.
 */
static __always_inline void cpu_back_unseen(struct tachy_cpu *c,
					    struct task_struct *p)
{
	__u64 gone = bpf_ktime_get_ns() - c->off_ns;
	__u64 ran = p->se.sum_exec_runtime - c->exec0;
	__u64 off = gone > ran ? gone - ran : 0;

	if (c->off_state == TACHY_OFF_BLOCKED)
		c->blocked_ns += off;
	else
		c->runq_ns += off;
	c->off_ns = 0;
	/* Steal time counts from here, as at a switch-in. */
	c->steal0 = steal_now(p);
}

/*
 * Adds the steal time of the thread's CPU since c->steal0 to its runnable
 * sum (the thread is on that CPU: its own programs, or its switch-out),
 * and starts again from now. Time settled while no frame is open counts
 * in no call: a frame takes the sums' differences over its own life.
 */
static __always_inline void steal_settle(struct tachy_cpu *c,
					 struct task_struct *p)
{
	__u64 s;

	if (c->off_ns)
		cpu_back_unseen(c, p);
	s = steal_now(p);

	if (s > c->steal0)
		c->runq_ns += s - c->steal0;
	c->steal0 = s;
}

/* What the thread spent off its CPU since its sums were these. */
static __always_inline struct parts parts_since(struct tachy_cpu *c,
						__u64 blocked0, __u64 runq0)
{
	struct parts p = {};

	if (cpu) {
		steal_settle(c, bpf_get_current_task_btf());
		p.blocked = c->blocked_ns - blocked0;
		p.runq = c->runq_ns - runq0;
	}
	return p;
}

/*
 * --cpu. A thread with an open traced frame (or system call) that leaves
 * its CPU is off from then: blocked when it went to sleep, runnable when it
 * was preempted or yielded. A wakeup turns blocked into runnable; being
 * switched in ends it. A thread with no task-local storage at all (no
 * traced call yet, nor another BPF tool's) costs one load.
 */

/*
 * Whether task `p` holds any BPF task-local storage: one load, where a
 * lookup in a map it has no storage in costs more than the rest of the
 * program.
 */
static __always_inline bool has_storage(struct task_struct *p)
{
	if (!bpf_core_field_exists(p->bpf_storage))
		return true;
	return p->bpf_storage != NULL;
}

static __always_inline void cpu_off(struct tachy_cpu *c, struct task_struct *p,
				    bool runnable, __u64 now)
{
	steal_settle(c, p);
	c->exec0 = p->se.sum_exec_runtime;
	c->off_ns = now;
	c->off_state = runnable ? TACHY_OFF_RUNNABLE : TACHY_OFF_BLOCKED;
}

static __always_inline void cpu_woken(struct tachy_cpu *c, __u64 now)
{
	if (!c->off_ns || c->off_state != TACHY_OFF_BLOCKED)
		return;
	c->blocked_ns += now - c->off_ns;
	c->off_ns = now;
	c->off_state = TACHY_OFF_RUNNABLE;
}

static __always_inline void cpu_on(struct tachy_cpu *c, struct task_struct *p,
				   __u64 now)
{
	/* Steal time counts from here, on this CPU. */
	c->steal0 = steal_now(p);
	if (!c->off_ns)
		return;
	if (c->off_state == TACHY_OFF_BLOCKED)
		c->blocked_ns += now - c->off_ns;
	else
		c->runq_ns += now - c->off_ns;
	c->off_ns = 0;
}

#endif /* __TACHY_CPU_H */
