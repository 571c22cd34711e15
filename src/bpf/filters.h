/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * --filter: expressions on a call's arguments, evaluated at its entry.
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

#endif /* __TACHY_FILTERS_H */
