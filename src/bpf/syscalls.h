/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * System calls, enter to exit, through the raw syscall tracepoints.
 */
#ifndef __TACHY_SYSCALLS_H
#define __TACHY_SYSCALLS_H

/* Settings, written once by user space before load. */
/* Process whose system calls are timed; 0 for every process. */
const volatile __u32 filter_tgid = 0;
/* --cpu with system calls: account the threads inside one too. */
const volatile bool cpu_sys = false;

/*
 * System call latency, enter to exit, through the raw syscall tracepoints.
 * `sys_ids` maps a syscall number to its id + 1 (0: not traced).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TACHY_MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, __u32);
} sys_ids SEC(".maps");

struct tachy_syscall {
	__u64 start_ns;
	__u32 id;   /* id + 1 of the syscall in progress; 0: none */
	__u32 open; /* --filter groups left for its return value */
	/* --cpu: the thread's sums, and their values at the call's entry */
	struct tachy_cpu cpu;
	__u64 blocked0;
	__u64 runq0;
	/* --record-slower-than: the call's arguments */
	__u64 args[TACHY_REC_ARGS];
	/* --by: the key values read at entry */
	__u64 by[TACHY_BY_KEYS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_syscall);
} sys_start SEC(".maps");

static __always_inline bool syscall_wanted(void)
{
	__u64 pt = bpf_get_current_pid_tgid();

	if (!follow && filter_tgid && (pt >> 32) != filter_tgid)
		return false;
	return process_wanted(pt);
}

static __always_inline int sys_enter(struct pt_regs *regs, long nr)
{
	struct tachy_syscall *sc;
	__u32 key = nr, *id;
	int open = FILTER_PASS;

	if (!syscall_wanted() || nr < 0 || nr >= TACHY_MAX_SYSCALLS)
		return 0;
	id = bpf_map_lookup_elem(&sys_ids, &key);
	if (!id || !*id)
		return 0;
	if (arg_filter)
		open = args_pass(*id - 1, regs, 0, bpf_get_current_pid_tgid());
	if (open == FILTER_REJECT)
		return 0;
	sc = bpf_task_storage_get(&sys_start, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!sc)
		return 0;
	sc->id = *id;
	sc->open = open;
	sc->start_ns = bpf_ktime_get_ns();
	if (cpu_sys)
		steal_settle(&sc->cpu, bpf_get_current_task_btf());
	sc->blocked0 = sc->cpu.blocked_ns;
	sc->runq0 = sc->cpu.runq_ns;
	if (by_entry)
		by_entry_values(*id - 1, regs, 0, sc->by);
	if (record) {
		sys_args(regs, sc->args);
	}
	return 0;
}

/* A system call of `d` ns ends at `now`, returning `rv`: record it if it
 * is that slow. */
static __always_inline void rec_syscall(struct tachy_syscall *sc, __u32 id,
					__u64 now, __u64 d, struct parts p,
					__u64 rv)
{
	struct tachy_record *r;

	if (!record || d < record_min_ns)
		return;
	r = rec_start(id, now, d, p);
	if (!r)
		return;
	r->flags |= TACHY_REC_SYSCALL | TACHY_REC_RET;
	r->ret = rv;
	__builtin_memcpy(r->args, sc->args, sizeof(r->args));
	rec_send(r, 0);
}

/* A system call returns `rv` (the kernel's value: -errno on failure). */
static __always_inline int sys_exit(__u64 rv)
{
	struct tachy_syscall *sc;
	struct parts p;
	__u32 id;
	__u64 d;
	__u64 now;

	if (!syscall_wanted())
		return 0;
	sc = bpf_task_storage_get(&sys_start, bpf_get_current_task_btf(), 0, 0);
	if (!sc || !sc->id)
		return 0;
	id = sc->id - 1;
	sc->id = 0;
	if (arg_filter && sc->open && ret_rejects(id, rv, sc->open))
		return 0;
	now = bpf_ktime_get_ns();
	d = now - sc->start_ns;
	p = parts_since(&sc->cpu, sc->blocked0, sc->runq0);
	record_ns(id, d, p, false);
	by_close(id, d, sc->by, 0, rv);
	rec_syscall(sc, id, now, d, p, rv);
	return 0;
}

#endif /* __TACHY_SYSCALLS_H */
