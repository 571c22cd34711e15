//! The probes' own time: measured at start-up on functions of tachy's own
//! binary whose instructions are known exactly, then turned into what the
//! kernel subtracts from each traced call (`probe::Live::probe_time`).
//!
//! A probe's hit costs time before the BPF program reads the clock (the
//! trap) and after (the rest of the program, the return to user space and,
//! for an instruction the kernel cannot emulate, its single-step). A call's
//! reading therefore holds the part of its entry probe after the clock and
//! the part of its exit probe before it: measured as the reading of a
//! calibration function that does next to nothing, per kind of entry
//! (emulated `push`, single-stepped `endbr64`) and exit (probes on `ret`,
//! uretprobe). Everything the probes of a call cost lands in its caller's
//! reading: measured as the caller's time traced minus untraced. Call sites
//! of `tachy nested` are measured the same way, per kind of end.
//!
//! Each quantity is the median of several rounds' medians, so that a busy
//! machine's preemptions and interrupts move it little.
//!
//! x86-64's calibration functions are below; arm64's, of the same names
//! and kinds, in `arm64`.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::callsites::{Site, SiteKind};
use crate::disasm::ProbeCost;
use crate::plan::{ExitMode, HitPrices, ItemKind, Plan, ProbeKind, ProbeTime, Settings, SiteNode};
use crate::probe::{Live, Tracer};
use crate::report::hist::bucket_range;
use crate::report::Counts;
use crate::symbols::{self, ElfObject};

mod arm64;

/// What tells one architecture's calibration functions apart.
struct Layout {
    /// Offsets of the call in each site parent and of its return address.
    site_call: u64,
    site_ret: u64,
    /// The uretprobe roots (ids 2 and 3) are planned with `--uretprobe`:
    /// the planner would give them probes on `ret` otherwise.
    forced_uret: bool,
    /// The root whose probes the site parents have (their probe time is
    /// taken from the parents' readings).
    parent_like: usize,
    /// The roots as `describe` names them: [stepped, emulated] entry with
    /// a `ret` exit, then with a uretprobe.
    labels: [&'static str; 4],
}

/// x86-64's layout: `push %rbp` is 1 byte, `call rel32` 5, so a parent's
/// call stands at +1 and returns to +6; the parents are planned with a
/// uretprobe, as the push+uretprobe root.
#[cfg(not(target_arch = "aarch64"))]
const LAYOUT: Layout = Layout {
    site_call: 1,
    site_ret: 6,
    forced_uret: false,
    parent_like: 2,
    labels: [
        "endbr64+ret",
        "push+ret",
        "endbr64+uretprobe",
        "push+uretprobe",
    ],
};
#[cfg(target_arch = "aarch64")]
use arm64::LAYOUT;

// The calibration functions. Offsets the site probes rely on: push %rbp is
// 1 byte, call rel32 5, so a parent's call stands at +1 and returns to +6.
// x86-64 and arm64 only: elsewhere `measure` says so, and durations
// include the probes' time (as with --raw).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.tachy_cal,\"ax\",@progbits",
    ".p2align 4",
    ".globl tachy_cal_noop",
    ".type tachy_cal_noop,@function",
    "tachy_cal_noop:",
    "ret",
    ".size tachy_cal_noop,.-tachy_cal_noop",
    // Emulated entry; an indirect call keeps the ret probes (it could
    // reach code that throws).
    ".p2align 4",
    ".globl tachy_cal_push_ret",
    ".type tachy_cal_push_ret,@function",
    "tachy_cal_push_ret:",
    "push %rbp",
    "lea tachy_cal_noop(%rip),%rax",
    "call *%rax",
    "pop %rbp",
    "ret",
    ".size tachy_cal_push_ret,.-tachy_cal_push_ret",
    // Single-stepped entry (nothing emulated before the branch target).
    ".p2align 4",
    ".globl tachy_cal_endbr_ret",
    ".type tachy_cal_endbr_ret,@function",
    "tachy_cal_endbr_ret:",
    "endbr64",
    "mov $1,%eax",
    "1: sub $1,%eax",
    "jnz 1b",
    "sub $8,%rsp",
    "lea tachy_cal_noop(%rip),%rax",
    "call *%rax",
    "add $8,%rsp",
    "ret",
    ".size tachy_cal_endbr_ret,.-tachy_cal_endbr_ret",
    // Leaves: uretprobe exits.
    ".p2align 4",
    ".globl tachy_cal_push_uret",
    ".type tachy_cal_push_uret,@function",
    "tachy_cal_push_uret:",
    "push %rbp",
    "pop %rbp",
    "ret",
    ".size tachy_cal_push_uret,.-tachy_cal_push_uret",
    ".p2align 4",
    ".globl tachy_cal_endbr_uret",
    ".type tachy_cal_endbr_uret,@function",
    "tachy_cal_endbr_uret:",
    "endbr64",
    "mov $1,%eax",
    "1: sub $1,%eax",
    "jnz 1b",
    "ret",
    ".size tachy_cal_endbr_uret,.-tachy_cal_endbr_uret",
    // Parents of one call site each: ended by an emulated `nop`, by a
    // single-stepped `mov`, or by the parent's own return.
    ".p2align 4",
    ".globl tachy_cal_site_emul",
    ".type tachy_cal_site_emul,@function",
    "tachy_cal_site_emul:",
    "push %rbp",
    "call tachy_cal_noop",
    "nop",
    "pop %rbp",
    "ret",
    ".size tachy_cal_site_emul,.-tachy_cal_site_emul",
    ".p2align 4",
    ".globl tachy_cal_site_ss",
    ".type tachy_cal_site_ss,@function",
    "tachy_cal_site_ss:",
    "push %rbp",
    "call tachy_cal_noop",
    "mov %eax,%edx",
    "pop %rbp",
    "ret",
    ".size tachy_cal_site_ss,.-tachy_cal_site_ss",
    ".p2align 4",
    ".globl tachy_cal_site_with",
    ".type tachy_cal_site_with,@function",
    "tachy_cal_site_with:",
    "push %rbp",
    "call tachy_cal_noop",
    "pop %rbp",
    "ret",
    ".size tachy_cal_site_with,.-tachy_cal_site_with",
    ".popsection",
    options(att_syntax)
);

