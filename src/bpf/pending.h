/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * `tachy nested`: what the call sites of the outermost traced call hold on
 * their thread (counts, time, histogram buckets) until that call ends and
 * its filter is known.
 */
#ifndef __TACHY_PENDING_H
#define __TACHY_PENDING_H

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

#endif /* __TACHY_PENDING_H */
