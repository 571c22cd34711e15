/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The counters: per id (a traced function, a call site, a system call or
 * a kernel function) and per CPU, in two halves user space swaps at each
 * report; the histogram buckets; the probe time subtracted per id; and how
 * one call is added to them.
 */
#ifndef __TACHY_COUNTERS_H
#define __TACHY_COUNTERS_H

/* Settings, written once by user space before load. */
const volatile __u32 nfuncs = 1;
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

/*
 * Which half of `stats` the probes write. User space flips it, then reads
 * and clears the other half, so no call is lost between reports.
 */
volatile __u32 generation = 0;

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
	__u64 b = bucket_of(unit_ns > 1 ? d / unit_ns : d);

	/*
	 * Clamp and index with one register: clang otherwise clamps a
	 * zero-extended copy and indexes with the original, which 6.1's
	 * verifier finds unbounded.
	 */
	barrier_var(b);
	if (b >= TACHY_NBUCKETS)
		b = TACHY_NBUCKETS - 1;
	barrier_var(b);
	return b;
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

#endif /* __TACHY_COUNTERS_H */
