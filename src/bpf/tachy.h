/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one definition of everything shared by the BPF program and tachy's
 * Rust side. Rust reads these types from the generated skeleton; the
 * cookie layouts are encoded in src/plan/encode.rs, whose tests check its
 * constants against the values here.
 */
#ifndef __TACHY_H
#define __TACHY_H

/* System call numbers that can be traced (x86-64 has fewer than 512). */
#define TACHY_MAX_SYSCALLS 512

/* Kernel functions nested on one thread (kprobes). */
#define TACHY_MAX_KDEPTH 16

/* Processes --follow can follow at once. */
#define TACHY_MAX_FOLLOWED 4096

/* Open frames kept per thread. Deeper nesting is counted as overflow. */
#define TACHY_MAX_DEPTH 64

/*
 * Histogram layout: values below 16 ns get a bucket each; above, every
 * power of two is split into 16 linear sub-buckets (about 6% resolution).
 * Bucket of v >= 16: (log2(v) - 3) * 16 + ((v >> (log2(v) - 4)) & 15).
 */
#define TACHY_SUB_BITS	 4
#define TACHY_SUBBUCKETS (1 << TACHY_SUB_BITS)
#define TACHY_NBUCKETS	 ((64 - TACHY_SUB_BITS + 1) * TACHY_SUBBUCKETS)

/*
 * An SP further than this from an open frame's belongs to another stack
 * (a fiber, a coroutine, a sigaltstack handler): such frames are kept,
 * never taken for abandoned.
 */
#define TACHY_STACK_WINDOW (8ULL << 20)

/* Cookie of a tail-jump probe. */
#define TACHY_TAIL_COND_MASK   0x0f /* x86 condition code of a jcc */
#define TACHY_TAIL_CONDITIONAL 0x10
#define TACHY_TAIL_INDIRECT    0x20

/*
 * Cookie of an indirect jump whose target is checked at run time (the jump
 * program): where the jump reads its target in bits 0-31, and the range of
 * the function holding the jump, relative to the jump (whatever the load
 * address), in bits 32-63. Registers are numbered as x86 encodes them
 * (0 rax, 1 rcx, 2 rdx, 3 rbx, 4 rsp, 5 rbp, 6 rsi, 7 rdi, 8-15 r8-r15).
 *   bits 0-3:   TACHY_JUMP_* flags
 *   `jmp *%reg`: the register in bits 4-7;
 *   `jmp *disp(%base,%index,scale)`: the base register in bits 4-7, the
 *     index register in bits 8-11 (with TACHY_JUMP_INDEX), log2 of the
 *     scale in bits 12-13, the signed displacement in bits 14-31;
 *   `jmp *disp(%rip)` (TACHY_JUMP_RIP): the signed distance from the jump
 *     to the pointer in bits 4-31;
 *   bits 32-47: bytes from the range's start to the jump;
 *   bits 48-63: bytes from the jump to the range's end.
 * The target is inside when start < target < end (the start is the entry
 * when the range is the body: a jump there is a new call).
 */
#define TACHY_JUMP_MEM		0x1 /* the target is read from memory */
#define TACHY_JUMP_INDEX	0x2 /* the address has an index register */
#define TACHY_JUMP_RIP		0x4 /* the address is relative to the jump */
#define TACHY_JUMP_INSIDE	0x8 /* if the target cannot be read: inside */
#define TACHY_JUMP_REG_SHIFT	4
#define TACHY_JUMP_INDEX_SHIFT	8
#define TACHY_JUMP_SCALE_SHIFT	12
#define TACHY_JUMP_DISP_SHIFT	14
#define TACHY_JUMP_RIP_SHIFT	4
#define TACHY_JUMP_BEFORE_SHIFT 32
#define TACHY_JUMP_AFTER_SHIFT	48

/*
 * Exit cookie: 0 on a `ret`. An early exit (a jump into the epilogue, that
 * sees the `ret` coming) holds the signed SP adjustment to SP at the `ret`
 * in bits 32-63, and, on a jcc, the condition under which it is taken.
 */
#define TACHY_EXIT_COND_MASK   0x0f
#define TACHY_EXIT_CONDITIONAL 0x10

/*
 * Entry cookie: function id in bits 0-30; bit 31 set when the entry
 * instruction is itself a direct tail jump (the frame opens already left);
 * signed SP adjustment in bits 32-63.
 */
