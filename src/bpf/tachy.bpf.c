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
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "tachy.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Settings, written once by user space before load. */
const volatile __u32 nfuncs = 1;
const volatile __u32 filter_tid = 0;
/* Process whose system calls are timed; 0 for every process. */
const volatile __u32 filter_tgid = 0;
const volatile __u64 min_ns = 0;
const volatile __u64 max_ns = 0;
const volatile bool outermost = false;
/* `tachy nested`: ids past the traced functions are call sites. */
const volatile bool nested = false;
/* Durations are bucketed in display units (ns per unit), as funclatency. */
const volatile __u64 unit_ns = 1;
/* --cpu: split each call into on-CPU, blocked and runnable time. */
const volatile bool cpu = false;
/* --cpu --hist: and a histogram of each part. */
const volatile bool cpu_hist = false;
/* --cpu with system calls: account the threads inside one too. */
const volatile bool cpu_sys = false;

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
 * read and cleared by user space with each report.
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
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&procs, &tgid, &one, BPF_NOEXIST);
	return true;
}

/*
 * Which half of `stats` the probes write. User space flips it, then reads
 * and clears the other half, so no call is lost between reports.
 */
volatile __u32 generation = 0;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_thread);
} threads SEC(".maps");

/* `tachy nested`: (slot << 32 | parent id) -> node id of that site. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TACHY_MAX_NODES);
	__type(key, __u64);
	__type(value, __u32);
} site_nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 2 * nfuncs, set by user space */
	__type(key, __u32);
	__type(value, struct tachy_stats);
} stats SEC(".maps");

/* Per id: the probe time subtracted (all zero with --raw). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* nfuncs, set by user space */
	__type(key, __u32);
	__type(value, struct tachy_corr);
} corr SEC(".maps");

static __always_inline struct tachy_stats *stats_of(__u32 id)
{
	__u32 key = (generation & 1) * nfuncs + id;

	return bpf_map_lookup_elem(&stats, &key);
}

/* --cpu --hist: 2 * nfuncs entries, as stats (1 otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_parts);
} part_hist SEC(".maps");

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xffffffffULL) << 5;
	v >>= shift;
	r |= shift;
	shift = (v > 0xffff) << 4;
	v >>= shift;
	r |= shift;
	shift = (v > 0xff) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xf) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r;
}

/*
 * floor(log2(v)), 0 for 0, without a branch: each step shifts by its
 * width exactly when the bits above it are not all zero ((x + 2^k - 1) >>
 * k is 1 for 0 < x < 2^k). log2_u64() branches, which lets the verifier
 * bound the index it gives; the part slots are masked instead, and the
 * exit programs, near the verifier's limit, cannot afford a branch per
 * step for each of a site call's three parts.
 */
static __always_inline __u32 log2_flat(__u64 v)
{
	__u64 r, s;

	r = (((v >> 32) + 0xffffffffULL) >> 32) << 5;
	v >>= r;
	s = (((v >> 16) + 0xffff) >> 16) << 4;
	v >>= s;
	r |= s;
	s = (((v >> 8) + 0xff) >> 8) << 3;
	v >>= s;
	r |= s;
	s = (((v >> 4) + 0xf) >> 4) << 2;
	v >>= s;
	r |= s;
	s = (((v >> 2) + 0x3) >> 2) << 1;
	v >>= s;
	r |= s;
	return r | (v >> 1);
}

static __always_inline __u32 bucket_of(__u64 v)
{
	__u32 lg;

	if (v < TACHY_SUBBUCKETS)
		return v;
	lg = log2_u64(v);
	return (lg - TACHY_SUB_BITS + 1) * TACHY_SUBBUCKETS +
	       ((v >> (lg - TACHY_SUB_BITS)) & (TACHY_SUBBUCKETS - 1));
}

static __always_inline void count_unwound(__u32 id)
{
	struct tachy_stats *s = stats_of(id);

	if (s)
		s->unwound++;
}

static __always_inline __u32 bucket_of_ns(__u64 d)
{
	__u32 b = bucket_of(unit_ns > 1 ? d / unit_ns : d);

	return b < TACHY_NBUCKETS ? b : TACHY_NBUCKETS - 1;
}

static __always_inline void add_bucket(struct tachy_stats *s, __u64 d)
{
	s->buckets[bucket_of_ns(d)]++;
}

/* The log2 slot of a part in display units, as funclatency's. */
static __always_inline __u32 slot_of_ns(__u64 d)
{
	return log2_flat(unit_ns > 1 ? d / unit_ns : d) &
	       (TACHY_PART_SLOTS - 1);
}

/* --cpu: a call's blocked and runnable parts, and the rest, on-CPU. */
struct parts {
	__u64 blocked;
	__u64 runq;
};

/* A switch missed (a lookup refused) never makes parts exceed d. */
static __always_inline struct parts clamp_parts(struct parts p, __u64 d)
{
	if (p.blocked > d)
		p.blocked = d;
	if (p.runq > d - p.blocked)
		p.runq = d - p.blocked;
	return p;
}

/* Adds a call of d ns, with parts p (clamped), to s. */
static __always_inline void add_parts(struct tachy_stats *s, __u64 d,
				      struct parts p)
{
	s->oncpu_ns += d - p.blocked - p.runq;
	s->blocked_ns += p.blocked;
	s->runq_ns += p.runq;
}

/*
 * --cpu --hist: one call's parts (clamped to d already) as their log2
 * slots, 6 bits each (on-CPU, blocked, runnable from the top), as a site
 * call keeps them pending.
 */
static __always_inline __u32 part_slots(__u64 d, struct parts p)
{
	return slot_of_ns(d - p.blocked - p.runq) << 12 |
	       slot_of_ns(p.blocked) << 6 | slot_of_ns(p.runq);
}

/* Adds one call's part_slots() to the part histograms of `id`. */
static __always_inline void add_part_slots(__u32 id, __u32 slots)
{
	struct tachy_parts *h;
	__u32 key;

	if (!cpu_hist)
		return;
	key = (generation & 1) * nfuncs + id;
	h = bpf_map_lookup_elem(&part_hist, &key);
	if (!h)
		return;
	h->oncpu[(slots >> 12) & 63]++;
	h->blocked[(slots >> 6) & 63]++;
	h->runq[slots & 63]++;
}

static __always_inline void record_parts(__u32 id, struct tachy_stats *s,
					 __u64 d, struct parts p)
{
	p = clamp_parts(p, d);
	add_parts(s, d, p);
	if (cpu_hist)
		add_part_slots(id, part_slots(d, p));
}

static __always_inline void record_ns(__u32 id, __u64 d, struct parts p,
				      bool indirect_tail)
{
	struct tachy_stats *s = stats_of(id);

	if (!s)
		return;
	if (d < min_ns || (max_ns && d > max_ns)) {
		s->filtered++;
		return;
	}
	if (indirect_tail)
		s->indirect_tail++;
	/* min is meaningful once count is: a call of 0 ns is min 0. */
	if (!s->count || d < s->min_ns)
		s->min_ns = d;
	if (d > s->max_ns)
		s->max_ns = d;
	s->count++;
	s->total_ns += d;
	add_bucket(s, d);
	if (cpu)
		record_parts(id, s, d, p);
}

/*
 * --cpu: the steal time (what the hypervisor ran instead of this virtual
 * CPU) of the CPU that task `p` is on, up to the scheduler's last clock
 * update there: at a context switch that is the switch itself; elsewhere
 * at most a tick ago. Read through the task's own run queue (its CFS
 * queue's rq), as per-CPU kernel symbols cannot be looked up without
 * CONFIG_KALLSYMS_ALL. 0 where the kernel does not account steal time.
 */
