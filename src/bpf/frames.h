/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A thread's stack of open frames (traced functions and call sites), keyed
 * by the address of the return-address slot: how a frame opens, closes
 * (timed), is dropped (abandoned), and how the walks down the stack decide
 * which frames an entry, an exit or a site end concerns.
 */
#ifndef __TACHY_FRAMES_H
#define __TACHY_FRAMES_H

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tachy_thread);
} threads SEC(".maps");

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
	struct tachy_frame *f = NULL;
	__u32 i = t->depth - 2;

	if (t->depth >= 2 && i < TACHY_MAX_DEPTH)
		f = &t->frames[i & (TACHY_MAX_DEPTH - 1)];
	barrier_var(f);
	return f;
}

/*
 * The top frame took `ns` (corrected) inside the frame below it, read `fix`
 * ns longer than its corrected time (see close_frame).
 */
static __always_inline void add_inner(struct tachy_thread *t, __u64 ns,
				      __u64 fix)
{
	__u32 i = t->depth - 2;

	if (t->depth >= 2 && i < TACHY_MAX_DEPTH) {
		t->frames[i].inner_ns += ns;
		t->frames[i].inner_fix += fix;
	}
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
 * `tachy nested`: a traced function's frame ends; the outermost one's sites
 * count now, if `keep` (else they are dropped with it).
 */
static __always_inline void end_root(struct tachy_thread *t, bool keep)
{
	if (t->roots)
		t->roots--;
	if (!t->roots)
		flush_pending(t, keep);
}

/*
 * A frame ends normally at `now` (a traced function's: by a return, or by
 * an indirect tail jump, to which it is timed). Its duration is without the
 * probes' own time (never below zero). `ret` is its return address where
 * the probe knows it (a uretprobe, whose trampoline took the slot's place),
 * else 0: the slot still holds it. `rv` is the return register where the
 * exit knows it (`rv_ok`): a --filter on it is decided here, and a call it
 * rejects is counted so, not timed.
 */
static __always_inline void close_frame(struct tachy_thread *t,
					struct tachy_frame *f, __u64 now,
					bool indirect_tail, __u64 ret, __u64 rv,
					bool rv_ok)
{
	__u32 id = f->id;
	struct tachy_corr *c = bpf_map_lookup_elem(&corr, &id);
	__u64 sub = f->probe_ns + (c ? c->in_ns : 0);
	/* Its corrected time, below 0 where the probe time subtracted is
	 * more than the probes took. */
	__s64 sd = (__s64)(now - f->start_ns) - (__s64)sub;
	/*
	 * Its own time: the corrected time less that of the calls timed
	 * inside it, as corrected. Where a call inside read longer than its
	 * corrected time (raised to 0), this one's correction, which holds
	 * the same probe time, subtracted that much too much: its own time is
	 * exact so, and only it is raised to 0, not the calls inside.
	 */
	__s64 own = sd - (__s64)(f->inner_ns - f->inner_fix);
	__u64 d;

	pass_probe_time(t, f, c);
	/* Rejected by its return value: counted so, and otherwise as a frame
	 * left without a return (its time goes to no one). */
	if (arg_filter && f->slot && !(f->flags & TACHY_FRAME_SITE) &&
	    ret_rejects(id, rv, rv_ok ? f->slot : 0)) {
		if (nested && (f->flags & TACHY_FRAME_ROOT))
			end_root(t, false);
		return;
	}
	if (own < 0) {
		struct tachy_stats *s = stats_of(id);

		if (s)
			s->under++;
		own = 0;
	}
	/* A call lasts as long as the calls timed inside it, and its own
	 * time. */
	d = f->inner_ns + own;
	add_inner(t, d, d - (__u64)sd);
	rec_close(t, f, now, d, ret, rv, rv_ok);

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
	record_ns(id, d, parts_since(&t->cpu, f->blocked0, f->runq0),
		  indirect_tail);
	/* nested: the root's sites are committed with it; its --by groups
	 * follow, as a function's. */
	if (nested && (f->flags & TACHY_FRAME_ROOT))
		end_root(t, !(d < min_ns || (max_ns && d > max_ns)));
	/* f is the top frame. */
	if (by_kind[0] == TACHY_BY_NONE || (!rv_ok && by_has(TACHY_BY_RETVAL)))
		return;
	/*
	 * The caller is read now rather than at entry: the call's own probes
	 * then cost what plain timing costs, and the slot is the same.
	 */
	if (by_has(TACHY_BY_CALLER) && !ret)
		user_read8(f->sp, &ret);
	by_close(id, d, by_frame_vals(t->depth - 1), ret, rv);
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
		add_inner(t, own, 0);

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
	if (nested && (f->flags & TACHY_FRAME_ROOT))
		end_root(t, false);
}

static __always_inline struct tachy_thread *current_thread(bool create)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return bpf_task_storage_get(
		&threads, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/*
 * The frame is NULL or a pointer into t: barrier_var() makes the caller's
 * `if (!f)` test the pointer itself. Without it clang re-tests the index,
 * and 6.1's verifier, which does not see that the NULL path's index
 * range is then empty, walks it and refuses the dereference.
 */
static __always_inline struct tachy_frame *top(struct tachy_thread *t)
{
	struct tachy_frame *f = NULL;
	__u32 i = t->depth - 1;

	if (i < TACHY_MAX_DEPTH)
		f = &t->frames[i & (TACHY_MAX_DEPTH - 1)];
	barrier_var(f);
	return f;
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
	f->inner_fix = 0;
	if (cpu)
		steal_settle(&t->cpu, bpf_get_current_task_btf());
	f->blocked0 = t->cpu.blocked_ns;
	f->runq0 = t->cpu.runq_ns;
	f->id = id;
	f->flags = flags;
	f->slot = slot;
	f->after_ns = 0;
	f->callee = 0;
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
	__u64 rv;   /* the return register, where rv_ok */
	__u32 only; /* a site end: the slot of the one frame to close */
	__u32 id;   /* a function entry: its id (else ANY_ID) */
	bool all;   /* pop every frame: the thread is exiting */
	bool site;  /* a call site opens */
	/* an exit: the open sites that end with their parent above the key
	 * end with the frame closed there (else they were abandoned) */
	bool chain;
	/* an exit by a tail jump to unknown code: the function frames closed
	 * at the key are timed up to the jump */
	bool indirect;
	bool rv_ok; /* the exit knows the return value */
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

/*
 * The address a uretprobe writes into the return-address slot it takes:
 * the start of the process's uprobe area (the kernel's
 * uprobe_get_trampoline_vaddr), or 0 while it has none.
 */
static __always_inline __u64 uret_trampoline(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct xol_area *area = BPF_CORE_READ(task, mm, uprobes_state.xol_area);

	return area ? BPF_CORE_READ(area, vaddr) : 0;
}

/*
 * Whether the call of `id` entering at frame f's key is f's tail call.
 * f's uretprobe took its return-address slot at its entry, and a tail
 * call leaves the slot as it is; a call made after f was left by longjmp
 * (the frame still open) holds a real return address there, even one
 * that then tail-calls `id`.
 */
static __always_inline bool tail_handover(struct tachy_frame *f, __u32 id)
{
	__u64 key = (__u64)f->id << 32 | id, ret;

	if (!(f->flags & TACHY_FRAME_ROOT))
		return false;
	if (!bpf_map_lookup_elem(&tail_pairs, &key)) {
		key |= ANY_ID;
		if (!bpf_map_lookup_elem(&tail_pairs, &key))
			return false;
	}
	return !user_read8(f->sp, &ret) && ret && ret == uret_trampoline();
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
		close_frame(t, f, c->now,
			    c->indirect && !(f->flags & TACHY_FRAME_SITE),
			    c->ret, c->rv, c->rv_ok);
		t->depth--;
		return c->only != ANY_ID;
	}
	if (!above(f, c->sp))
		return 1;
	below = t->depth >= 2
			? &t->frames[(t->depth - 2) & (TACHY_MAX_DEPTH - 1)]
			: NULL;
	barrier_var(below); /* tested as a pointer: see top() */
	if ((f->flags & TACHY_FRAME_TAILSITE) &&
	    (c->chain || (below && below->sp == c->sp))) {
		close_frame(t, f, c->now, false, 0, 0, false);
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

static __always_inline void exit_walk(struct walk_ctx *c)
{
	struct tachy_frame *f = top(c->t);

	if (f && (f->flags & TACHY_FRAME_TAILSITE) && above(f, c->sp))
		bpf_loop(TACHY_MAX_DEPTH, chain_one, c, 0);
	bpf_loop(TACHY_MAX_DEPTH, exit_one, c, 0);
}

/* A call site's end at `sp`: closes the site of slot `only`. */
static __always_inline void exit_at(struct tachy_thread *t, __u64 sp, __u64 now,
				    __u32 only, __u64 ret)
{
	struct walk_ctx c = {
		.t = t, .sp = sp, .now = now, .only = only, .ret = ret};

	exit_walk(&c);
}

/*
 * A return to the slot at `sp`; `ret`: the return address, where known;
 * `rv`: the return register.
 */
static __always_inline int do_exit(__u64 sp, __u64 ret, __u64 rv)
{
	struct tachy_thread *t;

	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	{
		struct walk_ctx c = {.t = t,
				     .sp = sp,
				     .now = bpf_ktime_get_ns(),
				     .only = ANY_ID,
				     .ret = ret,
				     .rv = rv,
				     .rv_ok = true};

		exit_walk(&c);
	}
	return 0;
}

/*
 * A thread that exits with open frames left them without returning (an
 * exception caught further up, longjmp, pthread_exit): count them, since no
 * later probe on that thread will.
 */
static __always_inline int thread_exit(struct task_struct *task)
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

#endif /* __TACHY_FRAMES_H */