#define TACHY_ENTRY_ID_MASK 0x7fffffffULL
#define TACHY_ENTRY_TAILING 0x80000000ULL

/* Frame flags. */
#define TACHY_FRAME_TAILING 0x1 /* left by a tail jump; its callee returns */
#define TACHY_FRAME_SITE    0x2 /* a call site of `tachy nested` */
/* A site that ends with its parent: a tail jump, or one only an epilogue
 * follows. */
#define TACHY_FRAME_TAILSITE 0x4
#define TACHY_FRAME_ROOT     0x8 /* a traced function (not a site) */

/*
 * Nodes (traced functions and call sites) of a `tachy nested` tree. What
 * grows with it is 2 bytes per node in each thread's state (pend_of) and
 * the counters: 2 x sizeof(struct tachy_stats) (~7.7 KiB) per node and CPU,
 * allocated for the nodes a plan has, which user space checks against the
 * machine's memory before it loads. 4096 holds sqlite3_step at --depth 3
 * (2307 nodes).
 */
#define TACHY_MAX_NODES 4096

/*
 * Sites whose counts and time a thread holds until the outermost traced
 * call ends (so --slower-than sees whole calls). A call that runs more
 * distinct sites than this counts the others at once, as hist_early.
 */
#define TACHY_MAX_PENDING 512

/*
 * Durations of site calls whose histogram buckets are held per thread until
 * the outermost traced call ends, like their counts; a site call beyond
 * these goes into its histogram at once.
 */
#define TACHY_MAX_PENDING_HIST 512

/*
 * Site cookie: slot (the probed address's index) in bits 0-27,
 * TACHY_SITE_* flags in bits 28-31, and for an inlined instance the signed
 * SP adjustment to its key in bits 32-63. The node a slot times under a
 * parent is in the site_nodes map. Site-end cookie: slot in bits 0-23, an
 * x86 condition in bits 24-27 that must hold where TACHY_SEND_CONDITIONAL
 * is set (the way out of an inlined instance), signed SP adjustment in
 * bits 32-63.
 */
#define TACHY_SITE_SLOT_MASK	    0x0fffffffULL
#define TACHY_SITE_INLINED	    0x10000000ULL
#define TACHY_SITE_ENDS_WITH_PARENT 0x20000000ULL
#define TACHY_SITE_TAIL		    0x40000000ULL
#define TACHY_SITE_EXIT_FIRST	    0x80000000ULL
/*
 * Site cookie of an indirect call (not an inlined instance): where the call
 * reads its callee, in bits 32-63, in the layout of the jump cookie's bits
 * 0-31 (TACHY_JUMP_MEM, _INDEX, _RIP and their fields), with
 * TACHY_CALL_READ set there. The callee's address is counted in the
 * `callees` map under the site's node.
 */
#define TACHY_CALL_READ 0x8
/* Callees counted apart per indirect call site (node) and process; calls
 * to others are counted together. */
#define TACHY_CALLEES 16

/*
 * A site's node under a parent (the `site_nodes` map). A site of a callee
 * broken down under an indirect call counts only while that call went to
 * the callee: `via` is 1 + how far the site's probe is past the callee's
 * start (signed, 32 bits: a `.cold` part may stand below it), which the
 * parent frame's `callee` must then equal the probe's address less (0:
 * any call).
 */
struct tachy_site_node {
	__u32 node;
	__u32 via;
};

struct tachy_callee_key {
	__u32 node;
	__u32 tgid;
};

/* Calls made through one indirect call site by one process since tracing
 * began (never cleared: user space takes differences): each callee's
 * address, claimed by the first call to it, and its calls; the call's own
 * address names a callee of the same object once the process is gone. */
struct tachy_callees {
	__u64 ip; /* the call's own address in this process */
	__u64 addr[TACHY_CALLEES];
	__u64 count[TACHY_CALLEES];
	__u64 other;
};

#define TACHY_SEND_SLOT_MASK   0x00ffffffULL
#define TACHY_SEND_COND_SHIFT  24
#define TACHY_SEND_CONDITIONAL 0x10000000ULL