static __always_inline __u64 steal_now(struct task_struct *p)
{
	if (!bpf_core_field_exists(struct rq, prev_steal_time_rq) ||
	    !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	/* Direct loads of BTF pointers: no helper call per step. */
	return p->se.cfs_rq->rq->prev_steal_time_rq;
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
	__u64 s = steal_now(p);

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

struct flush_ctx {
	struct tachy_thread *t;
	bool keep;
};

/*
 * The pending entry of site node `id` on this thread, taken on its first
 * call in the current outermost traced call; NULL when the thread holds
 * TACHY_MAX_PENDING sites already (the caller counts it at once).
 */
static __always_inline struct tachy_pending *pending_of(struct tachy_thread *t,
							__u32 id)
{
	__u32 k, n;

	if (id >= TACHY_MAX_NODES)
		return NULL;
	k = t->pend_of[id];
	if (!k) {
		n = t->npend;
		if (n >= TACHY_MAX_PENDING)
			return NULL;
		t->pend_node[n] = id;
		t->npend = n + 1;
		k = n + 1;
		t->pend_of[id] = k;
	}
	return &t->pend[(k - 1) & (TACHY_MAX_PENDING - 1)];
}

static long flush_one(__u64 i, void *data)
{
	struct flush_ctx *c = data;
	struct tachy_thread *t = c->t;
	struct tachy_pending *p;
	struct tachy_stats *s;
	__u32 id;

	if (i >= TACHY_MAX_PENDING)
		return 1;
	id = t->pend_node[i];
	p = &t->pend[i];
	if (c->keep) {
		s = stats_of(id);
		if (s) {
			s->count += p->cnt;
			s->total_ns += p->ns;
			s->unwound += p->unw;
			if (cpu)
				add_parts(s, p->ns,
					  (struct parts){p->blocked, p->runq});
		}
	}
	p->cnt = 0;
	p->ns = 0;
	p->unw = 0;
	p->blocked = 0;
	p->runq = 0;
	t->pend_of[id & (TACHY_MAX_NODES - 1)] = 0;
	return 0;
}

static long flush_hist_one(__u64 i, void *data)
{
	struct flush_ctx *c = data;
	__u32 e = c->t->pend_hist[i & (TACHY_MAX_PENDING_HIST - 1)];
	struct tachy_stats *s;
	__u32 b = e & 0xffff;

	if (i >= TACHY_MAX_PENDING_HIST)
		return 1;
	s = stats_of(e >> 16);
	if (s && b < TACHY_NBUCKETS)
		s->buckets[b]++;
	if (cpu_hist)
		add_part_slots(
			e >> 16,
			c->t->pend_parts[i & (TACHY_MAX_PENDING_HIST - 1)]);
	return 0;
}

/*
 * Adds, then clears, what the sites of the ending call accumulated. A
 * bpf_loop keeps this out of the callers' loops, which the verifier would
 * otherwise unroll into each other.
 */
static __always_inline void flush_pending(struct tachy_thread *t, bool keep)
{
	struct flush_ctx c = {.t = t, .keep = keep};
	__u32 n = t->npend;
	__u32 h = t->pend_nhist;

	if (n > TACHY_MAX_PENDING)
		n = TACHY_MAX_PENDING;
	if (h > TACHY_MAX_PENDING_HIST)
		h = TACHY_MAX_PENDING_HIST;
	if (n)
		bpf_loop(n, flush_one, &c, 0);
	if (keep && h)
		bpf_loop(h, flush_hist_one, &c, 0);
	t->npend = 0;
	t->pend_nhist = 0;
}

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
	__uint(max_entries, 1);
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
 * registers (SysV x86-64 order) for its record. */
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
	r[0] = ctx->di;
	r[1] = ctx->si;
	r[2] = ctx->dx;
	r[3] = ctx->cx;
	r[4] = ctx->r8;
	r[5] = ctx->r9;
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
	r->nsites = 0;
	r->more_sites = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	return r;
}

/* Sends the record with its first `nsites` sites, or counts it lost. */
static __always_inline void rec_send(struct tachy_record *r, __u32 nsites)
{
	__u64 size = __builtin_offsetof(struct tachy_record, sites) +
		     (__u64)nsites * sizeof(struct tachy_rec_site);
	__u32 zero = 0;
	__u64 *lost;

	if (size > sizeof(*r))
		size = sizeof(*r);
	r->nsites = nsites;
	/* No wakeup: user space reads on its own clock, and a wakeup per
	 * record would cost the traced thread. */
	if (!bpf_ringbuf_output(&records, r, size, BPF_RB_NO_WAKEUP))
		return;
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
 * after `d` ns: record it if it is that slow. The outermost traced call of
 * `tachy nested` carries its sites' time (what they hold pending).
 */
static __always_inline void rec_close(struct tachy_thread *t,
				      struct tachy_frame *f, __u64 now, __u64 d)
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
	rec_send(r, n);
}

/* --cpu: the parts of a site call of d ns that frame f timed. */
static __always_inline struct parts site_parts(struct tachy_thread *t,
					       struct tachy_frame *f, __u64 d)
{
	return clamp_parts(parts_since(&t->cpu, f->blocked0, f->runq0), d);
}

/*
 * The frame below the top one, which a call closing at the top of the
 * stack ran inside of.
 */
static __always_inline struct tachy_frame *below_top(struct tachy_thread *t)
{
	__u32 i = t->depth - 2;

	if (t->depth < 2 || i >= TACHY_MAX_DEPTH)
		return NULL;
	return &t->frames[i & (TACHY_MAX_DEPTH - 1)];
}

/* The top frame took `ns` (corrected) inside the frame below it. */
static __always_inline void add_inner(struct tachy_thread *t, __u64 ns)
{
	__u32 i = t->depth - 2;

	if (t->depth >= 2 && i < TACHY_MAX_DEPTH)
		t->frames[i].inner_ns += ns;
}

/*
 * The top frame ends: its probes' time, and that of the calls inside it,
 * lies inside the frame below it too.
 */
static __always_inline void pass_probe_time(struct tachy_thread *t,
					    struct tachy_frame *f,
					    struct tachy_corr *c)
{
	struct tachy_frame *up = below_top(t);
	__u64 in, add;

	if (!up)
		return;
	in = c ? c->in_ns : 0;
	add = c ? c->add_ns : 0;
	/*
	 * A frame that tail-called this one closes at this same exit: what
	 * the exit probe costs after its clock read (a single-step of `ret`,
	 * say) is outside it, so it takes only the part inside the callee and
	 * hands the rest on to its own caller.
	 */
	if (up->sp == f->sp && (up->flags & TACHY_FRAME_TAILING) && add > in) {
		__u64 after = (__u64)up->after_ns + f->after_ns + (add - in);

		up->probe_ns += f->probe_ns + in;
		up->after_ns = after > 0xffffffffULL ? 0xffffffffU : after;
	} else {
		up->probe_ns += f->probe_ns + add + f->after_ns;
	}
}

/*
 * The general registers saved at the probe, numbered as x86 encodes them.
 * Copied out with constant offsets: the verifier refuses a context read at
 * a computed one, which a switch on the number compiles to.
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
 * The value of operand t (a --filter term's, or a --by argument's) at a
 * call's entry, with registers `r` and SP `sp`, extended from its size as
 * its sign says; non-zero when it cannot be read.
 */
static __always_inline int opnd_read(struct tachy_term *t, __u64 r[16],
				     __u64 sp, __u64 pid_tgid, __u64 *out)
{
	__u32 shift = 64 - 8 * (t->size & 15);
	__u64 v = 0;
	bool sgn = t->flags & TACHY_TERM_SIGNED;

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
	/* The ABI leaves the bits above a narrower argument undefined. */
	if (shift && shift < 64) {
		v <<= shift;
		v = sgn ? (__u64)((__s64)v >> shift) : v >> shift;
	}
	*out = v;
	return 0;
}

/*
 * --by: calls grouped by key (tachy.h). The key kinds, in the order of the
 * group key's values; TACHY_BY_NONE past the last.
 */
const volatile __u32 by_kind[TACHY_BY_KEYS] = {};
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
 * A call of function `id` that lasted d ns ends, with the key values read
 * at its entry (or a Go call's goroutine) in `vals` (NULL when none were
 * kept) and its return address `ret`: counted in its group, unless
 * --slower-than/--faster-than left it out.
 */
static __always_inline void by_close(__u32 id, __u64 d, const __u64 *vals,
				     __u64 ret)
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

/*
 * A frame ends normally at `now` (a traced function's: by a return, or by
 * an indirect tail jump, to which it is timed). Its duration is without the
 * probes' own time (never below zero). `ret` is its return address where
 * the probe knows it (a uretprobe, whose trampoline took the slot's place),
 * else 0: the slot still holds it.
 */
static __always_inline void close_frame(struct tachy_thread *t,
					struct tachy_frame *f, __u64 now,
					bool indirect_tail, __u64 ret)
{
	__u32 id = f->id;
	struct tachy_corr *c = bpf_map_lookup_elem(&corr, &id);
	__u64 d = now - f->start_ns;
	__u64 sub = f->probe_ns + (c ? c->in_ns : 0);

	pass_probe_time(t, f, c);
	if (d < sub) {
		struct tachy_stats *s = stats_of(id);

		if (s)
			s->under++;
		d = 0;
	} else {
		d -= sub;
	}
	/*
	 * A call lasts at least as long as the calls timed inside it: where
	 * the probe time subtracted drifted above the real one, the calls
	 * inside keep their time and this one is not read shorter.
	 */
	if (d < f->inner_ns)
		d = f->inner_ns;
	add_inner(t, d);
	rec_close(t, f, now, d);

	if (nested && (f->flags & TACHY_FRAME_SITE)) {
		struct tachy_pending *p = pending_of(t, id);
		struct parts pp = site_parts(t, f, d);
		struct tachy_stats *s;

		/* Count, total and histogram wait for the outermost traced
		 * call to end, and its filter. */
		if (p) {
			__u32 n = t->pend_nhist;

			p->ns += d;
			p->cnt++;
			p->blocked += pp.blocked;
			p->runq += pp.runq;
			if (n < TACHY_MAX_PENDING_HIST) {
				t->pend_hist[n & (TACHY_MAX_PENDING_HIST - 1)] =
					id << 16 | bucket_of_ns(d);
				if (cpu_hist)
					t->pend_parts[n &
						      (TACHY_MAX_PENDING_HIST -
						       1)] = part_slots(d, pp);
				t->pend_nhist = n + 1;
				return;
			}
		}
		/* Beyond what a thread holds, the counters take it now. */
		s = stats_of(id);
		if (s) {
			if (!p) {
				s->count++;
				s->total_ns += d;
				if (cpu)
					add_parts(s, d, pp);
			}
			add_bucket(s, d);
			if (cpu_hist)
				add_part_slots(id, part_slots(d, pp));
			s->hist_early++;
		}
		return;
	}
	if (nested && (f->flags & TACHY_FRAME_ROOT)) {
		bool keep = !(d < min_ns || (max_ns && d > max_ns));

		record_ns(id, d, parts_since(&t->cpu, f->blocked0, f->runq0),
			  indirect_tail);
		if (t->roots)
			t->roots--;
		if (!t->roots)
			flush_pending(t, keep);
		return;
	}
	record_ns(id, d, parts_since(&t->cpu, f->blocked0, f->runq0),
		  indirect_tail);
	/* f is the top frame. */
	if (by_kind[0] == TACHY_BY_NONE)
		return;
	/*
	 * The caller is read now rather than at entry: the call's own probes
	 * then cost what plain timing costs, and the slot is the same.
	 */
	if (by_has(TACHY_BY_CALLER) && !ret)
		user_read8(f->sp, &ret);
	by_close(id, d, by_frame_vals(t->depth - 1), ret);
}

/*
 * A frame was abandoned (exception, longjmp, lost exit), seen at `now`. A
 * site's time up to then still counts for its total, so that its own sites,
 * which ended before, never add up to more than it; like its other
 * counters, it waits for the outermost traced call's end and filter.
 */
static __always_inline void drop_frame(struct tachy_thread *t,
				       struct tachy_frame *f, __u64 now)
{
	__u32 id = f->id;
	struct tachy_corr *c = bpf_map_lookup_elem(&corr, &id);
	__u64 d = now - f->start_ns;

	pass_probe_time(t, f, c);
	if (nested && (f->flags & TACHY_FRAME_SITE)) {
		struct tachy_pending *p = pending_of(t, id);
		__u64 own = d > f->probe_ns ? d - f->probe_ns : 0;
		struct parts pp = site_parts(t, f, own);
		struct tachy_stats *s;

		/* Its time counts inside its parent's, as a closed one's. */
		add_inner(t, own);

		if (p) {
			p->ns += own;
			p->unw++;
			p->blocked += pp.blocked;
			p->runq += pp.runq;
		} else if ((s = stats_of(id))) {
			s->total_ns += own;
			s->unwound++;
			if (cpu)
				add_parts(s, own, pp);
		}
		return;
	}
	count_unwound(id);
	if (nested && (f->flags & TACHY_FRAME_ROOT)) {
		if (t->roots)
			t->roots--;
		if (!t->roots)
			flush_pending(t, false);
	}
}

static __always_inline struct tachy_thread *current_thread(bool create)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return bpf_task_storage_get(
		&threads, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

static __always_inline struct tachy_frame *top(struct tachy_thread *t)
{
	__u32 i = t->depth - 1;

	if (i >= TACHY_MAX_DEPTH)
		return NULL;
	return &t->frames[i];
}

/* sp lies above the frame, on the same stack: the frame is gone. */
static __always_inline bool above(struct tachy_frame *f, __u64 sp)
{
	return f->sp < sp && sp - f->sp < TACHY_STACK_WINDOW;
}

static __always_inline bool push(struct tachy_thread *t, __u64 sp, __u64 now,
				 __u32 id, __u32 flags, __u32 slot)
{
	struct tachy_frame *f;

	if (t->depth >= TACHY_MAX_DEPTH) {
		struct tachy_stats *s = stats_of(id);

		if (s)
			s->overflow++;
		return false;
	}
	f = &t->frames[t->depth & (TACHY_MAX_DEPTH - 1)];
	f->sp = sp;
	f->start_ns = now;
	f->probe_ns = 0;
	f->inner_ns = 0;
	if (cpu)
		steal_settle(&t->cpu, bpf_get_current_task_btf());
	f->blocked0 = t->cpu.blocked_ns;
	f->runq0 = t->cpu.runq_ns;
	f->id = id;
	f->flags = flags;
	f->slot = slot;
	f->after_ns = 0;
	t->depth++;
	if (flags & TACHY_FRAME_ROOT)
		t->roots++;
	return true;
}

/*
 * Before a frame opens at `sp`: frames below it were abandoned, and so is
 * one at the same SP unless it left by a tail jump (its callee then runs in
 * its place and returns for it). A call site opening at the SP its
 * function was entered with (a function that calls without moving SP) is
 * inside that function's frame, which stays.
 */
struct walk_ctx {
	struct tachy_thread *t;
	__u64 sp;
	__u64 now;
	__u64 ret;  /* the return address, where the probe knows it (or 0) */
	__u32 only; /* a site end: the slot of the one frame to close */
	__u32 id;   /* a function entry: its id (else ANY_ID) */
	bool all;   /* pop every frame: the thread is exiting */
	bool site;  /* a call site opens */
	/* an exit: the open sites that end with their parent above the key
	 * end with the frame closed there (else they were abandoned) */
	bool chain;
};

#define ANY_ID 0xffffffffU

/*
 * (caller id << 32 | callee id) of traced functions whose exits are
 * uretprobes, where the caller can reach the callee by tail jumps (callee
 * ANY_ID: by an indirect one). Such a caller has no probe on its tail
 * jumps (its uretprobe sees the return), so the callee's entry at its key
 * is how a tail call shows. Sized by user space.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, __u8);
} tail_pairs SEC(".maps");

/* Whether the call of `id` entering at frame f's key is f's tail call. */
static __always_inline bool tail_handover(struct tachy_frame *f, __u32 id)
{
	__u64 key = (__u64)f->id << 32 | id;

	if (!(f->flags & TACHY_FRAME_ROOT))
		return false;
	if (bpf_map_lookup_elem(&tail_pairs, &key))
		return true;
	key |= ANY_ID;
	return bpf_map_lookup_elem(&tail_pairs, &key);
}

static long pop_one(__u64 i, void *data)
{
	struct walk_ctx *c = data;
	struct tachy_thread *t = c->t;
	struct tachy_frame *f = top(t);

	if (!f)
		return 1;
	if (!c->all && !above(f, c->sp) &&
	    !(f->sp == c->sp && !(f->flags & TACHY_FRAME_TAILING) &&
	      !(c->site && (f->flags & TACHY_FRAME_ROOT))))
		return 1;
	if (!c->all && f->sp == c->sp && c->id != ANY_ID &&
	    tail_handover(f, c->id)) {
		/* Its callee returns for it, and closes it then. */
		f->flags |= TACHY_FRAME_TAILING;
		return 1;
	}
	drop_frame(t, f, c->now);
	t->depth--;
	return 0;
}

/* Before a frame opens at `sp`: that of function `id`, or a site's
 * (ANY_ID). */
static __always_inline void pop_abandoned(struct tachy_thread *t, __u64 sp,
					  __u64 now, bool site, __u32 id)
{
	struct walk_ctx c = {
		.t = t, .sp = sp, .now = now, .site = site, .id = id};

	/* bpf_loop keeps the verifier from unrolling nested loops. */
	bpf_loop(TACHY_MAX_DEPTH, pop_one, &c, 0);
}

/* --filter: whether any function or system call has an expression. */
const volatile bool arg_filter = false;

/* Per id (nfuncs entries, set by user space; 1 otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_filter);
} filters SEC(".maps");

static __always_inline bool term_holds(struct tachy_term *t, __u64 r[16],
				       __u64 sp, __u64 pid_tgid)
{
	bool sgn = t->flags & TACHY_TERM_SIGNED;
	__u64 v;

	if (opnd_read(t, r, sp, pid_tgid, &v))
		return false;
	switch (t->cmp) {
	case TACHY_CMP_EQ:
		return v == t->value;
	case TACHY_CMP_NE:
		return v != t->value;
	case TACHY_CMP_LT:
		return sgn ? (__s64)v < (__s64)t->value : v < t->value;
	case TACHY_CMP_LE:
		return sgn ? (__s64)v <= (__s64)t->value : v <= t->value;
	case TACHY_CMP_GT:
		return sgn ? (__s64)v > (__s64)t->value : v > t->value;
	default:
		return sgn ? (__s64)v >= (__s64)t->value : v >= t->value;
	}
}

/*
 * --filter: whether call `id`, entered with registers `r` and SP `sp`,
 * passes its expression (true when it has none). A rejected call is
 * counted here. An OR of AND groups: the terms of a group are evaluated
 * until one fails; the first group whose terms all hold passes the call.
 */
static __always_inline bool args_pass(__u32 id, struct pt_regs *r, __u64 sp,
				      __u64 pid_tgid)
{
	struct tachy_filter *f = bpf_map_lookup_elem(&filters, &id);
	struct tachy_stats *s;
	bool ok = true;
	__u64 regs[16];
	int i;

	if (!f || !f->nterms)
		return true;
	save_regs(r, regs);
	for (i = 0; i < TACHY_MAX_TERMS; i++) {
		struct tachy_term *t = &f->terms[i];

		if (i >= f->nterms)
			break;
		if (ok)
			ok = term_holds(t, regs, sp, pid_tgid);
		if (t->flags & TACHY_TERM_LAST) {
			if (ok)
				return true;
			ok = true;
		}
	}
	s = stats_of(id);
	if (s)
		s->argfilt++;
	return false;
}

static __always_inline int do_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 id = cookie & TACHY_ENTRY_ID_MASK;
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct tachy_thread *t;
	__u64 now;
	int i;

	if (!entry_wanted(bpf_get_current_pid_tgid()))
		return 0;
	if (arg_filter && !args_pass(id, ctx, sp, bpf_get_current_pid_tgid())) {
		/*
		 * A rejected call opens no frame, but frames it proves gone
		 * are gone as for any call: else its return, at their key,
		 * would close one that an exception left.
		 */
		t = current_thread(false);
		if (t && t->depth)
			pop_abandoned(t, sp, bpf_ktime_get_ns(), false, id);
		return 0;
	}
	now = bpf_ktime_get_ns();
	t = current_thread(true);
	if (!t)
		return 0;

	pop_abandoned(t, sp, now, false, id);

	if (outermost) {
		for (i = 0; i < TACHY_MAX_DEPTH; i++) {
			if (i >= t->depth)
				break;
			if (t->frames[i].id == id) {
				struct tachy_corr *c =
					bpf_map_lookup_elem(&corr, &id);
				__u32 top_i = t->depth - 1;

				/* This call's probes run inside the outer
				 * one. */
				if (c && top_i < TACHY_MAX_DEPTH)
					t->frames[top_i].probe_ns += c->add_ns;
				return 0;
			}
		}
	}

	by_open(t, id, ctx, sp);
	/*
	 * The clock is read again last: what this program did before is not
	 * the call's time.
	 */
	if (push(t, sp, bpf_ktime_get_ns(), id,
		 TACHY_FRAME_ROOT |
			 ((cookie & TACHY_ENTRY_TAILING) ? TACHY_FRAME_TAILING
							 : 0),
		 0))
		rec_entry(ctx, t->depth - 1);
	return 0;
}

/*
 * SP is at a frame's key: close it. Frames below were abandoned, except a
 * tail-jump site, which ends with its parent. `only`: close no frame but
 * the site of this slot (a site's end), else every frame at this key (a
 * function's `ret` also ends the frames that tail-jumped into it).
 */
static long exit_one(__u64 i, void *data)
{
	struct walk_ctx *c = data;
	struct tachy_thread *t = c->t;
	struct tachy_frame *f = top(t), *below;

	if (!f)
		return 1;
	if (f->sp == c->sp) {
		if (c->only != ANY_ID &&
		    (!(f->flags & TACHY_FRAME_SITE) || f->slot != c->only))
			return 1;
		close_frame(t, f, c->now, false, c->ret);
		t->depth--;
		return c->only != ANY_ID;
	}
	if (!above(f, c->sp))
		return 1;
	below = t->depth >= 2
			? &t->frames[(t->depth - 2) & (TACHY_MAX_DEPTH - 1)]
			: NULL;
	if ((f->flags & TACHY_FRAME_TAILSITE) &&
	    (c->chain || (below && below->sp == c->sp))) {
		close_frame(t, f, c->now, false, 0);
	} else {
		drop_frame(t, f, c->now);
		c->chain = false;
	}
	t->depth--;
	return 0;
}

/*
 * Frame i from the top (0): whether the sites that end with their parent,
 * open above the key, are a chain each inside the one below, down to the
 * frame the exit closes (c->chain). A site's own sites of that kind end
 * with it, at any depth.
 */
static long chain_one(__u64 i, void *data)
{
	struct walk_ctx *c = data;
	struct tachy_thread *t = c->t;
	__u32 k = t->depth - 1 - i;
	struct tachy_frame *f;

	if (k >= TACHY_MAX_DEPTH)
		return 1;
	f = &t->frames[k];
	if (above(f, c->sp) && (f->flags & TACHY_FRAME_TAILSITE))
		return 0;
	c->chain = f->sp == c->sp &&
		   (c->only == ANY_ID ||
		    ((f->flags & TACHY_FRAME_SITE) && f->slot == c->only));
	return 1;
}

static __always_inline void exit_at(struct tachy_thread *t, __u64 sp, __u64 now,
				    __u32 only, __u64 ret)
{
	struct walk_ctx c = {
		.t = t, .sp = sp, .now = now, .only = only, .ret = ret};
	struct tachy_frame *f = top(t);

	if (f && (f->flags & TACHY_FRAME_TAILSITE) && above(f, sp))
		bpf_loop(TACHY_MAX_DEPTH, chain_one, &c, 0);
	bpf_loop(TACHY_MAX_DEPTH, exit_one, &c, 0);
}

/* Whether a jcc with condition code cc is taken, from the saved flags. */
static __always_inline bool cond_taken(__u64 fl, __u32 cc)
{
	bool cf = fl & 0x1, pf = fl & 0x4, zf = fl & 0x40, sf = fl & 0x80,
	     of = fl & 0x800, r;

	switch (cc >> 1) {
	case 0:
		r = of;
		break;
	case 1:
		r = cf;
		break;
	case 2:
		r = zf;
		break;
	case 3:
		r = cf || zf;
		break;
	case 4:
		r = sf;
		break;
	case 5:
		r = pf;
		break;
	case 6:
		r = sf != of;
		break;
	default:
		r = zf || sf != of;
		break;
	}
	return (cc & 1) ? !r : r;
}

/* A return to the slot at `sp`; `ret`: the return address, where known. */
static __always_inline int do_exit(__u64 sp, __u64 ret)
{
	struct tachy_thread *t;

	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	exit_at(t, sp, bpf_ktime_get_ns(), ANY_ID, ret);
	return 0;
}

/* A `ret`, or an early exit that sees one coming (cookie in tachy.h). */
static __always_inline int do_exit_probe(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	if ((cookie & TACHY_EXIT_CONDITIONAL) &&
	    !cond_taken(ctx->flags, cookie & TACHY_EXIT_COND_MASK))
		return 0;
	return do_exit(PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32), 0);
}

