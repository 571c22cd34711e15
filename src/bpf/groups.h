/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --by: calls grouped by key (tachy.h) in a bounded hash map of the kernel.
 */
#ifndef __TACHY_GROUPS_H
#define __TACHY_GROUPS_H

/*
 * --by: calls grouped by key (tachy.h). The key kinds, in the order of the
 * group key's values; TACHY_BY_NONE past the last.
 */
const volatile enum tachy_by_kind by_kind[TACHY_BY_KEYS] = {};
/* Some kind is read at entry (kept per frame in by_frames). */
const volatile bool by_entry = false;
/* Some kind is TACHY_BY_ARG, read where by_args says. */
const volatile bool by_arg = false;
/* TACHY_BY_GOID: the offset of goid in Go's runtime.g. */
const volatile __u32 go_goid = 0;

/* Per id (nfuncs entries when by_arg, set by user space; 1 otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_by_args);
} by_args SEC(".maps");

/*
 * (function, key values, interval) -> calls. Sized by user space, which
 * also puts in each function's "other" group of both intervals, so that a
 * call the full map has no room for is counted there.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1);
	__type(key, struct tachy_group_key);
	__type(value, struct tachy_group);
} groups SEC(".maps");

/* Never written: a new group's first value. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_group);
} group_zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_by_frames);
} by_frames SEC(".maps");

/* Whether some key is of this kind (known at load: the branches on it are
 * dead code otherwise). */
static __always_inline bool by_has(__u32 kind)
{
	__u32 k;

	for (k = 0; k < TACHY_BY_KEYS; k++)
		if (by_kind[k] == kind)
			return true;
	return false;
}

/*
 * The values read at entry of a call of `id`, with registers `regs` and SP
 * `sp` (the address of the return-address slot), into vals[]: each
 * argument's (others are 0).
 */
static __always_inline void by_entry_values(__u32 id, struct pt_regs *regs,
					    __u64 sp, __u64 *vals)
{
	struct tachy_by_args *a = NULL;
	__u64 r[16], pt = bpf_get_current_pid_tgid();
	__u32 k;

	if (by_arg) {
		a = bpf_map_lookup_elem(&by_args, &id);
		if (a)
			save_regs(regs, r);
	}
	for (k = 0; k < TACHY_BY_KEYS; k++) {
		vals[k] = 0;
		if (by_kind[k] == TACHY_BY_ARG && a &&
		    opnd_read(&a->opnd[k], r, sp, pt, &vals[k]))
			vals[k] = 0;
	}
}

/* At a traced function's entry: keeps the values of the frame about to
 * open (index t->depth) that are read at entry. */
static __always_inline void by_open(struct tachy_thread *t, __u32 id,
				    struct pt_regs *ctx, __u64 sp)
{
	struct tachy_by_frames *bf;
	__u32 i = t->depth;

	if (!by_entry || i >= TACHY_MAX_DEPTH)
		return;
	bf = bpf_task_storage_get(&by_frames, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!bf)
		return;
	barrier_var(i);
	by_entry_values(id, ctx, sp, bf->val[i & (TACHY_MAX_DEPTH - 1)]);
}

/* The value of a key known when the call ends, on its own thread. */
static __always_inline __u64 by_close_value(__u32 kind, __u64 pid_tgid)
{
	if (kind == TACHY_BY_TID)
		return (__u32)pid_tgid;
	if (kind == TACHY_BY_PID)
		return pid_tgid >> 32;
	return 0;
}

/* A new group's name: its thread's, or by pid only, its process's. */
static __always_inline void group_name(struct tachy_group *g)
{
	struct task_struct *task;
	__u32 k;

	for (k = 0; k < TACHY_BY_KEYS; k++)
		if (by_kind[k] == TACHY_BY_TID) {
			bpf_get_current_comm(g->comm, sizeof(g->comm));
			return;
		}
	task = bpf_get_current_task_btf();
	BPF_CORE_READ_STR_INTO(&g->comm, task, group_leader, comm);
}

struct place_ctx {
	__u64 addr;
	__u64 ino;
	__u64 off;
	__u32 dev;
};

static long place_of(struct task_struct *task, struct vm_area_struct *vma,
		     void *data)
{
	struct place_ctx *c = data;
	struct file *f = vma->vm_file;

	if (!f)
		return 0;
	c->off = c->addr - vma->vm_start + (vma->vm_pgoff << 12);
	c->ino = f->f_inode->i_ino;
	c->dev = f->f_inode->i_sb->s_dev;
	return 0;
}

