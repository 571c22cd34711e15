/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Go functions and call sites: frames kept per goroutine.
 */
#ifndef __TACHY_GO_H
#define __TACHY_GO_H

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
	__u64 rv;   /* at a ret: the first integer result register */
	__u64 sp;   /* at a ret: SP, the return-address slot */
	__u32 kind;
	/* a site's call: the slot of a site at the key that returned here
	 * (ANY_ID: none); a site's return: the slot of the site to close */
	__u32 slot;
};

/*
 * --by: a Go call of `id` that lasted d ns ends on goroutine `goid`,
 * returning rv.
 */
static __always_inline void go_by_close(__u32 id, __u64 d, __u64 goid, __u64 rv)
{
	__u64 vals[TACHY_BY_KEYS];
	__u32 k;

	for (k = 0; k < TACHY_BY_KEYS; k++)
		vals[k] = goid;
	by_close(id, d, vals, 0, rv);
}

/*
 * --record-slower-than: a Go call of `id` returned at `sp` (its
 * return-address slot) at `now` after d ns, with `rv` in its first
 * integer result register. Its arguments are not read; its stack is the
 * frame-pointer chain of the goroutine at the `ret`, wherever the runtime
 * moved the stack during the call (copystack adjusts the saved frame
 * pointers). The chain ends at the goroutine's first frame, whose saved
 * frame pointer is 0.
 */
static __always_inline void grec_close(__u32 id, __u64 now, __u64 d, __u64 sp,
				       __u64 rv)
{
	struct tachy_record *r;

	if (!record || d < record_min_ns)
		return;
	r = rec_start(id, now, d, (struct parts){});
	if (!r)
		return;
	r->ret = rv;
	r->flags |= TACHY_REC_RET;
	__builtin_memset(r->args, 0, sizeof(r->args));
	if (stack_how != TACHY_STACK_NONE)
		rec_stack(r, sp, 0);
	rec_send(r, 0);
}

/* NULL or a frame of gr, tested as a pointer (see top() in frames.h). */
static __always_inline struct tachy_gframe *gtop(struct tachy_goroutine *gr)
{
	struct tachy_gframe *f = NULL;
	__u32 i = gr->depth - 1;

	if (i < TACHY_MAX_DEPTH)
		f = &gr->frames[i & (TACHY_MAX_DEPTH - 1)];
	barrier_var(f);
	return f;
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
	struct tachy_gframe *f = NULL;
	__u32 i = gr->depth - 2;

	if (i < TACHY_MAX_DEPTH)
		f = &gr->frames[i & (TACHY_MAX_DEPTH - 1)];
	barrier_var(f);
	return f;
}

/*
 * The top frame `f` ends at `c->now`: timed when it returned (`close`),
 * without the probes' own time (never below zero, nor below the calls
 * timed inside it), else counted as left by panic. The probes' time of the
 * calls inside it, and its own when it returned (a frame left by a panic
 * never ran its exit probe), lie inside the frame below it too, as does
 * its corrected duration. A traced function's call (`func`, closed at its
 * `ret`) is first decided by a --filter on its return value (a call
 * rejected is counted so, and its time goes to no one), then counts in its
 * --by group (`c->goid` is its goroutine's id) and may be recorded.
 */
static __always_inline void gend(struct gwalk_ctx *c_, struct tachy_gframe *f,
				 bool close, bool func)
{
	struct tachy_goroutine *gr = c_->gr;
	__u64 now = c_->now;
	__u32 id = f->id;
	struct tachy_corr *c = bpf_map_lookup_elem(&corr, &id);
	struct tachy_gframe *up;
	__u64 d = now - f->start_ns, inner = 0;
	__u64 sub = f->probe_ns + (c ? c->in_ns : 0);
	__u64 probe = f->probe_ns;
	struct tachy_stats *s;

	if (close && func && arg_filter && f->slot &&
	    ret_rejects(id, c_->rv, f->slot)) {
		/* Its exit probe ran: its time lies in the frame below. */
		probe += c ? c->add_ns : 0;
	} else if (close) {
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
			go_by_close(id, d, c_->goid, c_->rv);
		if (func)
			grec_close(id, now, d, c_->sp, c_->rv);
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
	gend(c, f, close, !site);
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
	f->callee = 0;
	gr->depth = d + 1;
	/* The clock is read last: what this program did is not the call's. */
	f->start_ns = bpf_ktime_get_ns();
}

static __always_inline int do_go(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 id = cookie & TACHY_GO_ID_MASK, zero = 0;
	__u32 kind = (cookie >> TACHY_GO_KIND_SHIFT) & 3;
	__u64 g = reg_go_g(ctx);
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct gwalk_ctx c = {.kind = kind};
	struct tachy_goroutine *gr;
	void *first;
	__u64 pt = bpf_get_current_pid_tgid();
	struct gkey k = {.g = g, .tgid = pt >> 32};
	int open = FILTER_PASS;

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
			c.rv = reg_retval(ctx);
			c.sp = sp;
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
	/*
	 * --filter: Go's filters read only the return value, so none rejects
	 * a call here; the groups left open wait for its `ret`.
	 */
	if (arg_filter) {
		open = args_pass(id, ctx, sp, pt);
		if (open == FILTER_REJECT)
			open = 0;
	}
	gpush(gr, c.off, id, 0, open);
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
	__u64 g = reg_go_g(ctx), key;
	__u64 sp = PT_REGS_SP(ctx);
	struct gwalk_ctx c = {};
	struct tachy_goroutine *gr;
	struct tachy_gframe *f;
	struct tachy_site_node *node;
	__u64 callee = 0;
	__u32 slot, depth;
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
	/* A site of a callee under an indirect call: only through it. */
	if (!node || (node->via &&
		      f->callee != (__u32)(PT_REGS_IP(ctx) - (node->via - 1))))
		return 0;
	if ((cookie >> 32) & TACHY_CALL_READ)
		callee = count_callee(ctx, cookie >> 32, node->node);
	depth = gr->depth;
	gpush(gr, c.off, node->node,
	      TACHY_GFRAME_SITE | ((cookie & TACHY_SITE_ENDS_WITH_PARENT)
					   ? TACHY_GFRAME_TAILSITE
					   : 0),
	      slot);
	if (gr->depth > depth)
		gr->frames[(gr->depth - 1) & (TACHY_MAX_DEPTH - 1)].callee =
			callee;
	return 0;
}

#endif /* __TACHY_GO_H */