/* The return of a call site (cookie: its slot, and an SP adjustment when
 * the probe stands after the return address). */
static __always_inline int do_site_end(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct tachy_thread *t;

	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	exit_at(t, sp, bpf_ktime_get_ns(), (__u32)cookie, 0);
	return 0;
}

/* The node that site `slot` times under frame `f`, or NULL. */
static __always_inline __u32 *node_of(__u32 slot, struct tachy_frame *f)
{
	__u64 key;

	if (!f)
		return NULL;
	key = (__u64)slot << 32 | f->id;
	return bpf_map_lookup_elem(&site_nodes, &key);
}

/*
 * A call site of `tachy nested` opens, at a `call` (keyed by SP there,
 * which is SP again at the return address) or a tail jump. It counts only
 * while a parent of its slot is the innermost open frame on this thread,
 * as the node of that parent.
 */
static __always_inline int do_site(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 slot = cookie & TACHY_SITE_SLOT_MASK;
	__u64 sp = PT_REGS_SP(ctx);
	struct tachy_thread *t;
	struct tachy_frame *f;
	__u32 *node;
	__u64 now;

	if (!process_wanted(bpf_get_current_pid_tgid()))
		return 0;
	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	now = bpf_ktime_get_ns();
	/* This call is the previous site's return address: end it first. */
	if (cookie & TACHY_SITE_EXIT_FIRST)
		exit_at(t, sp, now, slot - 1, 0);
	if (cookie & TACHY_SITE_TAIL) {
		/*
		 * The function has torn its frame down: SP is its entry key,
		 * which is the parent's key for a traced function, or one slot
		 * below the parent's for a function entered through a site.
		 */
		f = top(t);
		node = node_of(slot, f);
		if (!f || !node || sp > f->sp || f->sp - sp > 8)
			return 0;
		f->flags |= TACHY_FRAME_TAILING;
		push(t, sp, bpf_ktime_get_ns(), *node,
		     TACHY_FRAME_SITE | TACHY_FRAME_TAILSITE |
			     TACHY_FRAME_TAILING,
		     slot);
		return 0;
	}
	pop_abandoned(t, sp, now, true, ANY_ID);
	node = node_of(slot, top(t));
	if (!node)
		return 0;
	/*
	 * A site followed only by the function's epilogue ends with it. Its
	 * clock starts last, as a function's does.
	 */
	push(t, sp, bpf_ktime_get_ns(), *node,
	     TACHY_FRAME_SITE | ((cookie & TACHY_SITE_ENDS_WITH_PARENT)
					 ? TACHY_FRAME_TAILSITE
					 : 0),
	     slot);
	return 0;
}

