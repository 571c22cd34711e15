//! What the kernel counted for one traced function over an interval, as
//! plain data: calls, times, the histogram, the `--cpu` split; and the unit
//! reports show durations in.

use super::hist::Hist;

/// The display unit of durations, as funclatency's `-u`/`-m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Unit {
    #[default]
    Nsec,
    Usec,
    Msec,
}

impl Unit {
    /// BCC funclatency's word for the unit, in text reports.
    pub fn word(self) -> &'static str {
        match self {
            Unit::Nsec => "nsecs",
            Unit::Usec => "usecs",
            Unit::Msec => "msecs",
        }
    }

    /// The unit's name in JSON reports.
    pub fn label(self) -> &'static str {
        match self {
            Unit::Nsec => "nsec",
            Unit::Usec => "usec",
            Unit::Msec => "msec",
        }
    }

    /// The unit named by [`Unit::label`].
    pub fn from_label(s: &str) -> Option<Unit> {
        [Unit::Nsec, Unit::Usec, Unit::Msec]
            .into_iter()
            .find(|u| u.label() == s)
    }

    /// Nanoseconds per unit.
    pub fn ns(self) -> u64 {
        match self {
            Unit::Nsec => 1,
            Unit::Usec => 1_000,
            Unit::Msec => 1_000_000,
        }
    }
}

/// Counters of one traced function over one interval, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Completed calls in the histogram.
    pub count: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Calls left by exception, longjmp, or a return tachy did not see.
    pub unwound: u64,
    /// Completed calls outside `--slower-than`/`--faster-than`.
    pub filtered: u64,
    /// Calls not timed because the thread's frame stack was full.
    pub overflow: u64,
    /// Calls timed up to an indirect tail jump.
    pub indirect_tail: u64,
    /// Call-site calls put in the histogram before the duration filter
    /// had decided on their traced call (beyond 512 site calls, or 512
    /// distinct sites, in one call; for the latter, count and total too).
    pub hist_early: u64,
    /// Calls shorter than the probe time subtracted from them (counted as
    /// 0 ns).
    pub under: u64,
    /// The probes' own time subtracted from each call, in ns (0: none,
    /// as with `--raw`).
    pub probe_ns: u64,
    /// The probes' own time each call leaves in its caller's reading,
    /// subtracted from the caller, in ns.
    pub probe_add_ns: u64,
    /// Durations in display units, in the kernel's log2 x 16 buckets.
    pub hist: Hist,
    /// `--cpu`: where the time of the calls counted went.
    pub cpu: Option<CpuSplit>,
    /// `--filter`: calls its expression rejected at their entry (None:
    /// no filter on this function).
    pub arg_filtered: Option<u64>,
    /// An indirect call site: the calls made through it, per callee (as
    /// they were made, whatever the duration filter decides later).
    pub callees: Vec<Callee>,
    /// `--max-overhead` sampled the site: its counts, times and callees
    /// are scaled up from the share of the time it was timed.
    pub estimated: bool,
}

/// A function an indirect call site reached, and how many times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Callee {
    /// Its name as shown (demangled), `function+0x10` for an address
    /// inside one, or `other` for the callees beyond those the kernel
    /// counts apart.
    pub name: String,
    /// Its raw symbol name, when it is a function's start.
    pub raw: Option<String>,
    /// The object holding it, and its address there.
    pub object: Option<String>,
    pub addr: Option<u64>,
    pub count: u64,
}

impl Callee {
    /// Adds `c`'s calls to the same callee of `list`, or `c` to it.
    pub fn add_to(list: &mut Vec<Callee>, c: &Callee) {
        match list
            .iter_mut()
            .find(|x| x.name == c.name && x.object == c.object && x.addr == c.addr)
        {
            Some(x) => x.count += c.count,
            None => list.push(c.clone()),
        }
    }
}

/// The time of the calls counted, split by what the thread was doing; the
/// three parts add up to `Counts::total_ns`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSplit {
    /// Running on a CPU.
    pub oncpu_ns: u64,
    /// Switched out asleep (a lock, I/O, a sleep), up to its wakeup.
    pub blocked_ns: u64,
    /// Runnable, waiting for a CPU: preempted, or woken and not yet running.
    pub runq_ns: u64,
    /// `--hist`: per call, the log2 slots of each part in display units
    /// (on-CPU, blocked, runnable), as `Hist::log2_slots`.
    pub hist: Option<[Vec<u64>; 3]>,
}

