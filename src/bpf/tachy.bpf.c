// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * tachy's probes. One generic program per probe kind, attached at many
 * sites and told apart by the BPF cookie:
 *
 *   entry: the first instruction of a traced function. Cookie: function id
 *          in the low 32 bits, signed SP adjustment in the high 32 bits
 *          (for an entry probe placed after the first instruction).
 *   exit:  a `ret` of a traced function or of a function it tail-calls.
 *          No cookie: the frame is found by the stack pointer.
 *   tail:  a tail jump out of a traced function. Cookie: TACHY_TAIL_* bits.
 *
 * Each thread keeps a stack of open frames keyed by the address of the
 * return-address slot: at a function's first instruction SP points at it,
 * and at its `ret` SP points at it again. An exit closes the frames whose
 * SP equals the current one; frames below it were abandoned (exception,
 * longjmp) and are counted as unwound, never timed. Nothing here ever
 * writes to the traced process, and no uretprobe is used, so no unwinder
 * meets a trampoline address.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "tachy.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Settings, written once by user space before load. */
const volatile __u32 nfuncs = 1;
const volatile __u32 filter_tid = 0;
const volatile __u64 min_ns = 0;
const volatile __u64 max_ns = 0;
const volatile bool outermost = false;
/* Durations are bucketed in display units (ns per unit), as funclatency. */
const volatile __u64 unit_ns = 1;

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 2 * nfuncs, set by user space */
	__type(key, __u32);
	__type(value, struct tachy_stats);
} stats SEC(".maps");

static __always_inline struct tachy_stats *stats_of(__u32 id)
{
	__u32 key = (generation & 1) * nfuncs + id;

	return bpf_map_lookup_elem(&stats, &key);
}

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

static __always_inline void record(struct tachy_frame *f, __u64 now,
				   bool indirect_tail)
{
	struct tachy_stats *s = stats_of(f->id);
	__u64 d = now - f->start_ns;
	__u32 b;

	if (!s)
		return;
	if (d < min_ns || (max_ns && d > max_ns)) {
		s->filtered++;
		return;
	}
	if (indirect_tail)
		s->indirect_tail++;
	s->count++;
	s->total_ns += d;
	if (!s->min_ns || d < s->min_ns)
		s->min_ns = d ? d : 1;
	if (d > s->max_ns)
		s->max_ns = d;
	b = bucket_of(unit_ns > 1 ? d / unit_ns : d);
	if (b >= TACHY_NBUCKETS)
		b = TACHY_NBUCKETS - 1;
	s->buckets[b]++;
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

static __always_inline int do_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 id = cookie & TACHY_ENTRY_ID_MASK;
	__u64 sp = PT_REGS_SP(ctx) + (__s64)(__s32)(cookie >> 32);
	struct tachy_thread *t;
	struct tachy_frame *f;
	__u64 now;
	int i;

	if (filter_tid && (__u32)bpf_get_current_pid_tgid() != filter_tid)
		return 0;
	now = bpf_ktime_get_ns();
	t = current_thread(true);
	if (!t)
		return 0;

	/*
	 * Frames at or below this entry's SP were abandoned. A frame at the
	 * same SP stays open only if it left by a tail jump: this function then
	 * runs in its place and returns for it.
	 */
	for (i = 0; i < TACHY_MAX_DEPTH; i++) {
		f = top(t);
		if (!f)
			break;
		if (!above(f, sp) &&
		    !(f->sp == sp && !(f->flags & TACHY_FRAME_TAILING)))
			break;
		count_unwound(f->id);
		t->depth--;
	}

	if (outermost) {
		for (i = 0; i < TACHY_MAX_DEPTH; i++) {
			if (i >= t->depth)
				break;
			if (t->frames[i].id == id)
				return 0;
		}
	}

	if (t->depth >= TACHY_MAX_DEPTH) {
		struct tachy_stats *s = stats_of(id);

		if (s)
			s->overflow++;
		return 0;
	}
	f = &t->frames[t->depth & (TACHY_MAX_DEPTH - 1)];
	f->sp = sp;
	f->start_ns = now;
	f->child_ns = 0;
	f->id = id;
	f->flags = (cookie & TACHY_ENTRY_TAILING) ? TACHY_FRAME_TAILING : 0;
	t->depth++;
	return 0;
}

/* A function returns with SP at its return-address slot: close its frame. */
static __always_inline int do_exit(__u64 sp)
{
	struct tachy_thread *t;
	struct tachy_frame *f;
	__u64 now;
	int i;

	t = current_thread(false);
	if (!t || !t->depth)
		return 0;
	now = bpf_ktime_get_ns();
	for (i = 0; i < TACHY_MAX_DEPTH; i++) {
		f = top(t);
		if (!f)
			break;
		if (f->sp == sp)
			record(f, now, false);
		else if (above(f, sp))
			count_unwound(f->id);
		else
			break;
		t->depth--;
	}
	return 0;
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

static __always_inline int do_tail(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx);
	struct tachy_thread *t;
	struct tachy_frame *f;

	if ((cookie & TACHY_TAIL_CONDITIONAL) &&
	    !cond_taken(ctx->flags, cookie & TACHY_TAIL_COND_MASK))
		return 0;
	t = current_thread(false);
	if (!t)
		return 0;
	f = top(t);
	if (!f || f->sp != sp)
		return 0;
	if (cookie & TACHY_TAIL_INDIRECT) {
		/* The callee is unknown, so are its returns: time up to here.
		 */
		record(f, bpf_ktime_get_ns(), true);
		t->depth--;
		return 0;
	}
	f->flags |= TACHY_FRAME_TAILING;
	return 0;
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
	return do_exit(PT_REGS_SP(ctx));
}

/*
 * --uretprobe: runs after the return, with SP one slot above. Only on
 * explicit request: a C++ exception unwinding through the frame meets the
 * kernel's trampoline address and aborts the process.
 */
SEC("uretprobe.multi")
int tachy_uret_m(struct pt_regs *ctx)
{
	return do_exit(PT_REGS_SP(ctx) - 8);
}

SEC("uprobe.multi")
int tachy_tail_m(struct pt_regs *ctx)
{
	return do_tail(ctx);
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
	return do_exit(PT_REGS_SP(ctx));
}

SEC("uretprobe")
int tachy_uret_s(struct pt_regs *ctx)
{
	return do_exit(PT_REGS_SP(ctx) - 8);
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
	int i;

	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t)
		return 0;
	for (i = 0; i < TACHY_MAX_DEPTH; i++) {
		struct tachy_frame *f = top(t);

		if (!f)
			break;
		count_unwound(f->id);
		t->depth--;
	}
	return 0;
}

SEC("uprobe")
int tachy_tail_s(struct pt_regs *ctx)
{
	return do_tail(ctx);
}