/*
 * A tail jump leaves the frame at the top, keyed by SP here: to a known
 * callee (`indirect` false), whose returns end the frame, or to unknown
 * code, whose returns are not probed: the frame is timed up to the jump.
 */
static __always_inline int leave_frame(struct pt_regs *ctx, bool indirect)
{
	struct tachy_thread *t;
	struct tachy_frame *f;

	t = current_thread(false);
	if (!t)
		return 0;
	f = top(t);
	if (!f || f->sp != PT_REGS_SP(ctx))
		return 0;
	if (indirect) {
		close_frame(t, f, bpf_ktime_get_ns(), true, 0);
		t->depth--;
		return 0;
	}
	f->flags |= TACHY_FRAME_TAILING;
	return 0;
}

static __always_inline int do_tail(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);

	if ((cookie & TACHY_TAIL_CONDITIONAL) &&
	    !cond_taken(ctx->flags, cookie & TACHY_TAIL_COND_MASK))
		return 0;
	return leave_frame(ctx, cookie & TACHY_TAIL_INDIRECT);
}

/*
 * An indirect jump whose target the plan could not prove: computed here
 * from the registers (and the memory it reads, which the jump is about to
 * read too) and compared with the function's range around the jump. The
 * uprobe sets ip to the probed instruction before programs run. Inside,
 * the call goes on; outside, it is a tail jump to unknown code.
 */
