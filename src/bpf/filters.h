/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --filter: expressions on a call's arguments, evaluated at its entry, and
 * on its return value, evaluated at its exit.
 */
#ifndef __TACHY_FILTERS_H
#define __TACHY_FILTERS_H

/* --filter: whether any function or system call has an expression. */
const volatile bool arg_filter = false;

/* Per id (nfuncs entries, set by user space; 1 otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tachy_filter);
} filters SEC(".maps");

/* Whether term t holds of the value v (read and extended as t says). */
static __always_inline bool cmp_holds(struct tachy_term *t, __u64 v)
{
	bool sgn = t->flags & TACHY_TERM_SIGNED;

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

static __always_inline bool term_holds(struct tachy_term *t, __u64 r[16],
				       __u64 sp, __u64 pid_tgid)
{
	__u64 v;

	if (opnd_read(t, r, sp, pid_tgid, &v))
		return false;
	return cmp_holds(t, v);
}

/* args_pass(): the call is rejected (and counted), or passes outright. */
#define FILTER_REJECT (-1)
#define FILTER_PASS   0

struct filter_ctx {
	struct tachy_filter *f;
	__u64 regs[16];
	__u64 sp;
	__u64 pid_tgid;
	__u32 open;   /* groups left for the exit */
	__u32 g;      /* the group of the term at hand */
	bool ok;      /* its terms so far hold */
	bool at_exit; /* some read the return value */
	bool pass;    /* a group without such terms held */
};

/* Term i of an expression, at the entry (see args_pass). */
static long term_one(__u64 i, void *data)
{
	struct filter_ctx *c = data;
	struct tachy_term *t;

	if (i >= c->f->nterms || i >= TACHY_MAX_TERMS)
		return 1;
	t = &c->f->terms[i & (TACHY_MAX_TERMS - 1)];
	if (t->kind == TACHY_OPND_RET)
		c->at_exit = true;
	else if (c->ok)
		c->ok = term_holds(t, c->regs, c->sp, c->pid_tgid);
	if (!(t->flags & TACHY_TERM_LAST))
		return 0;
	if (c->ok && !c->at_exit) {
		c->pass = true;
		return 1;
	}
	if (c->ok)
		c->open |= 1U << (c->g & 31);
	c->ok = true;
	c->at_exit = false;
	c->g++;
	return 0;
}

/*
 * --filter: whether call `id`, entered with registers `r` and SP `sp`,
 * passes its expression (FILTER_PASS when it has none), is rejected
 * (FILTER_REJECT, counted here), or waits for its return value: then the
 * groups still open (bit per group, see tachy.h), which its frame keeps
 * for ret_rejects(). An OR of AND groups: the terms of a group are
 * evaluated until one fails; terms on the return value hold for now. The
 * terms are walked by bpf_loop: unrolled, the groups' outcomes would make
 * as many paths for the verifier as there are masks of open groups.
 */
static __always_inline int args_pass(__u32 id, struct pt_regs *r, __u64 sp,
				     __u64 pid_tgid)
{
	struct filter_ctx c = {.sp = sp, .pid_tgid = pid_tgid, .ok = true};
	struct tachy_stats *s;

	c.f = bpf_map_lookup_elem(&filters, &id);
	if (!c.f || !c.f->nterms)
		return FILTER_PASS;
	save_regs(r, c.regs);
	bpf_loop(TACHY_MAX_TERMS, term_one, &c, 0);
	if (c.pass)
		return FILTER_PASS;
	if (c.open)
		return c.open;
	s = stats_of(id);
	if (s)
		s->argfilt++;
	return FILTER_REJECT;
}

/*
 * At the exit of a call of `id` whose entry left the groups `open` (bit
 * per group; 0 where its return value is not known): whether no group's
 * terms on the return value `rv` hold, in which case the call is counted
 * as rejected. A global function: the verifier checks it once, not inside
 * each exit program, which are near its limit.
 */
__noinline int ret_rejects(__u32 id, __u64 rv, __u32 open)
{
	struct tachy_filter *f = bpf_map_lookup_elem(&filters, &id);
	struct tachy_stats *s;
	bool ok = true;
	__u32 g = 0;
	int i;

	if (!f)
		return 0;
	for (i = 0; i < TACHY_MAX_TERMS; i++) {
		struct tachy_term *t = &f->terms[i];

		if (i >= f->nterms)
			break;
		if (ok && t->kind == TACHY_OPND_RET)
			ok = cmp_holds(t, opnd_extend(t, rv));
		if (t->flags & TACHY_TERM_LAST) {
			if (ok && (open >> (g & 31)) & 1)
				return 0;
			ok = true;
			g++;
		}
	}
	s = stats_of(id);
	if (s)
		s->argfilt++;
	return 1;
}

#endif /* __TACHY_FILTERS_H */