// Both architectures' calibration functions go by these names.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" {
    fn tachy_cal_push_ret();
    fn tachy_cal_endbr_ret();
    fn tachy_cal_push_uret();
    fn tachy_cal_endbr_uret();
    fn tachy_cal_site_emul();
    fn tachy_cal_site_ss();
    fn tachy_cal_site_with();
}

/// The calibration functions, in id order: four roots (entry x exit
/// kind), then the three parents of one site each.
const FUNCS: [&str; 7] = [
    "tachy_cal_push_ret",
    "tachy_cal_endbr_ret",
    "tachy_cal_push_uret",
    "tachy_cal_endbr_uret",
    "tachy_cal_site_emul",
    "tachy_cal_site_ss",
    "tachy_cal_site_with",
];

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn call(i: usize) {
    // SAFETY: the calibration functions take no arguments, touch only
    // scratch registers (rax and rdx; x9, with x29 and x30 restored) and
    // the stack, and return normally.
    unsafe {
        match i {
            0 => tachy_cal_push_ret(),
            1 => tachy_cal_endbr_ret(),
            2 => tachy_cal_push_uret(),
            3 => tachy_cal_endbr_uret(),
            4 => tachy_cal_site_emul(),
            5 => tachy_cal_site_ss(),
            _ => tachy_cal_site_with(),
        }
    }
}

/// Never reached: `measure` refuses first where there are no calibration
/// functions.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn call(_i: usize) {}

/// Calls per function per round, and rounds.
const CALLS: usize = 64;
const ROUNDS: usize = 11;

/// A measurement whose rounds spread wider than this (the middle half of
/// the rounds' medians, relative to their median) was taken on a machine
/// too busy to be kept for later runs.
const STEADY_SPREAD: f64 = 0.10;

