//! The calibration functions of an arm64 tachy, and what tells their
//! measurements apart from x86-64's: the same seven functions by name and
//! id, built from AArch64 instructions of the same kinds.
//!
//! On arm64 the kernel simulates `ret`, `bl` and `adr`, and single-steps
//! `stp x29, x30, [sp, #-16]!` and `mov` (arch/arm64/kernel/probes/
//! decode-insn.c): the entries are either single-stepped (on the `stp`,
//! where nothing simulated runs once per call after it) or simulated (moved
//! past the frame), and every exit through `ret` is simulated. A uretprobe
//! is planned only when forced (`--uretprobe`): it stands on the first
//! instruction, sharing the entry's trap when the entry stays there, else
//! a single-stepped trap of its own on the `stp` (see `Plan::add_function`).

use super::Layout;
use crate::plan::HitPrices;

// The calibration functions. Offsets the site probes rely on: each parent
// sets up its frame (8 bytes), then `adr` (where its entry moves), its `bl`
// at +12 returning to +16. Not touched: x0-x8, x19 and up.
#[cfg(target_arch = "aarch64")]
std::arch::global_asm!(
    ".pushsection .text.tachy_cal,\"ax\",%progbits",
    ".p2align 4",
    ".globl tachy_cal_noop",
    ".type tachy_cal_noop,%function",
    "tachy_cal_noop:",
    "ret",
    ".size tachy_cal_noop,.-tachy_cal_noop",
    // Simulated entry: moved past the frame onto the `bl`.
    ".p2align 4",
    ".globl tachy_cal_push_ret",
    ".type tachy_cal_push_ret,%function",
    "tachy_cal_push_ret:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "bl tachy_cal_noop",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_push_ret,.-tachy_cal_push_ret",
    // Single-stepped entry: a loop starts after the frame, so the entry
    // stays on the `stp`.
    ".p2align 4",
    ".globl tachy_cal_endbr_ret",
    ".type tachy_cal_endbr_ret,%function",
    "tachy_cal_endbr_ret:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "mov w9, #1",
    "1: subs w9, w9, #1",
    "b.ne 1b",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_endbr_ret,.-tachy_cal_endbr_ret",
    // The same two under a forced uretprobe.
    ".p2align 4",
    ".globl tachy_cal_push_uret",
    ".type tachy_cal_push_uret,%function",
    "tachy_cal_push_uret:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "bl tachy_cal_noop",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_push_uret,.-tachy_cal_push_uret",
    ".p2align 4",
    ".globl tachy_cal_endbr_uret",
    ".type tachy_cal_endbr_uret,%function",
    "tachy_cal_endbr_uret:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "mov w9, #1",
    "1: subs w9, w9, #1",
    "b.ne 1b",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_endbr_uret,.-tachy_cal_endbr_uret",
    // Parents of one call site each: ended by a simulated `adr`, by a
    // single-stepped `mov`, or by the parent's own return.
    ".p2align 4",
    ".globl tachy_cal_site_emul",
    ".type tachy_cal_site_emul,%function",
    "tachy_cal_site_emul:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "adr x9, .",
    "bl tachy_cal_noop",
    "adr x9, .",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_site_emul,.-tachy_cal_site_emul",
    ".p2align 4",
    ".globl tachy_cal_site_ss",
    ".type tachy_cal_site_ss,%function",
    "tachy_cal_site_ss:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "adr x9, .",
    "bl tachy_cal_noop",
    "mov x9, x29",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_site_ss,.-tachy_cal_site_ss",
    ".p2align 4",
    ".globl tachy_cal_site_with",
    ".type tachy_cal_site_with,%function",
    "tachy_cal_site_with:",
    "stp x29, x30, [sp, #-16]!",
    "mov x29, sp",
    "adr x9, .",
    "bl tachy_cal_noop",
    "ldp x29, x30, [sp], #16",
    "ret",
    ".size tachy_cal_site_with,.-tachy_cal_site_with",
    ".popsection",
);

/// arm64's layout: the `bl` of each parent at +12, returning to +16; the
/// uretprobe roots planned with `--uretprobe`; the parents' own probes
/// (an `adr` entry, a `ret` exit) priced like the simulated root's.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(super) const LAYOUT: Layout = Layout {
    site_call: 12,
    site_ret: 16,
    forced_uret: true,
    parent_like: 0,
    labels: [
        "stp+ret",
        "moved entry+ret",
        "stp+uretprobe",
        "moved entry+uretprobe on stp",
    ],
};

/// What one hit of each kind costs, from the roots' totals: a moved entry
/// and a `ret` are two simulated hits, an entry on the `stp` and a `ret` a
/// single-step and a simulated hit, a uretprobe sharing the `stp`'s trap a
/// single-step and a uretprobe's return.
pub(super) fn hit_prices(stepped_ret: u64, emulated_ret: u64, stepped_uret: u64) -> HitPrices {
    let emulated = emulated_ret / 2;
    let stepped = stepped_ret.saturating_sub(emulated);
    HitPrices {
        emulated_ns: emulated,
        stepped_ns: stepped,
        uret_ns: stepped_uret.saturating_sub(stepped),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_come_apart_from_the_roots() {
        // Simulated hit 1 us, single-step 5 us, uretprobe return 2 us.
        let p = hit_prices(6000, 2000, 7000);
        assert_eq!((p.emulated_ns, p.stepped_ns, p.uret_ns), (1000, 5000, 2000));
    }
}
