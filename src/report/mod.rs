//! Reports: plain data built from the kernel's counters (no BPF types here),
//! the histogram math, and the renderers (`text`, `json`). Renderers take a
//! `&Report` and a writer and print nothing else.

pub mod hist;
pub mod json;
pub mod text;

use std::path::PathBuf;
use std::time::SystemTime;

pub use hist::Hist;

/// The display unit of durations, as funclatency's `-u`/`-m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Unit {
    #[default]
    Nsec,
    Usec,
    Msec,
}

impl Unit {
    pub fn label(self) -> &'static str {
        match self {
            Unit::Nsec => "nsec",
            Unit::Usec => "usec",
            Unit::Msec => "msec",
        }
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
    /// Durations in display units, in the kernel's log2 x 16 buckets.
    pub hist: Hist,
}

impl Counts {
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
        self.hist.merge(&o.hist);
    }
}

/// One traced function's part of a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncReport {
    /// Demangled name with parameters and clone suffix.
    pub name: String,
    pub raw_name: String,
    /// The object as users know it (as in /proc/PID/maps).
    pub object: PathBuf,
    pub counts: Counts,
}

/// What one interval (or the whole run) measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub time: SystemTime,
    pub unit: Unit,
    pub timestamp: bool,
    pub funcs: Vec<FuncReport>,
}