/// The probes' own time, as measured here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calibration {
    /// Traced functions, by [entry emulated?][exit by uretprobe?].
    pub root: [[ProbeTime; 2]; 2],
    /// Call sites ended by an emulated probe, a single-stepped one, or
    /// with their parent (or by the next site's call).
    pub site_emulated: ProbeTime,
    pub site_stepped: ProbeTime,
    pub site_with_parent: ProbeTime,
}

/// Which root row and column a traced function's probes fall in.
fn root_kind(entry: ProbeCost, exit: ExitMode) -> (usize, usize) {
    (
        (entry == ProbeCost::Emulated) as usize,
        (exit != ExitMode::Rets) as usize,
    )
}

impl Calibration {
    /// The probe time of every id of `plan`: traced functions by their
    /// entry and exit kinds, call sites by how they end. Kernel items are
    /// timed without uprobes: nothing is subtracted from them.
    pub fn probe_time(&self, plan: &Plan) -> Vec<ProbeTime> {
        let mut out: Vec<ProbeTime> = plan
            .items
            .iter()
            .map(|item| match &item.kind {
                // Go frames (per goroutine) take the probe time of the same
                // kinds of probes: an entry, and probes on each `ret`.
                ItemKind::Function(f) => {
                    let exit = match f.exits.mode {
                        ExitMode::Go => ExitMode::Rets,
                        m => m,
                    };
                    let (e, x) = root_kind(f.entry_cost, exit);
                    self.root[e][x]
                }
                _ => ProbeTime::default(),
            })
            .collect();
        for node in &plan.sites {
            out.push(self.site(plan, node.slot));
        }
        out
    }

    /// A site's probe time by how it ends; a site whose opening probe is
    /// single-stepped (an inlined instance's entry, or an indirect call:
    /// only a `call rel32` is emulated) adds what a single-stepped entry
    /// adds over an emulated one, as the roots measured it: inside its
    /// interval, and to its parent's.
    fn site(&self, plan: &Plan, slot: u32) -> ProbeTime {
        let mut with_parent = false;
        let mut next_call = false;
        let mut stepped_entry = false;
        for p in &plan.probes {
            match p.kind {
                ProbeKind::Site {
                    slot: s,
                    tail,
                    ends_with_parent,
                    ..
                } if s == slot => {
                    with_parent = tail || ends_with_parent;
                    stepped_entry |= p.cost == ProbeCost::SingleStepped;
                }
                ProbeKind::Site {
                    slot: s,
                    exit_first: true,
                    ..
                } if s == slot + 1 => next_call = true,
                _ => {}
            }
        }
        let mut t = self.site_ends(plan, slot, with_parent, next_call);
        if stepped_entry {
            let (stepped, emulated) = (self.root[0][0], self.root[1][0]);
            t.in_ns += stepped.in_ns.saturating_sub(emulated.in_ns);
            t.add_ns += stepped.add_ns.saturating_sub(emulated.add_ns);
        }
        t
    }

    /// A site's probe time by how it ends: with its parent (a tail call,
    /// or a site that never returns before it), at the next site's call,
    /// or at a probe of its own.
    fn site_ends(&self, plan: &Plan, slot: u32, with_parent: bool, next_call: bool) -> ProbeTime {
        if with_parent {
            return self.site_with_parent;
        }
        if next_call {
            // Its end is the next site's call: only its own call probe is
            // its cost to the parent; inside, it is like an emulated end.
            return ProbeTime {
                in_ns: self.site_emulated.in_ns,
                add_ns: self.site_with_parent.add_ns,
            };
        }
        match plan.slot_ends.get(&slot) {
            Some(ProbeCost::Emulated) => self.site_emulated,
            Some(ProbeCost::SingleStepped) => self.site_stepped,
            // Never ends where it returns (it does not return): its call
            // probe still runs inside the parent.
            None => ProbeTime {
                in_ns: 0,
                add_ns: self.site_with_parent.add_ns,
            },
        }
    }

