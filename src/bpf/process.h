/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Which threads count: --tid, --cgroup, and the followed processes of
 * --follow and several -p, with the calls entered per process.
 */
#ifndef __TACHY_PROCESS_H
#define __TACHY_PROCESS_H

/* Settings, written once by user space before load. */
const volatile __u32 filter_tid = 0;

/*
 * --follow: probes are attached for every process and count only in the
 * processes of this set, which forks of its members join.
 */
const volatile bool follow = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TACHY_MAX_FOLLOWED);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

/*
 * --cgroup: count only in tasks of this cgroup v2 (its id: the inode of its
 * directory) or of a cgroup below it, whose ancestor at `cgroup_level` (0
 * is the root) it is.
 */
const volatile __u64 filter_cgroup = 0;
const volatile __u32 cgroup_level = 0;

/*
 * --cgroup, several -p, --comm, --pgrep: calls entered per process (tgid),
 * counted up from the first; user space reads the growth since its last
 * read.
 */
const volatile bool count_procs = false;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} procs SEC(".maps");

static __always_inline bool process_wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (filter_tid && (__u32)pid_tgid != filter_tid)
		return false;
	if (filter_cgroup &&
	    bpf_get_current_ancestor_cgroup_id(cgroup_level) != filter_cgroup)
		return false;
	return !follow || bpf_map_lookup_elem(&followed, &tgid);
}

/* process_wanted() for a function's entry, which counts its process. */
static __always_inline bool entry_wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	__u64 one = 1, *n;

	if (!process_wanted(pid_tgid))
		return false;
	if (!count_procs)
		return true;
	n = bpf_map_lookup_elem(&procs, &tgid);
	/* Two threads making the entry at once: the second adds to it. */
	if (!n && bpf_map_update_elem(&procs, &tgid, &one, BPF_NOEXIST))
		n = bpf_map_lookup_elem(&procs, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	return true;
}

/* --follow: a process forked by a followed one is followed too. */
static __always_inline int follow_fork(struct task_struct *parent,
				       struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (ptgid == ctgid || !bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY);
	return 0;
}

#endif /* __TACHY_PROCESS_H */