struct tachy_frame {
	__u64 sp; /* address of the return-address slot at entry */
	__u64 start_ns;
	/* time the probes of calls inside this one took, within it */
	__u64 probe_ns;
	/* time of the timed calls inside this one, probe time subtracted */
	__u64 inner_ns;
	/*
	 * what their readings were raised by, to 0 or to the calls inside
	 * them: the probe time subtracted beyond what they took, which was
	 * subtracted from this call too
	 */
	__u64 inner_fix;
	/* --cpu: the thread's tachy_cpu.blocked_ns and runq_ns at entry */
	__u64 blocked0;
	__u64 runq0;
	__u32 id;
	__u32 flags;
	/*
	 * a site's slot; a traced function's: the --filter groups whose
	 * entry terms held and whose terms on the return value are left for
	 * its exit (bit per group; 0: nothing left to decide)
	 */
	__u32 slot;
	/*
	 * probe time inside the caller's interval but after this frame's end:
	 * the exit of a tail callee that closed this frame with its own
	 */
	__u32 after_ns;
	/* an indirect call site's: where its probe read the call goes */
	__u64 callee;
};

/* How a thread left its CPU (tachy_cpu.off_state). */
#define TACHY_OFF_BLOCKED  1 /* asleep: a lock, I/O, a sleep */
#define TACHY_OFF_RUNNABLE 2 /* preempted, or woken and not yet running */

/*
 * --cpu: where a thread's time went while it had an open traced frame (or
 * system call), from sched_switch and sched_wakeup. Both sums only grow;
 * a frame keeps their values at its entry, and its blocked and runnable
 * parts are the differences at its end. On-CPU time is the rest of its
 * duration, so the three parts add up to it. Time the hypervisor gave the
 * thread's CPU to another guest while the thread was on it (steal time) is
 * runnable: the thread waited for a physical CPU, and its own CPU clock
 * does not count that time either.
 */
struct tachy_cpu {
	__u64 blocked_ns;
	__u64 runq_ns;
	__u64 off_ns;	 /* when it left the CPU or was woken; 0: running */
	__u32 off_state; /* TACHY_OFF_*, while off_ns is set */
	__u32 pad;
	/* The CPU's steal clock when the thread's time was last settled
	 * (steal_settle in cpu.h). */
	__u64 steal0;
	/* The thread's sum_exec_runtime when it left the CPU. */
	__u64 exec0;
};

/* Log2 slots of the parts' histograms (--cpu --hist), as funclatency's. */
#define TACHY_PART_SLOTS 64

/* --cpu --hist: per function id and per CPU, beside tachy_stats. */
struct tachy_parts {
	__u64 oncpu[TACHY_PART_SLOTS];
	__u64 blocked[TACHY_PART_SLOTS];
	__u64 runq[TACHY_PART_SLOTS];
};

/* What one site (node) accumulated in the current outermost traced call. */
struct tachy_pending {
	__u64 ns;
	__u32 cnt;
	__u32 unw;
	/* --cpu: the blocked and runnable parts of ns */
	__u64 blocked;
	__u64 runq;
};

/*
 * A thread's state: 34888 bytes (it was 6.7 KiB with 128 nodes), allocated
 * on its first traced call and freed with the thread.
 */
struct tachy_thread {
	__u32 depth;
	__u32 roots; /* open ROOT frames */
	struct tachy_cpu cpu;
	struct tachy_frame frames[TACHY_MAX_DEPTH];
	/* Sites pending: pend[0..npend), the node of each in pend_node, and
	 * per node 1 + its index in pend (0: none). */
	__u32 npend;
	__u16 pend_of[TACHY_MAX_NODES];
	__u16 pend_node[TACHY_MAX_PENDING];
	struct tachy_pending pend[TACHY_MAX_PENDING];
	__u32 pend_nhist;
	/* node id << 16 | histogram bucket */
	__u32 pend_hist[TACHY_MAX_PENDING_HIST];
	/* --cpu --hist: the parts' log2 slots of the same calls, 6 bits
	 * each: on-CPU << 12 | blocked << 6 | runnable */
	__u32 pend_parts[TACHY_MAX_PENDING_HIST];
};

/*
 * Go: frames are kept per goroutine (runtime.g, in R14 in Go code since Go
 * 1.17 on amd64), keyed by g.stack.hi - SP, which stays the same when the
 * runtime copies a growing stack. Goroutines with open traced frames at
 * once: a call of one more is counted as overflow.
 */