static __always_inline int do_jump(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = cookie;
	__u64 ip = ctx->ip, target = 0, addr, start, r[16];
	__u64 before = (cookie >> TACHY_JUMP_BEFORE_SHIFT) & 0xffff;
	__u64 after = (cookie >> TACHY_JUMP_AFTER_SHIFT) & 0xffff;

	save_regs(ctx, r);
	if (!(op & TACHY_JUMP_MEM)) {
		target = r[(op >> TACHY_JUMP_REG_SHIFT) & 15];
	} else {
		if (op & TACHY_JUMP_RIP) {
			addr = ip + ((__s32)op >> TACHY_JUMP_RIP_SHIFT);
		} else {
			addr = r[(op >> TACHY_JUMP_REG_SHIFT) & 15] +
			       ((__s32)op >> TACHY_JUMP_DISP_SHIFT);
			if (op & TACHY_JUMP_INDEX)
				addr += r[(op >> TACHY_JUMP_INDEX_SHIFT) & 15]
					<< ((op >> TACHY_JUMP_SCALE_SHIFT) & 3);
		}
		if (user_read8(addr, &target)) {
			if (op & TACHY_JUMP_INSIDE)
				return 0;
			return leave_frame(ctx, true);
		}
	}
	start = ip - before;
	if (target > start && target - start < before + after)
		return 0;
	return leave_frame(ctx, true);
}

