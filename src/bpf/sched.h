/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --cpu, the scheduler's side: switches and wakeups of threads with an
 * open traced frame or system call.
 */
#ifndef __TACHY_SCHED_H
#define __TACHY_SCHED_H

static __always_inline int cpu_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next,
				      unsigned int prev_state)
{
	/* TASK_RUNNING is 0: still runnable (a yield, or woken already). */
	bool runnable = preempt || !prev_state;
	struct tachy_syscall *sc = NULL, *sc_next = NULL;
	struct tachy_thread *t = NULL, *t_next = NULL;
	__u64 now;

	/*
	 * Every switch on the machine comes here: one with neither thread
	 * followed costs two loads, no lookup and no clock read.
	 */
	if (!has_storage(prev) && !has_storage(next))
		return 0;
	if (has_storage(prev)) {
		t = bpf_task_storage_get(&threads, prev, 0, 0);
		if (t && !t->depth)
			t = NULL;
		if (cpu_sys) {
			sc = bpf_task_storage_get(&sys_start, prev, 0, 0);
			if (sc && !sc->id)
				sc = NULL;
		}
	}
	if (has_storage(next)) {
		t_next = bpf_task_storage_get(&threads, next, 0, 0);
		if (cpu_sys)
			sc_next = bpf_task_storage_get(&sys_start, next, 0, 0);
	}
	if (!t && !sc && !t_next && !sc_next)
		return 0;
	now = bpf_ktime_get_ns();
	if (t)
		cpu_off(&t->cpu, prev, runnable, now);
	if (t_next)
		cpu_on(&t_next->cpu, next, now);
	if (sc)
		cpu_off(&sc->cpu, prev, runnable, now);
	if (sc_next)
		cpu_on(&sc_next->cpu, next, now);
	return 0;
}

static __always_inline int cpu_wakeup(struct task_struct *p)
{
	struct tachy_syscall *sc = NULL;
	struct tachy_thread *t;
	__u64 now;

	if (!has_storage(p))
		return 0;
	t = bpf_task_storage_get(&threads, p, 0, 0);
	if (cpu_sys)
		sc = bpf_task_storage_get(&sys_start, p, 0, 0);
	if (!t && !sc)
		return 0;
	now = bpf_ktime_get_ns();
	if (t)
		cpu_woken(&t->cpu, now);
	if (sc)
		cpu_woken(&sc->cpu, now);
	return 0;
}

#endif /* __TACHY_SCHED_H */