    /// What one hit of each kind costs the thread that takes it, from the
    /// roots' totals: `endbr64` + `ret` is two single-steps, `push` + `ret`
    /// an emulated hit and a single-step, `push` + uretprobe an emulated hit
    /// and a uretprobe's return.
    pub fn hit_prices(&self) -> HitPrices {
        if cfg!(target_arch = "aarch64") {
            return arm64::hit_prices(
                self.root[0][0].add_ns,
                self.root[1][0].add_ns,
                self.root[0][1].add_ns,
            );
        }
        let stepped = self.root[0][0].add_ns / 2;
        let emulated = self.root[1][0].add_ns.saturating_sub(stepped);
        HitPrices {
            emulated_ns: emulated,
            stepped_ns: stepped,
            uret_ns: self.root[1][1].add_ns.saturating_sub(emulated),
        }
    }

    /// Per call, the time a traced function of `plan` is read short by: the
    /// first traced function's, for the report.
    pub fn describe(&self) -> String {
        let us = |p: ProbeTime| format!("{:.2}", p.in_ns as f64 / 1000.0);
        let [stepped_ret, emulated_ret, stepped_uret, emulated_uret] = LAYOUT.labels;
        format!(
            "probe time per call (us, inside / total): {emulated_ret} {}/{:.2}, {stepped_ret} {}/{:.2}, {emulated_uret} {}/{:.2}, {stepped_uret} {}/{:.2}; call sites: emulated end {}/{:.2}, stepped end {}/{:.2}, ended with parent {}/{:.2}",
            us(self.root[1][0]),
            self.root[1][0].add_ns as f64 / 1000.0,
            us(self.root[0][0]),
            self.root[0][0].add_ns as f64 / 1000.0,
            us(self.root[1][1]),
            self.root[1][1].add_ns as f64 / 1000.0,
            us(self.root[0][1]),
            self.root[0][1].add_ns as f64 / 1000.0,
            us(self.site_emulated),
            self.site_emulated.add_ns as f64 / 1000.0,
            us(self.site_stepped),
            self.site_stepped.add_ns as f64 / 1000.0,
            us(self.site_with_parent),
            self.site_with_parent.add_ns as f64 / 1000.0,
        )
    }
}

/// The plan that traces the calibration functions in this process.
fn plan(exe: &Path) -> Result<Plan> {
    let obj = ElfObject::open(exe, exe)?;
    let mut plan = Plan::new(Settings {
        unit_ns: 1,
        ..Settings::default()
    });
    let syms = symbols::find(&obj, &symbols::Pattern::parse("tachy_cal_*")?)?;
    let source = syms.source;
    let mut by_name: BTreeMap<&str, &symbols::Function> = BTreeMap::new();
    for f in &syms.functions {
        by_name.insert(f.raw.as_str(), f);
    }
    let mut addrs = Vec::new();
    for (i, name) in FUNCS.into_iter().enumerate() {
        let f = by_name
            .get(name)
            .with_context(|| format!("{name} is missing from {}", exe.display()))?;
        plan.settings.uretprobe = LAYOUT.forced_uret && (i == 2 || i == 3);
        plan.add_function(&obj, f, source)?;
        addrs.push(f.addr);
    }
    plan.settings.uretprobe = false;
    // One site per parent: its call, and where it returns.
    let object = 0;
    for (k, parent) in [4u32, 5, 6].into_iter().enumerate() {
        let at = addrs[parent as usize];
        let (call, ret) = (at + LAYOUT.site_call, at + LAYOUT.site_ret);
        plan.sites.push(SiteNode {
            parent,
            slot: k as u32,
            site: Site {
                addr: call,
                ret: Some(ret),
                kind: SiteKind::Call,
                callee: None,
                callee_raw: Some("tachy_cal_noop".into()),
                name: "tachy_cal_noop".into(),
                location: None,
            },
            level: 1,
            expanded: false,
            via: None,
        });
        plan.slots.push((object, call));
        plan.push(
            &obj,
            object,
            call,
            ProbeKind::Site {
                slot: k as u32,
                tail: false,
                exit_first: false,
                ends_with_parent: k == 2,
                go: false,
                sp_adjust: 0,
                inlined: false,
                reads: None,
            },
        )?;
        if k < 2 {
            plan.push(
                &obj,
                object,
                ret,
                ProbeKind::SiteEnd {
                    slot: k as u32,
                    sp_adjust: 0,
                    cond: None,
                    go: false,
                },
            )?;
        }
    }
    plan.finish();
    Ok(plan)
}