/* uprobe_multi links (kernel 6.6+), one per object and probe kind. */
SEC("uprobe.multi")
int tachy_entry_m(struct pt_regs *ctx)
{
	return do_entry(ctx);
}

SEC("uprobe.multi")
int tachy_exit_m(struct pt_regs *ctx)
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
SEC("uretprobe.multi")
int tachy_uret_m(struct pt_regs *ctx)
{
	return do_exit(PT_REGS_SP(ctx) - 8, PT_REGS_IP(ctx));
}

SEC("uprobe.multi")
int tachy_tail_m(struct pt_regs *ctx)
{
	return do_tail(ctx);
}

SEC("uprobe.multi")
int tachy_ijmp_m(struct pt_regs *ctx)
{
	return do_jump(ctx);
}

SEC("uprobe.multi")
int tachy_site_m(struct pt_regs *ctx)
{
	return do_site(ctx);
}

SEC("uprobe.multi")
int tachy_send_m(struct pt_regs *ctx)
{
	return do_site_end(ctx);
}

/* Single uprobe links, for kernels without uprobe_multi. */
SEC("uprobe")
int tachy_entry_s(struct pt_regs *ctx)
{
	return do_entry(ctx);
}

SEC("uprobe")
int tachy_exit_s(struct pt_regs *ctx)
{
	return do_exit_probe(ctx);
}

SEC("uprobe")
int tachy_site_s(struct pt_regs *ctx)
{
	return do_site(ctx);
}

SEC("uprobe")
int tachy_send_s(struct pt_regs *ctx)
{
	return do_site_end(ctx);
}

SEC("uretprobe")
int tachy_uret_s(struct pt_regs *ctx)
{
	return do_exit(PT_REGS_SP(ctx) - 8, PT_REGS_IP(ctx));
}

/*
 * Go. A goroutine moves between threads and its stack moves when it grows,
 * so its frames are kept by goroutine (g, in R14 in Go code), keyed by
 * g.stack.hi - SP. Go never gets a uretprobe: the runtime walks and copies
 * goroutine stacks, and a return address it does not know kills the
 * program.
 */
const volatile __u32 go_stack_lo = 0; /* offsets in runtime.g */
const volatile __u32 go_stack_hi = 8;

/*
 * A goroutine: its g and its process. Two processes of one Go binary lay
 * out their heaps alike, so their goroutines often have the same g.
 */
struct gkey {
	__u64 g;
	__u64 tgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TACHY_MAX_GOROUTINES);
	__type(key, struct gkey);
	__type(value, struct tachy_goroutine);
} goroutines SEC(".maps");

/* Never written: the first state of a goroutine. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_goroutine);
} gzero SEC(".maps");

/*
 * What a walk down a goroutine's frames is for: a cookie kind
 * (TACHY_GO_ENTRY, TACHY_GO_RET, TACHY_GO_GOEXIT), or a call site's
 * `call` or return.
 */
#define GWALK_SITE     4
#define GWALK_SITE_END 5

struct gwalk_ctx {
	struct tachy_goroutine *gr;
	__u64 off;
	__u64 now;
	__u64 goid; /* --by goroutine, at a ret */
	__u32 kind;
	/* a site's call: the slot of a site at the key that returned here
	 * (ANY_ID: none); a site's return: the slot of the site to close */
	__u32 slot;
};

/* --by: a Go call of `id` that lasted d ns ends on goroutine `goid`. */
static __always_inline void go_by_close(__u32 id, __u64 d, __u64 goid)
{
	__u64 vals[TACHY_BY_KEYS];
	__u32 k;

	for (k = 0; k < TACHY_BY_KEYS; k++)
		vals[k] = goid;
	by_close(id, d, vals, 0);
}

static __always_inline struct tachy_gframe *gtop(struct tachy_goroutine *gr)
{
	__u32 i = gr->depth - 1;

	if (i >= TACHY_MAX_DEPTH)
		return NULL;
	return &gr->frames[i];
}

/*
 * Whether the top frame, deeper than the key being closed, is a site that
 * ends with the frame below it (only an epilogue follows its call), and
 * that frame returns now: it is the one closed at the key (a traced
 * function at its `ret`, or the site of c->slot at its return or at the
 * call where the next site's starts), or another such site.
 */
static __always_inline bool gends_with_below(struct gwalk_ctx *c,
					     struct tachy_gframe *f)
{
	__u32 i = c->gr->depth - 2;
	struct tachy_gframe *b;

	if (!(f->flags & TACHY_GFRAME_TAILSITE) || i >= TACHY_MAX_DEPTH)
		return false;
	b = &c->gr->frames[i];
	if (b->off > c->off)
		return b->flags & TACHY_GFRAME_TAILSITE;
	if (b->off != c->off)
		return false;
	if (c->kind == TACHY_GO_RET)
		return !(b->flags & TACHY_GFRAME_SITE);
	return (b->flags & TACHY_GFRAME_SITE) && b->slot == c->slot;
}

/* The frame below the top one, which the top one ran inside of. */
static __always_inline struct tachy_gframe *gbelow(struct tachy_goroutine *gr)
{
	__u32 i = gr->depth - 2;

	if (i >= TACHY_MAX_DEPTH)
		return NULL;
	return &gr->frames[i];
}

/*
 * The top frame `f` ends at `now`: timed when it returned (`close`),
 * without the probes' own time (never below zero, nor below the calls
 * timed inside it), else counted as left by panic. The probes' time of the
 * calls inside it, and its own when it returned (a frame left by a panic
 * never ran its exit probe), lie inside the frame below it too, as does
 * its corrected duration. A traced function's call (`func`) also counts in
 * its --by group; `goid` is its goroutine's id.
 */
