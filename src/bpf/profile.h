/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The events of `tachy explore`'s sampling profile (profile.bpf.c), as the
 * BPF side writes them and the Rust side reads them through the skeleton.
 */
#ifndef TACHY_PROFILE_H
#define TACHY_PROFILE_H

/* Bytes of user stack copied with each stack event: whole pages from the
 * page holding SP up, so every read has a constant size and offset. */
#define PROFILE_PAGE  4096
#define PROFILE_PAGES 4
#define PROFILE_STACK (PROFILE_PAGE * PROFILE_PAGES)

enum profile_kind {
	/* A thread of the target on a CPU, from the sampling timer. */
	PROFILE_ON_CPU = 0,
	/* A thread of the target going to sleep (blocked), at sched_switch. */
	PROFILE_OFF = 1,
	/* A thread that went to sleep running again: the end of PROFILE_OFF. */
	PROFILE_BACK = 2,
};

/* The head of every event; PROFILE_BACK events are only this. */
struct profile_head {
	__u32 kind;
	__u32 tid;
	__u64 ns;
};

/* PROFILE_ON_CPU and PROFILE_OFF: the user registers an unwinder starts
 * from and the stack memory from the page holding sp, `pages` pages of it
 * readable. */
struct profile_stack {
	struct profile_head head;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 pages;
	__u32 pad;
	__u8 stack[PROFILE_STACK];
};

#endif