/// Median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

/// The middle half of `v` (sorted in place) relative to its median: 0 for
/// rounds that all agree.
fn spread(v: &mut [u64]) -> f64 {
    let m = median(v);
    if m == 0 {
        return 0.0;
    }
    let (lo, hi) = (v[v.len() / 4], v[(3 * v.len()) / 4]);
    (hi - lo) as f64 / m as f64
}

/// Median of a histogram of ns, interpolated inside its bucket.
fn hist_median(c: &Counts) -> Option<u64> {
    let total: u64 = c.hist.buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let half = total as f64 / 2.0;
    let mut seen = 0u64;
    for (b, &n) in c.hist.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        if (seen + n) as f64 >= half {
            let (lo, hi) = bucket_range(b);
            let frac = (half - seen as f64) / n as f64;
            return Some(lo + ((hi + 1 - lo) as f64 * frac) as u64);
        }
        seen += n;
    }
    None
}

/// What a traced program does between two calls: other code and other
/// data, so that the probes' kernel path is not as hot in the caches as
/// back-to-back calls would keep it (a probe hit in a real program is
/// usually the first in microseconds). Touches `buf` a cache line at a
/// time.
fn elsewhere(buf: &mut [u8]) {
    for i in (0..buf.len()).step_by(64) {
        buf[i] = buf[i].wrapping_add(1);
    }
    std::hint::black_box(&buf);
}

/// Mean wall time of one call of function `i` over `CALLS` calls, each
/// after [`elsewhere`], in ns.
fn one_round(i: usize, buf: &mut [u8]) -> u64 {
    let mut ns = 0u128;
    for _ in 0..CALLS {
        elsewhere(buf);
        let start = Instant::now();
        call(i);
        ns += start.elapsed().as_nanos();
    }
    (ns / CALLS as u128) as u64
}

/// Wall time of one call of function `i`, in ns (the median of rounds).
fn wall_ns(i: usize, buf: &mut [u8]) -> u64 {
    let mut t: Vec<u64> = (0..5).map(|_| one_round(i, buf)).collect();
    median(&mut t)
}

/// A measurement, and how far its rounds spread (see [`STEADY_SPREAD`]).
pub struct Measured {
    pub cal: Calibration,
    pub spread: f64,
}

/// Measures the probes' own time on this machine (well under a second).
pub fn measure(verbose: bool) -> Result<Measured> {
    if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        anyhow::bail!(
            "its calibration functions are written for x86-64 and arm64, and this is {}",
            std::env::consts::ARCH
        );
    }
    let exe: PathBuf = std::env::current_exe().context("cannot find tachy's own binary")?;
    let plan = plan(&exe).context("cannot plan the probe-time calibration")?;
    let mut buf = vec![0u8; 256 << 10];
    let before: Vec<u64> = (0..FUNCS.len()).map(|i| wall_ns(i, &mut buf)).collect();
    let mut storage = MaybeUninit::uninit();
    let attached = AtomicUsize::new(0);
    // Counted in this process, where the calibration functions run.
    let live = Live {
        pid: Some(std::process::id()),
        probe_time: Vec::new(),
        held_back: Default::default(),
        room: None,
    };
    let mut tracer = Tracer::attach(&mut storage, &plan, &live, verbose, &attached)
        .context("cannot attach the probe-time calibration")?;
    let ids = plan.ids() as usize;
    let mut reads: Vec<Vec<u64>> = vec![Vec::new(); ids];
    let mut walls: Vec<Vec<u64>> = vec![Vec::new(); FUNCS.len()];
    tracer.take()?;
    for _ in 0..ROUNDS {
        for (i, w) in walls.iter_mut().enumerate() {
            w.push(one_round(i, &mut buf));
        }
        for (id, c) in tracer.take()?.iter().enumerate().take(ids) {
            if let Some(m) = hist_median(c) {
                reads[id].push(m);
            }
        }
    }
    drop(tracer);
    // Untraced before and after: the faster of the two is the machine's.
    let untraced: Vec<u64> = before
        .iter()
        .enumerate()
        .map(|(i, &b)| b.min(wall_ns(i, &mut buf)))
        .collect();
    let spread = reads.iter_mut().map(|r| spread(r)).fold(0.0f64, f64::max);
    let read: Vec<u64> = reads.iter_mut().map(|r| median(r)).collect();
    let wall: Vec<u64> = walls.iter_mut().map(|w| median(w)).collect();
    let root = |i: usize| ProbeTime {
        in_ns: read[i],
        add_ns: wall[i].saturating_sub(untraced[i]).max(read[i]),
    };
    // The parents' own probes are those of one of the roots.
    let parent_in = read[LAYOUT.parent_like];
    let site = |k: usize| ProbeTime {
        in_ns: read[FUNCS.len() + k],
        add_ns: read[4 + k].saturating_sub(parent_in),
    };
    Ok(Measured {
        cal: Calibration {
            root: [[root(1), root(3)], [root(0), root(2)]],
            site_emulated: site(0),
            site_stepped: site(1),
            site_with_parent: site(2),
        },
        spread,
    })
}