static __always_inline void gend(struct tachy_goroutine *gr,
				 struct tachy_gframe *f, __u64 now, bool close,
				 bool func, __u64 goid)
{
	__u32 id = f->id;
	struct tachy_corr *c = bpf_map_lookup_elem(&corr, &id);
	struct tachy_gframe *up;
	__u64 d = now - f->start_ns, inner = 0;
	__u64 sub = f->probe_ns + (c ? c->in_ns : 0);
	__u64 probe = f->probe_ns;
	struct tachy_stats *s;

	if (close) {
		if (d < sub) {
			s = stats_of(id);
			if (s)
				s->under++;
			d = 0;
		} else {
			d -= sub;
		}
		if (d < f->inner_ns)
			d = f->inner_ns;
		inner = d;
		/* Its own probes ran (left by panic, its exit did not). */
		probe += c ? c->add_ns : 0;
		record_ns(id, d, (struct parts){}, false);
		if (func && by_kind[0] != TACHY_BY_NONE)
			go_by_close(id, d, goid);
	} else {
		count_unwound(id);
	}
	/* One use of the frame below: the verifier loses a second test. */
	up = gbelow(gr);
	if (up) {
		up->probe_ns += probe;
		up->inner_ns += inner;
	}
}

/*
 * Pops the top frame if it is gone, closing it if it returned. At an
 * entry: one at the same key or deeper (left by a panic). At a `ret`: a
 * deeper one (left by a panic, or a site that ends with it), and the one
 * at the key, closed. At a site's call: a deeper one, and a site at the
 * same key (the previous site, returned, or one left by a panic that the
 * function recovered from). At a site's return: a deeper one, and the site
 * at the key, closed. At the goroutine's end, every one. A frame left by a
 * panic is counted as such, never timed.
 */
static long gpop_one(__u64 i, void *data)
{
	struct gwalk_ctx *c = data;
	struct tachy_goroutine *gr = c->gr;
	struct tachy_gframe *f = gtop(gr);
	bool site, close = false, last = false;

	if (!f)
		return 1;
	site = f->flags & TACHY_GFRAME_SITE;
	if (c->kind == TACHY_GO_GOEXIT) {
		/* every one */
	} else if (f->off > c->off) {
		close = c->kind != TACHY_GO_ENTRY && gends_with_below(c, f);
	} else if (f->off < c->off) {
		return 1;
	} else if (c->kind == TACHY_GO_RET) {
		close = !site;
		last = close;
	} else if (c->kind == GWALK_SITE) {
		/* A traced function that calls without moving SP: its own. */
		if (!site)
			return 1;
		close = f->slot == c->slot;
	} else if (c->kind == GWALK_SITE_END) {
		if (!site || f->slot != c->slot)
			return 1;
		close = true;
		last = true;
	}
	gend(gr, f, c->now, close, !site, c->goid);
	gr->depth--;
	return last;
}

static __always_inline void gwalk(struct gwalk_ctx *c)
{
	/* bpf_loop keeps the verifier from unrolling the walk. */
	bpf_loop(TACHY_MAX_DEPTH, gpop_one, c, 0);
}

/*
 * Whether the top frame is the call of `id` at `off`, marked as restarting
 * (the mark is taken off); with `mark`, marks it instead.
 */
static __always_inline bool restart(struct tachy_goroutine *gr, __u64 off,
				    __u32 id, bool mark)
{
	__u32 i = gr->depth - 1;
	struct tachy_gframe *f;

	if (i >= TACHY_MAX_DEPTH)
		return false;
	f = &gr->frames[i];
	if (f->off != off || f->id != id || (f->flags & TACHY_GFRAME_SITE))
		return false;
	if (mark) {
		f->flags |= TACHY_GFRAME_RESTART;
		return false;
	}
	if (!(f->flags & TACHY_GFRAME_RESTART))
		return false;
	f->flags &= ~TACHY_GFRAME_RESTART;
	return true;
}

static __always_inline void go_overflow(__u32 id)
{
	struct tachy_stats *s = stats_of(id);

	if (s)
		s->overflow++;
}

/*
 * --outermost: whether the goroutine has a call of `id` open (a recursive
 * call inside it is then not timed; its `ret`s find no frame at their key
 * and close nothing). Its probes then run inside the top frame.
 */
static __always_inline bool gopen(struct tachy_goroutine *gr, __u32 id)
{
	struct tachy_corr *c;
	struct tachy_gframe *t;
	__u32 i;

	for (i = 0; i < TACHY_MAX_DEPTH; i++) {
		if (i >= gr->depth)
			break;
		if (gr->frames[i].id != id ||
		    (gr->frames[i].flags & TACHY_GFRAME_SITE))
			continue;
		c = bpf_map_lookup_elem(&corr, &id);
		t = gtop(gr);
		if (c && t)
			t->probe_ns += c->add_ns;
		return true;
	}
	return false;
}

/*
 * g.stack.hi - sp, for the goroutine g, in `off`; false when sp is outside
 * g's stack: R14 holds no g there (cgo, a signal handler).
 */
static __always_inline bool goff(__u64 g, __u64 sp, __u64 *off)
{
	__u64 lo = 0, hi = 0;

	if (user_read8(g + go_stack_lo, &lo) ||
	    user_read8(g + go_stack_hi, &hi) || sp < lo || sp >= hi)
		return false;
	*off = hi - sp;
	return true;
}

/* Opens frame `id` at the top of the goroutine's stack. */
static __always_inline void gpush(struct tachy_goroutine *gr, __u64 off,
				  __u32 id, __u32 flags, __u32 slot)
{
	struct tachy_gframe *f;
	__u32 d = gr->depth;

	if (d >= TACHY_MAX_DEPTH) {
		go_overflow(id);
		return;
	}
	f = &gr->frames[d & (TACHY_MAX_DEPTH - 1)];
	f->off = off;
	f->probe_ns = 0;
	f->inner_ns = 0;
	f->id = id;
	f->flags = flags;
	f->slot = slot;
	gr->depth = d + 1;
	/* The clock is read last: what this program did is not the call's. */
	f->start_ns = bpf_ktime_get_ns();
}

static __always_inline int do_go(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 id = cookie & TACHY_GO_ID_MASK, zero = 0;
	__u32 kind = (cookie >> TACHY_GO_KIND_SHIFT) & 3;
	__u64 g = ctx->r14;
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct gwalk_ctx c = {.kind = kind};
	struct tachy_goroutine *gr;
	void *first;
	__u64 pt = bpf_get_current_pid_tgid();
	struct gkey k = {.g = g, .tgid = pt >> 32};

	if (!(kind == TACHY_GO_ENTRY ? entry_wanted(pt) : process_wanted(pt)))
		return 0;
	gr = bpf_map_lookup_elem(&goroutines, &k);
	if (!gr && kind != TACHY_GO_ENTRY)
		return 0;
	c.now = bpf_ktime_get_ns();
	if (gr && kind == TACHY_GO_GOEXIT) {
		c.gr = gr;
		gwalk(&c);
		bpf_map_delete_elem(&goroutines, &k);
		return 0;
	}
	if (!goff(g, sp, &c.off))
		return 0;
	if (gr) {
		c.gr = gr;
		if (kind == TACHY_GO_MORESTACK) {
			/* Past the deepest frame: no frame to mark. */
			if (gr->depth >= TACHY_MAX_DEPTH) {
				gr->over_id = id;
				gr->over_off = c.off;
			} else {
				restart(gr, c.off, id, true);
			}
			return 0;
		}
		if (kind == TACHY_GO_RET) {
			/* The goroutine's id: the call ends on the goroutine
			 * it began on, so its g holds the same one. */
			if (go_goid && user_read8(g + go_goid, &c.goid))
				c.goid = 0;
			gwalk(&c);
			if (!gr->depth)
				bpf_map_delete_elem(&goroutines, &k);
			return 0;
		}
		/* The entry again after morestack: the same call, restarted. */
		if (restart(gr, c.off, id, false))
			return 0;
		if (gr->over_off && gr->over_off == c.off &&
		    gr->over_id == id) {
			gr->over_off = 0;
			return 0;
		}
		gwalk(&c);
		if (outermost && gopen(gr, id))
			return 0;
	} else {
		first = bpf_map_lookup_elem(&gzero, &zero);
		if (!first)
			return 0;
		if (bpf_map_update_elem(&goroutines, &k, first, BPF_NOEXIST)) {
			go_overflow(id);
			return 0;
		}
		gr = bpf_map_lookup_elem(&goroutines, &k);
		if (!gr)
			return 0;
	}
	gpush(gr, c.off, id, 0, 0);
	return 0;
}

