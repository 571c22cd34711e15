/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Kernel functions: fentry/fexit, or kprobes.
 */
#ifndef __TACHY_KERNEL_H
#define __TACHY_KERNEL_H

/*
 * Kernel functions, through fentry/fexit where the kernel allows them, else
 * kprobes (the function id is the kprobe's cookie; an fentry/fexit pair is
 * one instance of this object per function, with its id in kfunc_id).
 * Kernel code does not unwind, so a per-thread stack of start times matched
 * by id is enough; a return whose entry was missed closes nothing.
 */
const volatile __u32 kfunc_id = 0;

struct tachy_kframes {
	__u32 depth;
	__u32 pad;
	__u64 start_ns[TACHY_MAX_KDEPTH];
	__u32 id[TACHY_MAX_KDEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_kframes);
} kframes SEC(".maps");

static __always_inline int kfunc_enter(__u32 id)
{
	struct tachy_kframes *k;
	__u32 d;

	if (!syscall_wanted())
		return 0;
	k = bpf_task_storage_get(&kframes, bpf_get_current_task_btf(), 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!k)
		return 0;
	d = k->depth;
	if (d >= TACHY_MAX_KDEPTH) {
		struct tachy_stats *s = stats_of(id);

		if (s)
			s->overflow++;
		return 0;
	}
	k->start_ns[d] = bpf_ktime_get_ns();
	k->id[d] = id;
	k->depth = d + 1;
	return 0;
}

static __always_inline int kfunc_exit(__u32 id)
{
	struct tachy_kframes *k;
	__u32 d;

	k = bpf_task_storage_get(&kframes, bpf_get_current_task_btf(), 0, 0);
	if (!k || !k->depth)
		return 0;
	d = k->depth - 1;
	if (d >= TACHY_MAX_KDEPTH || k->id[d] != id)
		return 0;
	record_ns(id, bpf_ktime_get_ns() - k->start_ns[d], (struct parts){},
		  false);
	k->depth = d;
	return 0;
}

#endif /* __TACHY_KERNEL_H */