/// Where the measurement is kept between runs: it holds for one kernel, one
/// CPU model and one tachy binary. An empty variable counts as unset (an
/// empty TACHY_CACHE_DIR would be the current directory); so does a
/// relative XDG_CACHE_HOME, as the XDG specification says.
fn cache_path() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = match var("TACHY_CACHE_DIR") {
        Some(d) => PathBuf::from(d),
        // SAFETY: geteuid has no preconditions.
        None if unsafe { libc::geteuid() } == 0 => PathBuf::from("/var/cache/tachy"),
        None => var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache")))?
            .join("tachy"),
    };
    Some(dir.join("probe-time"))
}

/// What the measurement depends on: the kernel, the CPU model and tachy's
/// own binary (its probes and programs).
fn cache_key() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_default();
    let exe = std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            format!("{}:{mtime}", m.len())
        })
        .unwrap_or_default();
    format!(
        "tachy-probe-time 1 {} kernel {} cpu {cpu} exe {exe}",
        env!("CARGO_PKG_VERSION"),
        kernel.trim()
    )
}

impl Calibration {
    fn times(&self) -> [ProbeTime; 7] {
        [
            self.root[0][0],
            self.root[0][1],
            self.root[1][0],
            self.root[1][1],
            self.site_emulated,
            self.site_stepped,
            self.site_with_parent,
        ]
    }

    fn from_times(t: [ProbeTime; 7]) -> Calibration {
        Calibration {
            root: [[t[0], t[1]], [t[2], t[3]]],
            site_emulated: t[4],
            site_stepped: t[5],
            site_with_parent: t[6],
        }
    }

    /// The cache file's text: the key line, then `in add` per quantity,
    /// then, for a measurement taken on a busy machine, `busy <unix time>`.
    fn to_text(self, key: &str, busy_at: Option<u64>) -> String {
        let mut s = format!("{key}\n");
        for t in self.times() {
            s.push_str(&format!("{} {}\n", t.in_ns, t.add_ns));
        }
        if let Some(at) = busy_at {
            s.push_str(&format!("busy {at}\n"));
        }
        s
    }

    fn from_text(text: &str, key: &str) -> Option<(Calibration, Option<u64>)> {
        let mut lines = text.lines();
        if lines.next()? != key {
            return None;
        }
        let mut t = [ProbeTime::default(); 7];
        for slot in t.iter_mut() {
            let (a, b) = lines.next()?.split_once(' ')?;
            *slot = ProbeTime {
                in_ns: a.parse().ok()?,
                add_ns: b.parse().ok()?,
            };
        }
        let busy_at = match lines.next() {
            None => None,
            Some(l) => Some(l.strip_prefix("busy ")?.parse().ok()?),
        };
        Some((Calibration::from_times(t), busy_at))
    }
}

/// Seconds since the epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A measurement taken on a busy machine is kept this long (seconds), so
/// that runs on a machine that stays busy do not each pay for a new one.
const BUSY_KEPT: u64 = 3600;