/*
 * A call site of `tachy nested` in Go code (cookies as the site and site
 * end programs'). Its `call` opens a frame keyed by g.stack.hi - SP there,
 * as the node the site's slot times under the goroutine's top frame; its
 * return address (or the cheaper probe point after it) closes it. A
 * goroutine that moves to another thread keeps its sites, and a stack
 * that the callee's prologue grows (runtime.morestack copies it) keeps
 * their keys: the call returns to its return address on the new stack,
 * at the same distance from its top. Nothing happens on a goroutine with
 * no traced call open.
 */
static __always_inline int do_gsite(struct pt_regs *ctx, bool end)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 g = ctx->r14, key;
	__u64 sp = PT_REGS_SP(ctx);
	struct gwalk_ctx c = {};
	struct tachy_goroutine *gr;
	struct tachy_gframe *f;
	__u32 slot, *node;
	__u64 pt = bpf_get_current_pid_tgid();
	struct gkey k = {.g = g, .tgid = pt >> 32};

	if (!process_wanted(pt))
		return 0;
	gr = bpf_map_lookup_elem(&goroutines, &k);
	if (!gr || !gr->depth)
		return 0;
	if (end) {
		slot = (__u32)cookie;
		sp += (__s64)(__s32)(cookie >> 32);
	} else {
		slot = cookie & TACHY_SITE_SLOT_MASK;
	}
	if (!goff(g, sp, &c.off))
		return 0;
	c.gr = gr;
	c.now = bpf_ktime_get_ns();
	if (end) {
		c.kind = GWALK_SITE_END;
		c.slot = slot;
		gwalk(&c);
		if (!gr->depth)
			bpf_map_delete_elem(&goroutines, &k);
		return 0;
	}
	/* This call is also the previous site's return: that one ends. */
	c.kind = GWALK_SITE;
	c.slot = (cookie & TACHY_SITE_EXIT_FIRST) ? slot - 1 : ANY_ID;
	gwalk(&c);
	f = gtop(gr);
	if (!f)
		return 0;
	key = (__u64)slot << 32 | f->id;
	node = bpf_map_lookup_elem(&site_nodes, &key);
	if (!node)
		return 0;
	gpush(gr, c.off, *node,
	      TACHY_GFRAME_SITE | ((cookie & TACHY_SITE_ENDS_WITH_PARENT)
					   ? TACHY_GFRAME_TAILSITE
					   : 0),
	      slot);
	return 0;
}

SEC("uprobe.multi")
int tachy_gsite_m(struct pt_regs *ctx)
{
	return do_gsite(ctx, false);
}

SEC("uprobe.multi")
int tachy_gsend_m(struct pt_regs *ctx)
{
	return do_gsite(ctx, true);
}

SEC("uprobe")
int tachy_gsite_s(struct pt_regs *ctx)
{
	return do_gsite(ctx, false);
}

SEC("uprobe")
int tachy_gsend_s(struct pt_regs *ctx)
{
	return do_gsite(ctx, true);
}

SEC("uprobe.multi")
int tachy_go_m(struct pt_regs *ctx)
{
	return do_go(ctx);
}

SEC("uprobe")
int tachy_go_s(struct pt_regs *ctx)
{
	return do_go(ctx);
}

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
	__u32 id; /* id + 1 of the syscall in progress; 0: none */
	__u32 pad;
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

SEC("tp_btf/sys_enter")
int BPF_PROG(tachy_sys_enter, struct pt_regs *regs, long nr)
{
	struct tachy_syscall *sc;
	__u32 key = nr, *id;

	if (!syscall_wanted() || nr < 0 || nr >= TACHY_MAX_SYSCALLS)
		return 0;
	id = bpf_map_lookup_elem(&sys_ids, &key);
	if (!id || !*id)
		return 0;
	if (arg_filter &&
	    !args_pass(*id - 1, regs, 0, bpf_get_current_pid_tgid()))
		return 0;
	sc = bpf_task_storage_get(&sys_start, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!sc)
		return 0;
	sc->id = *id;
	sc->start_ns = bpf_ktime_get_ns();
	if (cpu_sys)
		steal_settle(&sc->cpu, bpf_get_current_task_btf());
	sc->blocked0 = sc->cpu.blocked_ns;
	sc->runq0 = sc->cpu.runq_ns;
	if (by_entry)
		by_entry_values(*id - 1, regs, 0, sc->by);
	if (record) {
		sc->args[0] = BPF_CORE_READ(regs, di);
		sc->args[1] = BPF_CORE_READ(regs, si);
		sc->args[2] = BPF_CORE_READ(regs, dx);
		sc->args[3] = BPF_CORE_READ(regs, r10);
		sc->args[4] = BPF_CORE_READ(regs, r8);
		sc->args[5] = BPF_CORE_READ(regs, r9);
	}
	return 0;
}

/* A system call of `d` ns ends at `now`: record it if it is that slow. */
static __always_inline void rec_syscall(struct tachy_syscall *sc, __u32 id,
					__u64 now, __u64 d, struct parts p)
{
	struct tachy_record *r;

	if (!record || d < record_min_ns)
		return;
	r = rec_start(id, now, d, p);
	if (!r)
		return;
	r->flags |= TACHY_REC_SYSCALL;
	__builtin_memcpy(r->args, sc->args, sizeof(r->args));
	rec_send(r, 0);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(tachy_sys_exit, struct pt_regs *regs, long ret)
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
	now = bpf_ktime_get_ns();
	d = now - sc->start_ns;
	p = parts_since(&sc->cpu, sc->blocked0, sc->runq0);
	record_ns(id, d, p, false);
	by_close(id, d, sc->by, 0);
	rec_syscall(sc, id, now, d, p);
	return 0;
}

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

/* --follow: a process forked by a followed one is followed too. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(tachy_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (ptgid == ctgid || !bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY);
	return 0;
}

/*
 * A thread that exits with open frames left them without returning (an
 * exception caught further up, longjmp, pthread_exit): count them, since no
 * later probe on that thread will.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(tachy_thread_exit, struct task_struct *task)
{
	struct tachy_thread *t;

	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t)
		return 0;
	{
		struct walk_ctx c = {
			.t = t, .all = true, .now = bpf_ktime_get_ns()};

		bpf_loop(TACHY_MAX_DEPTH, pop_one, &c, 0);
	}
	return 0;
}

SEC("uprobe")
int tachy_tail_s(struct pt_regs *ctx)
{
	return do_tail(ctx);
}

SEC("uprobe")
int tachy_ijmp_s(struct pt_regs *ctx)
{
	return do_jump(ctx);
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

SEC("tp_btf/sched_switch")
int BPF_PROG(tachy_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
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

SEC("tp_btf/sched_wakeup")
int BPF_PROG(tachy_wakeup, struct task_struct *p)
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
