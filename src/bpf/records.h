/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --record-slower-than: one record per call at least that slow, through a
 * ring buffer.
 */
#ifndef __TACHY_RECORDS_H
#define __TACHY_RECORDS_H

/*
 * --record-slower-than: a record of each call at least record_min_ns long
 * (the duration the histograms get), sent through a ring buffer that user
 * space reads while tracing. A full buffer never waits: the record is
 * counted in rec_lost instead. Nothing of this runs without the option.
 */
const volatile bool record = false;
const volatile __u64 record_min_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* set by user space */
} records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1); /* set by user space: one per function id */
	__type(key, __u32);
	__type(value, __u64);
} rec_lost SEC(".maps");

/* Where a record is put together (too big for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_record);
} rec_buf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_rec_args);
} rec_args SEC(".maps");

/* A traced function's frame opened at index `i`: keep its argument
 * registers (in the ABI's order) for its record. */
static __always_inline void rec_entry(struct pt_regs *ctx, __u32 i)
{
	struct tachy_rec_args *a;
	__u64 *r;

	if (!record || i >= TACHY_MAX_DEPTH)
		return;
	a = bpf_task_storage_get(&rec_args, bpf_get_current_task_btf(), 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!a)
		return;
	r = a->args[i];
	save_args(ctx, r);
}

/* The record being put together on this CPU, its common fields set. */
static __always_inline struct tachy_record *rec_start(__u32 id, __u64 now,
						      __u64 d, struct parts p)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct tachy_record *r;
	__u32 zero = 0;

	r = bpf_map_lookup_elem(&rec_buf, &zero);
	if (!r)
		return NULL;
	p = clamp_parts(p, d);
	r->end_ns = now;
	r->dur_ns = d;
	r->blocked_ns = p.blocked;
	r->runq_ns = p.runq;
	r->pid = pt >> 32;
	r->tid = pt;
	r->id = id;
	r->flags = cpu ? TACHY_REC_CPU : 0;
	r->ret = 0;
	r->nsites = 0;
	r->more_sites = 0;
	r->stack_how = TACHY_STACK_NONE;
	r->stack_len = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	return r;
}

/* The wakeup flag of the next record: forced once the ring buffer holds
 * more than a quarter of its size unread. */
static __always_inline __u64 rec_wakeup(void)
{
	__u64 unread = bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&records, BPF_RB_RING_SIZE);

	return unread > size / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* Sends the record with its first `nsites` sites (all of them, and the
 * stack, when it has one), or counts it lost. */
static __always_inline void rec_send(struct tachy_record *r, __u32 nsites)
{
	__u64 size = __builtin_offsetof(struct tachy_record, sites) +
		     (__u64)nsites * sizeof(struct tachy_rec_site);
	__u32 zero = 0, id;
	__u64 *lost;

	if (r->stack_how != TACHY_STACK_NONE)
		size = __builtin_offsetof(struct tachy_record, stack) +
		       (__u64)r->stack_len;
	/*
	 * Clamp and pass one register: clang otherwise tests stack_len and
	 * passes the unclamped sum, which 6.1's verifier finds unbounded.
	 */
	barrier_var(size);
	if (size > sizeof(*r))
		size = sizeof(*r);
	barrier_var(size);
	r->nsites = nsites;
	/* No wakeup while the buffer has room: user space reads on its own
	 * clock, and a wakeup per record would cost the traced thread. Past a
	 * quarter full (stack copies at a high rate fill it between two
	 * reads) the reader is woken to drain it. */
	if (!bpf_ringbuf_output(&records, r, size, rec_wakeup()))
		return;
	/* Counted by function, and never cleared: user space keeps what it
	 * read last. */
	id = r->id;
	lost = bpf_map_lookup_elem(&rec_lost, &id);
	if (!lost)
		lost = bpf_map_lookup_elem(&rec_lost, &zero);
	if (lost)
		(*lost)++;
}

struct rec_sites_ctx {
	struct tachy_thread *t;
	struct tachy_record *r;
};

static long rec_site_one(__u64 i, void *data)
{
	struct rec_sites_ctx *c = data;
	struct tachy_pending *p;

	if (i >= TACHY_REC_SITES)
		return 1;
	p = &c->t->pend[i];
	c->r->sites[i].node = c->t->pend_node[i];
	c->r->sites[i].ns = p->ns;
	c->r->sites[i].cnt = p->cnt + p->unw;
	return 0;
}

/*
 * A traced function's frame `f`, at the top of the stack, closes at `now`
 * after `d` ns, returning `rv` where `rv_ok` (to `ret` where the probe
 * knows it, else 0): record it if it is that slow.
 * The outermost traced call of `tachy nested` carries its sites' time
 * (what they hold pending).
 */
static __always_inline void rec_close(struct tachy_thread *t,
				      struct tachy_frame *f, __u64 now, __u64 d,
				      __u64 ret, __u64 rv, bool rv_ok)
{
	struct rec_sites_ctx c = {.t = t};
	__u32 i = t->depth - 1, n = 0;
	struct tachy_rec_args *a;
	struct tachy_record *r;

	if (!record || d < record_min_ns || (f->flags & TACHY_FRAME_SITE))
		return;
	r = rec_start(f->id, now, d,
		      parts_since(&t->cpu, f->blocked0, f->runq0));
	if (!r)
		return;
	if (rv_ok) {
		r->ret = rv;
		r->flags |= TACHY_REC_RET;
	}
	a = bpf_task_storage_get(&rec_args, bpf_get_current_task_btf(), 0, 0);
	if (a && i < TACHY_MAX_DEPTH)
		__builtin_memcpy(r->args, a->args[i], sizeof(r->args));
	else
		__builtin_memset(r->args, 0, sizeof(r->args));
	if (nested && (f->flags & TACHY_FRAME_ROOT) && t->roots == 1) {
		n = t->npend;
		if (n > TACHY_MAX_PENDING)
			n = TACHY_MAX_PENDING;
		if (n > TACHY_REC_SITES) {
			r->more_sites = n - TACHY_REC_SITES;
			n = TACHY_REC_SITES;
		}
		c.r = r;
		if (n)
			bpf_loop(n, rec_site_one, &c, 0);
		r->flags |= TACHY_REC_SITESOK;
	}
	if (stack_how != TACHY_STACK_NONE)
		rec_stack(r, f->sp, ret);
	rec_send(r, n);
}

#endif /* __TACHY_RECORDS_H */