/* A new caller group's place: the file and offset its address maps. */
static __always_inline void group_place(struct tachy_group *g,
					struct tachy_group_key *key)
{
	struct place_ctx c = {};
	__u32 k;

	for (k = 0; k < TACHY_BY_KEYS; k++)
		if (by_kind[k] == TACHY_BY_CALLER)
			c.addr = key->val[k];
	if (bpf_find_vma(bpf_get_current_task_btf(), c.addr, place_of, &c, 0))
		return;
	g->caller_ino = c.ino;
	g->caller_off = c.off;
	g->caller_dev = c.dev;
}

/*
 * Adds a call of d ns to its group; when the map has no room for a new
 * group, to the function's "other" group, which user space put in.
 */
static __always_inline void group_add(struct tachy_group_key *key, __u64 d)
{
	struct tachy_group *g, *zero;
	__u32 z = 0;

	key->gen = generation & 1;
	g = bpf_map_lookup_elem(&groups, key);
	if (!g) {
		zero = bpf_map_lookup_elem(&group_zero, &z);
		if (!zero)
			return;
		/* Fails when the map is full, or another CPU made it. */
		if (!bpf_map_update_elem(&groups, key, zero, BPF_NOEXIST)) {
			g = bpf_map_lookup_elem(&groups, key);
			if (g) {
				group_name(g);
				if (by_has(TACHY_BY_CALLER))
					group_place(g, key);
			}
		} else {
			g = bpf_map_lookup_elem(&groups, key);
		}
	}
	if (!g) {
		__builtin_memset(key->val, 0, sizeof(key->val));
		key->tgid = 0;
		key->other = 1;
		g = bpf_map_lookup_elem(&groups, key);
		if (!g)
			return;
	}
	__sync_fetch_and_add(&g->count, 1);
	__sync_fetch_and_add(&g->total_ns, d);
	__sync_fetch_and_add(&g->buckets[bucket_of_ns(d)], 1);
}

/*
 * The return value `rv` of a call of `id` as key k: as wide and signed as
 * the function's return type (by_args), so that the bits the ABI leaves
 * undefined above a narrower value make no groups of their own.
 */
static __always_inline __u64 by_ret_value(__u32 id, __u32 k, __u64 rv)
{
	struct tachy_by_args *a = bpf_map_lookup_elem(&by_args, &id);

	if (!a)
		return rv;
	return opnd_extend(&a->opnd[k & (TACHY_BY_KEYS - 1)], rv);
}

/*
 * A call of function `id` that lasted d ns ends, with the key values read
 * at its entry (or a Go call's goroutine) in `vals` (NULL when none were
 * kept), its return address `ret` and its return register `rv`: counted
 * in its group, unless --slower-than/--faster-than left it out.
 */
static __always_inline void by_close(__u32 id, __u64 d, const __u64 *vals,
				     __u64 ret, __u64 rv)
{
	struct tachy_group_key key = {.id = id};
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 k, kind;

	if (by_kind[0] == TACHY_BY_NONE || d < min_ns || (max_ns && d > max_ns))
		return;
	if (by_entry && !vals)
		return;
	for (k = 0; k < TACHY_BY_KEYS; k++) {
		kind = by_kind[k];
		if (kind == TACHY_BY_CALLER) {
			key.val[k] = ret;
			/* An address means something in its process only. */
			key.tgid = pt >> 32;
		} else if (kind == TACHY_BY_ARG || kind == TACHY_BY_GOID) {
			if (vals)
				key.val[k] = vals[k];
		} else if (kind == TACHY_BY_RETVAL) {
			key.val[k] = by_ret_value(id, k, rv);
		} else {
			key.val[k] = by_close_value(kind, pt);
		}
	}
	group_add(&key, d);
}

/* The values frame i of this thread kept at entry, if any. */
static __always_inline const __u64 *by_frame_vals(__u32 i)
{
	struct tachy_by_frames *bf;

	if (!by_entry || i >= TACHY_MAX_DEPTH)
		return NULL;
	bf = bpf_task_storage_get(&by_frames, bpf_get_current_task_btf(), 0, 0);
	/* Else the compiler drops the mask, which the verifier needs. */
	barrier_var(i);
	return bf ? bf->val[i & (TACHY_MAX_DEPTH - 1)] : NULL;
}

#endif /* __TACHY_GROUPS_H */