#define TACHY_MAX_GOROUTINES 16384

/*
 * Go probe cookie: function id in bits 0-29, kind in bits 30-31, signed SP
 * adjustment in bits 32-63. Kinds: the entry; a `ret`; the prologue's call
 * to runtime.morestack (the function restarts from its entry on a bigger
 * stack: one call); runtime.goexit1 (the goroutine ends: its open frames
 * were left by runtime.Goexit or a panic).
 */
#define TACHY_GO_ID_MASK    0x3fffffffULL
#define TACHY_GO_KIND_SHIFT 30
#define TACHY_GO_ENTRY	    0
#define TACHY_GO_RET	    1
#define TACHY_GO_MORESTACK  2
#define TACHY_GO_GOEXIT	    3

#define TACHY_GFRAME_RESTART 0x1 /* its function calls morestack */
#define TACHY_GFRAME_SITE    0x2 /* a call site of `tachy nested` */
/* A site only the epilogue follows: it ends with the frame below it. */
#define TACHY_GFRAME_TAILSITE 0x4

/*
 * An open frame of a goroutine: a traced function's, keyed by
 * g.stack.hi - SP at its entry, or a call site's (`tachy nested`), keyed
 * by g.stack.hi - SP at its `call`, which is the same at its return
 * address, on whatever stack the runtime copied the goroutine to.
 */
struct tachy_gframe {
	__u64 off;
	__u64 start_ns;
	/* time the probes of calls inside this one took, within it */
	__u64 probe_ns;
	/* time of the timed calls inside this one, probe time subtracted */
	__u64 inner_ns;
	__u32 id; /* a function's id, or a site's node */
	__u32 flags;
	/* a site's slot; a function's --filter groups left open for its
	 * `ret` (0: none) */
	__u32 slot;
	/* an indirect call site's: the low 32 bits of where its probe read
	 * the call goes (a Go program's code is one mapping, under 4 GiB) */
	__u32 callee;
};

/*
 * A goroutine's open traced frames: 3088 bytes, while it has any. A call
 * past the deepest frame is counted as not timed; over_id/over_off mark the
 * last such call that went to runtime.morestack, so that its restart from
 * the entry is not counted again.
 */
struct tachy_goroutine {
	__u32 depth;
	__u32 over_id;
	__u64 over_off;
	struct tachy_gframe frames[TACHY_MAX_DEPTH];
};

/*
 * The probes' own time, per id, measured by user space at start-up and
 * subtracted from every duration before it is bucketed.
 */
struct tachy_corr {
	__u64 in_ns;  /* of this call's own probes, inside its interval */
	__u64 add_ns; /* of its probes, inside its caller's interval */
};

/*
 * --record-slower-than: one record per call at least that slow, through a
 * ring buffer. The argument registers are saved at entry (per open frame,
 * only while records are on); with `tachy nested` the outermost traced
 * call's record carries what each of its sites took, up to
 * TACHY_REC_SITES sites (the others are counted in more_sites).
 */
#define TACHY_REC_ARGS	6
#define TACHY_REC_SITES 64

/* tachy_record.flags: an enum, which the skeleton gives Rust, as a type. */
enum tachy_rec_flag {
	TACHY_REC_CPU = 0x1,	 /* blocked_ns and runq_ns are measured */
	TACHY_REC_SYSCALL = 0x2, /* a system call: args are its arguments */
	TACHY_REC_SITESOK = 0x4, /* sites hold the whole call's breakdown */
	TACHY_REC_RET = 0x8,	 /* ret holds the return value */
};

/*
 * --stack: how a record's user stack is taken (rodata stack_how), at the
 * traced call's exit, where its callers' frames are those of its entry.
 * TACHY_STACK_FP walks the frame-pointer chain in BPF: stack[] holds up to
 * TACHY_STACK_FRAMES return addresses, the caller's first. TACHY_STACK_COPY
 * copies the user stack from the page holding the caller's SP up, page by
 * page (TACHY_STACK_PAGES at most, while they can be read), for user
 * space to unwind with the objects' .eh_frame.
 */
enum tachy_stack_how {
	TACHY_STACK_NONE = 0,
	TACHY_STACK_FP = 1,
	TACHY_STACK_COPY = 2,
};