/// The rank (1-based) of percentile `q` (0..=100) among `n` values, as
/// hdrhistogram counts it in `Hist::percentiles`: the first value at or
/// past `q`% of them.
fn rank(q: f64, n: u64) -> u64 {
    let q = (q / 100.0).min(1.0);
    ((q * n as f64).ceil() as u64).max(1)
}

/// The parts of a `CpuSplit`, in order, with the words reports use.
pub const CPU_PARTS: [(&str, &str); 3] = [
    ("on-CPU", "oncpu"),
    ("blocked", "blocked"),
    ("waiting for a CPU", "runnable"),
];

impl CpuSplit {
    /// The parts, in the order of `CPU_PARTS`.
    pub fn parts(&self) -> [u64; 3] {
        [self.oncpu_ns, self.blocked_ns, self.runq_ns]
    }

    pub fn merge(&mut self, o: &CpuSplit) {
        self.oncpu_ns += o.oncpu_ns;
        self.blocked_ns += o.blocked_ns;
        self.runq_ns += o.runq_ns;
        if let Some(oh) = &o.hist {
            let h = self.hist.get_or_insert_with(Default::default);
            for (mine, theirs) in h.iter_mut().zip(oh) {
                if mine.len() < theirs.len() {
                    mine.resize(theirs.len(), 0);
                }
                for (d, s) in mine.iter_mut().zip(theirs) {
                    *d += *s;
                }
            }
        }
    }
}

impl Counts {
    /// Whether any call entered: completed, filtered out, left by
    /// exception or not timed.
    pub fn called(&self) -> bool {
        self.count > 0
            || self.unwound > 0
            || self.filtered > 0
            || self.overflow > 0
            || self.indirect_tail > 0
            || self.arg_filtered.is_some_and(|n| n > 0)
    }

    /// The percentiles `qs` (0..=100) of the calls timed, each as the
    /// range in ns it is known to lie in: the bucket of its rank narrowed
    /// by the exact min and max, or exactly the min or the max where its
    /// rank is the first or the last call (two calls: p50 is the shorter,
    /// p90 and up the longer). None where the histogram is empty.
    pub fn percentile_ranges(&self, qs: &[f64], unit: Unit) -> Vec<Option<(u64, u64)>> {
        // A call of 0 ns is kept as min 1 ns by the kernel: never let min
        // exceed max.
        let (min, max) = (self.min_ns.min(self.max_ns), self.max_ns);
        let n: u64 = self.hist.buckets.iter().sum();
        // min and max are those of the calls in the histogram only when it
        // holds exactly the calls counted (a site's histogram may also hold
        // calls its parent's filter later left out).
        let exact = n == self.count;
        let per = unit.ns();
        qs.iter()
            .zip(self.hist.percentiles(qs))
            .map(|(&q, bucket)| {
                let (lo, hi) = bucket?;
                Some(match rank(q, n) {
                    1 if exact => (min, min),
                    r if exact && r == n => (max, max),
                    _ => (
                        lo.saturating_mul(per).clamp(min, max),
                        hi.saturating_mul(per)
                            .saturating_add(per - 1)
                            .clamp(min, max),
                    ),
                })
            })
            .collect()
    }

    pub fn merge(&mut self, o: &Counts) {
        if o.count > 0 {
            self.min_ns = if self.count == 0 {
                o.min_ns
            } else {
                self.min_ns.min(o.min_ns)
            };
            self.max_ns = self.max_ns.max(o.max_ns);
        }
        self.count += o.count;
        self.total_ns += o.total_ns;
        self.unwound += o.unwound;
        self.filtered += o.filtered;
        self.overflow += o.overflow;
        self.indirect_tail += o.indirect_tail;
        self.hist_early += o.hist_early;
        self.under += o.under;
        self.probe_ns = self.probe_ns.max(o.probe_ns);
        self.probe_add_ns = self.probe_add_ns.max(o.probe_add_ns);
        self.hist.merge(&o.hist);
        if let Some(oc) = &o.cpu {
            self.cpu.get_or_insert_with(Default::default).merge(oc);
        }
        if let Some(n) = o.arg_filtered {
            *self.arg_filtered.get_or_insert(0) += n;
        }
        for c in &o.callees {
            Callee::add_to(&mut self.callees, c);
        }
        self.estimated |= o.estimated;
    }
}
