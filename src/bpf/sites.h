/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `tachy nested`: the call sites of traced functions, timed as frames of
 * their own under their parent.
 */
#ifndef __TACHY_SITES_H
#define __TACHY_SITES_H

/* `tachy nested`: (slot << 32 | parent id) -> node id of that site. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TACHY_MAX_NODES);
	__type(key, __u64);
	__type(value, struct tachy_site_node);
} site_nodes SEC(".maps");

/* Indirect call sites: the callees each process reached, per site node. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TACHY_MAX_NODES);
	__type(key, struct tachy_callee_key);
	__type(value, struct tachy_callees);
} callees SEC(".maps");

/* Never written: a new entry's first value. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_callees);
} callee_zero SEC(".maps");

/*
 * An indirect call counted at site node `node`: its callee, read where the
 * call reads it (`op`), is counted in its process's entry, in the first
 * slot holding its address or the first free one (claimed by a
 * compare-and-swap, so two CPUs never claim one slot for two callees),
 * else as one of the others. Returns the callee (0: not read).
 */
static __always_inline __u64 count_callee(struct pt_regs *ctx, __u32 op,
					  __u32 node)
{
	struct tachy_callee_key key = {
		.node = node,
		.tgid = bpf_get_current_pid_tgid() >> 32,
	};
	struct tachy_callees *c, *zero;
	__u64 target = 0, a;
	__u32 z = 0;
	int i;

	if (operand_target(ctx, op, PT_REGS_IP(ctx), &target) || !target)
		return 0;
	c = bpf_map_lookup_elem(&callees, &key);
	if (!c) {
		zero = bpf_map_lookup_elem(&callee_zero, &z);
		if (!zero)
			return target;
		/* Fails when the map is full, or another CPU made it. */
		bpf_map_update_elem(&callees, &key, zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&callees, &key);
		if (!c)
			return target;
		c->ip = PT_REGS_IP(ctx);
	}
	for (i = 0; i < TACHY_CALLEES; i++) {
		a = c->addr[i];
		if (!a)
			a = __sync_val_compare_and_swap(&c->addr[i], 0, target);
		if (!a || a == target) {
			__sync_fetch_and_add(&c->count[i], 1);
			return target;
		}
	}
	__sync_fetch_and_add(&c->other, 1);
	return target;
}

/* The return of a call site (cookie: its slot, and an SP adjustment when
 * the probe stands after the return address), or the way out of an
 * inlined instance, taken only when its jump's condition holds. */
static __always_inline int do_site_end(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct tachy_thread *t;

	if ((cookie & TACHY_SEND_CONDITIONAL) &&
	    !cond_taken(reg_flags(ctx),
			(cookie >> TACHY_SEND_COND_SHIFT) & 0xf))
		return 0;
	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	exit_at(t, sp, bpf_ktime_get_ns(), cookie & TACHY_SEND_SLOT_MASK, 0);
	return 0;
}

/*
 * The node that site `slot`, probed at `ip`, times under frame `f`, or
 * NULL: none, or `f` is an indirect call that went to another callee than
 * the one the site is in (the site may stand before its callee's start: a
 * `.cold` part is often placed below the function).
 */
static __always_inline __u32 *node_of(__u32 slot, struct tachy_frame *f,
				      __u64 ip)
{
	struct tachy_site_node *n;
	__u64 key;

	if (!f)
		return NULL;
	key = (__u64)slot << 32 | f->id;
	n = bpf_map_lookup_elem(&site_nodes, &key);
	if (!n || (n->via && f->callee != ip - (__s64)(__s32)(n->via - 1)))
		return NULL;
	return &n->node;
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
	__u64 now, callee = 0;
	__u32 *node;

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
		sp = frame_key(sp);
		f = top(t);
		node = node_of(slot, f, PT_REGS_IP(ctx));
		if (!f || !node || sp > f->sp || f->sp - sp > 8)
			return 0;
		f->flags |= TACHY_FRAME_TAILING;
		push(t, sp, bpf_ktime_get_ns(), *node,
		     TACHY_FRAME_SITE | TACHY_FRAME_TAILSITE |
			     TACHY_FRAME_TAILING,
		     slot);
		return 0;
	}
	/*
	 * An inlined instance pushes no return address: its key is a few
	 * bytes below its parent's, off the 8-byte grid of return-address
	 * slots.
	 */
	if (cookie & TACHY_SITE_INLINED)
		sp += (__s64)(__s32)(cookie >> 32);
	pop_abandoned(t, sp, now, true, ANY_ID);
	node = node_of(slot, top(t), PT_REGS_IP(ctx));
	if (!node)
		return 0;
	if (!(cookie & TACHY_SITE_INLINED) &&
	    ((cookie >> 32) & TACHY_CALL_READ))
		callee = count_callee(ctx, cookie >> 32, *node);
	/*
	 * A site followed only by the function's epilogue ends with it. Its
	 * clock starts last, as a function's does. So does an inlined
	 * instance still open when its parent ends, or an instance around it
	 * ends at the same instruction.
	 */
	if (push(t, sp, bpf_ktime_get_ns(), *node,
		 TACHY_FRAME_SITE | ((cookie & (TACHY_SITE_ENDS_WITH_PARENT |
						TACHY_SITE_INLINED))
					     ? TACHY_FRAME_TAILSITE
					     : 0),
		 slot))
		t->frames[(t->depth - 1) & (TACHY_MAX_DEPTH - 1)].callee =
			callee;
	return 0;
}

#endif /* __TACHY_SITES_H */