/// Where the probes' own time came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Read from the cache.
    Cached,
    /// Read from the cache, measured on a busy machine less than an hour
    /// ago.
    CachedBusy,
    /// Measured now, and cached.
    Measured,
    /// Measured now on a busy machine (rounds spread wider than
    /// [`STEADY_SPREAD`]): cached for an hour.
    Busy,
    /// Measured now; the cache could not be written (`in PATH (why)`), so
    /// every start measures again.
    NotCached(String),
}

/// The probes' own time: from the cache when it was measured for this
/// kernel, CPU model and binary (on a busy machine: within the hour), else
/// measured now (~0.5 s) and cached.
pub fn load_or_measure(verbose: bool) -> Result<(Calibration, Source)> {
    let key = cache_key();
    let path = cache_path();
    let now = unix_now();
    if let Some(c) = read_cache(path.as_deref(), &key, now) {
        return Ok(c);
    }
    let m = measure(verbose)?;
    let busy_at = (m.spread > STEADY_SPREAD).then_some(now);
    let text = m.cal.to_text(&key, busy_at);
    let source = match path {
        None => Source::NotCached(
            "(no directory: neither TACHY_CACHE_DIR, XDG_CACHE_HOME nor HOME is set)".into(),
        ),
        Some(p) => match write_cache(&p, &text) {
            Err(e) => Source::NotCached(e),
            Ok(()) if busy_at.is_some() => Source::Busy,
            Ok(()) => Source::Measured,
        },
    };
    Ok((m.cal, source))
}

/// The measurement in the cache at `path`, if it was taken for `key` (on a
/// busy machine: within the hour).
fn read_cache(path: Option<&Path>, key: &str, now: u64) -> Option<(Calibration, Source)> {
    let text = std::fs::read_to_string(path?).ok()?;
    match Calibration::from_text(&text, key)? {
        (cal, None) => Some((cal, Source::Cached)),
        (cal, Some(at)) if now.saturating_sub(at) < BUSY_KEPT => Some((cal, Source::CachedBusy)),
        _ => None,
    }
}

/// What a probe hit costs here, if tachy measured it on this machine for
/// this kernel and binary (it does on its first traced run): `--dry-run`
/// and `list` print it and never measure.
pub fn cached_prices() -> Option<HitPrices> {
    read_cache(cache_path().as_deref(), &cache_key(), unix_now()).map(|(c, _)| c.hit_prices())
}

/// Writes the cache file whole, then renames it into place; on failure,
/// says what was tried and why it failed.
fn write_cache(path: &Path, text: &str) -> std::result::Result<(), String> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let failed = |e: std::io::Error| format!("in {} ({})", path.display(), e.kind());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let written = std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(failed);
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_reads_back_what_it_wrote_for_its_key_only() {
        let t = |n: u64| ProbeTime {
            in_ns: n,
            add_ns: n + 1,
        };
        let cal = Calibration::from_times([t(10), t(20), t(30), t(40), t(50), t(60), t(70)]);
        let text = cal.to_text("key A", None);
        assert_eq!(Calibration::from_text(&text, "key A"), Some((cal, None)));
        assert_eq!(Calibration::from_text(&text, "key B"), None);
        assert_eq!(Calibration::from_text("key A\n1 2\n", "key A"), None);
        let busy = cal.to_text("key A", Some(1234));
        assert_eq!(
            Calibration::from_text(&busy, "key A"),
            Some((cal, Some(1234)))
        );
        assert_eq!(Calibration::from_text(&(text + "garbage\n"), "key A"), None);
        assert!(cache_key().contains(env!("CARGO_PKG_VERSION")));
    }

    #[test]
    fn spread_is_the_middle_half_over_the_median() {
        assert_eq!(spread(&mut []), 0.0);
        assert_eq!(spread(&mut [500; 7]), 0.0);
        // Sorted: 90 95 100 100 105 110 400: the 2nd and the 6th, 95 and
        // 110, over the median 100.
        let s = spread(&mut [100, 400, 95, 105, 90, 110, 100]);
        assert!((s - 0.15).abs() < 1e-9, "{s}");
    }
}