#define TACHY_STACK_FRAMES 64
#define TACHY_STACK_PAGE   4096
#define TACHY_STACK_PAGES  3
#define TACHY_STACK_BYTES  (TACHY_STACK_PAGE * TACHY_STACK_PAGES)

struct tachy_rec_site {
	__u64 ns;
	__u32 node;
	__u32 cnt;
};

struct tachy_record {
	__u64 end_ns; /* bpf_ktime_get_ns() at the call's end */
	__u64 dur_ns; /* probe time subtracted unless --raw */
	__u64 blocked_ns;
	__u64 runq_ns;
	__u64 args[TACHY_REC_ARGS];
	/* the return register at the exit (with TACHY_REC_RET), all 64 bits */
	__u64 ret;
	__u32 pid;
	__u32 tid;
	__u32 id;
	/* TACHY_REC_* (enum tachy_rec_flag values or'd together) */
	enum tachy_rec_flag flags;
	__u32 nsites;	  /* entries of sites[] sent */
	__u32 more_sites; /* sites of the call beyond TACHY_REC_SITES */
	char comm[16];
	/*
	 * --stack: the caller's return address (where the call returns to),
	 * its SP after the return and its frame pointer; stack_base is the
	 * address stack[0] was copied from (TACHY_STACK_COPY), and
	 * stack_len the bytes of stack[] sent.
	 */
	__u64 stack_ip;
	__u64 stack_sp;
	__u64 stack_bp;
	__u64 stack_base;
	enum tachy_stack_how stack_how;
	__u32 stack_len;
	/* only the first nsites entries are in the ring buffer, and only
	 * with no stack after them */
	struct tachy_rec_site sites[TACHY_REC_SITES];
	__u8 stack[TACHY_STACK_BYTES];
};

/* The argument registers of each open frame, by its depth. */
struct tachy_rec_args {
	__u64 args[TACHY_MAX_DEPTH][TACHY_REC_ARGS];
};

/* Per function id and per CPU; summed by user space. */
struct tachy_stats {
	__u64 count; /* completed calls recorded in buckets */
	__u64 total_ns;
	__u64 min_ns; /* meaningful once count > 0 */
	__u64 max_ns;
	__u64 unwound;	/* left by exception, longjmp or a lost exit */
	__u64 filtered; /* completed, outside --slower-than/--faster-than */
	__u64 overflow; /* not timed: thread's frame stack was full */
	__u64 indirect_tail; /* timed up to an indirect tail jump */
	/* site calls bucketed before their outermost traced call's filter
	 * was known (past TACHY_MAX_PENDING_HIST in one call) */
	__u64 hist_early;
	/* --cpu: the parts of total_ns (they add up to it) */
	__u64 oncpu_ns;
	__u64 blocked_ns;
	__u64 runq_ns;
	/* calls shorter than the probe time subtracted (bucketed as 0) */
	__u64 under;
	/* --filter: calls its expression rejected, at their entry or (by
	 * the return value) at their exit */
	__u64 argfilt;
	__u64 buckets[TACHY_NBUCKETS];
};

/*
 * --filter: per function (or system call) id, an OR of AND groups of
 * comparisons of the call's arguments, evaluated at its entry. A call it
 * rejects is counted (tachy_stats.argfilt) and never timed. The terms of
 * one AND group are consecutive; the last has TACHY_TERM_LAST.
 *
 * Terms on the return value (TACHY_OPND_RET) are left for the exit: at the
 * entry a group holds when its other terms do; a call no group can pass
 * is rejected there, one that a group without return-value terms passes
 * is timed, and the others keep the groups still open (bit per group, so
 * at most 16 groups, as many as terms) in their frame. At the exit a call
 * passes when one of those groups' return-value terms all hold, and is
 * otherwise counted as rejected (tachy_stats.argfilt) instead of timed.
 * The whole expression is not evaluated at the exit because the entry
 * registers would have to be kept per frame (the frames are the size of
 * the thread state), and a call rejected at its entry costs nothing more.
 */
#define TACHY_MAX_TERMS 16

#define TACHY_OPND_REG	 0 /* register `reg` (x86 number, as above) */
#define TACHY_OPND_STACK 1 /* 8 bytes at the entry SP + off */
#define TACHY_OPND_TID	 2
#define TACHY_OPND_PID	 3
#define TACHY_OPND_RET	 4 /* the return value, at the exit */

#define TACHY_CMP_EQ 0
#define TACHY_CMP_NE 1
#define TACHY_CMP_LT 2
#define TACHY_CMP_LE 3
#define TACHY_CMP_GT 4
#define TACHY_CMP_GE 5

#define TACHY_TERM_SIGNED 0x1 /* sign-extend from size, compare signed */
#define TACHY_TERM_LAST	  0x2 /* the last term of its AND group */

struct tachy_term {
	__u64 value; /* as the operand reads it, extended to 64 bits */
	__s32 off;   /* TACHY_OPND_STACK */
	__u8 kind;   /* TACHY_OPND_* */
	__u8 reg;    /* TACHY_OPND_REG */
	__u8 cmp;    /* TACHY_CMP_* */
	__u8 size;   /* bytes of the operand that count: 1, 2, 4 or 8 */
	__u8 flags;  /* TACHY_TERM_* */
	__u8 pad[7];
};

struct tachy_filter {
	__u32 nterms; /* 0: every call passes */
	__u32 pad;
	struct tachy_term terms[TACHY_MAX_TERMS];
};

/*
 * --by: each traced function's calls grouped by up to TACHY_BY_KEYS keys,
 * in a bounded hash map of the kernel (`groups`). A key kind is one of
 * TACHY_BY_*; a kind whose value must be read at the function's entry
 * (an argument) is kept per open frame in struct tachy_by_frames, a
 * task-local storage of its own, so struct tachy_thread does not grow and
 * runs without --by pay nothing. A new kind plugs in at three places: a
 * number in enum tachy_by_kind, by_entry_values() (read at entry) or
 * by_close_value() (known at the close) in groups.h, and the Rust side's
 * plan::by::ByKey (its number in probe.rs's by_kind).
 */
#define TACHY_BY_KEYS 2

/* Key kinds (rodata by_kind): an enum, which the skeleton gives Rust. */
enum tachy_by_kind {
	TACHY_BY_NONE = 0,
	TACHY_BY_CALLER = 1, /* the return address, read at the return */
	TACHY_BY_TID = 2,
	TACHY_BY_PID = 3,
	TACHY_BY_ARG = 4,    /* an integer argument, read at entry */
	TACHY_BY_GOID = 5,   /* a Go goroutine's id, read from g at its ret */
	TACHY_BY_RETVAL = 6, /* the return value, as by_args says its width */
};

/* Groups the map holds unless user space sizes it otherwise. */
#define TACHY_BY_GROUPS 4096

struct tachy_group_key {
	__u32 id;    /* function id */
	__u16 gen;   /* generation & 1: which interval */
	__u16 other; /* the function's "other" group: the map was full */
	__u32 tgid;  /* the process a caller's address belongs to */
	__u32 pad;
	__u64 val[TACHY_BY_KEYS]; /* in the order of the kinds */
};

/* A group's calls: as tachy_stats, with the name of its thread or process. */
struct tachy_group {
	__u64 count;
	__u64 total_ns;
	char comm[16]; /* by tid: the thread's name; by pid: the process's */
	/*
	 * By caller: the file the return address was mapped from when the
	 * group was made (device as the kernel encodes it, inode; 0 where
	 * not known) and its offset there, for naming it after the process
	 * has exited.
	 */
	__u64 caller_ino;
	__u64 caller_off;
	__u32 caller_dev;
	__u32 pad;
	__u64 buckets[TACHY_NBUCKETS];
};

/*
 * --by argN / NAME: where a function's keys of kind TACHY_BY_ARG are read
 * at its entry (operands as --filter's terms: kind, reg, off, size and
 * TACHY_TERM_SIGNED), per function id; of kind TACHY_BY_RETVAL, the width
 * and sign of its return value (kind TACHY_OPND_RET).
 */
struct tachy_by_args {
	struct tachy_term opnd[TACHY_BY_KEYS];
};

/* --by: key values read at entry, per open frame (1 KiB per thread). */
struct tachy_by_frames {
	__u64 val[TACHY_MAX_DEPTH][TACHY_BY_KEYS];
};

#endif /* __TACHY_H */
