//! Where a process's time goes: adds named stacks up into one row per
//! function (and per inlined function), with its share of the on-CPU
//! samples and of the blocked time of the stacks it is on. Pure: the
//! stacks come named (see `stacks`), so this is unit-tested without root.

use std::collections::HashMap;
use std::path::PathBuf;

use super::stacks::Frame;

/// A row's identity: its object and what it is called there.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey {
    pub object: PathBuf,
    /// The raw symbol name; for an inlined function, its name.
    pub name: String,
    pub inlined: bool,
}

/// One function of the profile.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub key: RowKey,
    /// What the row shows: the demangled name, marked when inlined.
    pub shown: String,
    /// What `tachy latency` times for it: `PATH:RAW` of the function, or
    /// of the function it was inlined in; None when no symbol holds it.
    pub spec: Option<String>,
    /// On-CPU samples with the function on the stack, and at its top.
    pub on: u64,
    pub on_self: u64,
    /// Blocked ns with the function on the stack.
    pub off_ns: u64,
    /// The fewest frames between the function and the top of a stack it
    /// was on: of equal shares, the one nearer the work comes first.
    pub depth: usize,
}

/// How the rows are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// By on-CPU and blocked time together.
    Total,
    OnCpu,
    OffCpu,
    /// By on-CPU samples at the top of the stack.
    SelfCpu,
}

impl Sort {
    pub fn next(self) -> Sort {
        match self {
            Sort::Total => Sort::OnCpu,
            Sort::OnCpu => Sort::OffCpu,
            Sort::OffCpu => Sort::SelfCpu,
            Sort::SelfCpu => Sort::Total,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sort::Total => "total",
            Sort::OnCpu => "on-CPU",
            Sort::OffCpu => "blocked",
            Sort::SelfCpu => "self",
        }
    }
}

/// The profile so far.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    rows: HashMap<RowKey, Row>,
    /// On-CPU samples, and blocked ns, of every stack added.
    pub samples: u64,
    pub off_ns: u64,
    /// ns of CPU time one sample stands for.
    pub sample_ns: u64,
}

impl Profile {
    pub fn new(sample_ns: u64) -> Profile {
        Profile {
            sample_ns,
            ..Default::default()
        }
    }

    /// Adds a stack (innermost frame first): one on-CPU sample, or
    /// `off_ns` of blocked time.
    pub fn add(&mut self, frames: &[Frame], off_ns: Option<u64>) {
        match off_ns {
            Some(ns) => self.off_ns += ns,
            None => self.samples += 1,
        }
        let mut seen: Vec<RowKey> = Vec::new();
        for (depth, f) in frames.iter().enumerate() {
            let spec = (!f.raw.is_empty()).then(|| format!("{}:{}", f.object.display(), f.raw));
            let mut keys = Vec::with_capacity(2);
            if let Some(inl) = &f.inlined {
                keys.push((
                    RowKey {
                        object: f.object.clone(),
                        name: inl.clone(),
                        inlined: true,
                    },
                    format!("{inl} [inlined]"),
                ));
            }
            keys.push((
                RowKey {
                    object: f.object.clone(),
                    name: if f.raw.is_empty() {
                        f.name.clone()
                    } else {
                        f.raw.clone()
                    },
                    inlined: false,
                },
                f.name.clone(),
            ));
            for (i, (key, shown)) in keys.into_iter().enumerate() {
                // Recursion: a function counts once per stack.
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key.clone());
                let row = self.rows.entry(key.clone()).or_insert_with(|| Row {
                    key,
                    shown,
                    spec: spec.clone(),
                    on: 0,
                    on_self: 0,
                    off_ns: 0,
                    depth: usize::MAX,
                });
                row.depth = row.depth.min(depth);
                match off_ns {
                    Some(ns) => row.off_ns += ns,
                    None => {
                        row.on += 1;
                        if depth == 0 && i == 0 {
                            row.on_self += 1;
                        }
                    }
                }
            }
        }
    }

    /// ns of on-CPU time the samples stand for.
    pub fn on_ns(&self) -> u64 {
        self.samples * self.sample_ns
    }

    /// A row's share (0..=1) of the on-CPU samples.
    pub fn on_share(&self, r: &Row) -> f64 {
        ratio(r.on, self.samples)
    }

    pub fn self_share(&self, r: &Row) -> f64 {
        ratio(r.on_self, self.samples)
    }

    /// A row's share of the blocked time.
    pub fn off_share(&self, r: &Row) -> f64 {
        ratio(r.off_ns, self.off_ns)
    }

    /// A row's share of on-CPU and blocked time together.
    pub fn total_share(&self, r: &Row) -> f64 {
        ratio(r.on * self.sample_ns + r.off_ns, self.on_ns() + self.off_ns)
    }

    /// The rows, most time first by `sort`; of equal shares, the nearer
    /// the top of the stack first, then by name.
    pub fn rows(&self, sort: Sort) -> Vec<&Row> {
        let mut v: Vec<&Row> = self.rows.values().collect();
        let key = |r: &Row| -> u64 {
            match sort {
                Sort::Total => r.on * self.sample_ns + r.off_ns,
                Sort::OnCpu => r.on,
                Sort::OffCpu => r.off_ns,
                Sort::SelfCpu => r.on_self,
            }
        };
        v.sort_by(|a, b| {
            key(b)
                .cmp(&key(a))
                .then(a.depth.cmp(&b.depth))
                .then(a.shown.cmp(&b.shown))
        });
        v
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, inlined: Option<&str>) -> Frame {
        Frame {
            object: PathBuf::from("/bin/app"),
            raw: name.into(),
            name: name.into(),
            inlined: inlined.map(Into::into),
        }
    }

    #[test]
    fn shares_count_a_function_once_per_stack() {
        let mut p = Profile::new(10);
        let spin = [
            frame("spin", None),
            frame("loop", None),
            frame("main", None),
        ];
        let rec = [frame("rec", None), frame("rec", None), frame("main", None)];
        p.add(&spin, None);
        p.add(&spin, None);
        p.add(&rec, None);
        p.add(&[frame("wait", None), frame("main", None)], Some(70));
        let rows = p.rows(Sort::OnCpu);
        let names: Vec<&str> = rows.iter().map(|r| r.shown.as_str()).collect();
        // main is on every stack but deepest; spin and loop tie, spin is on top.
        assert_eq!(names, ["main", "spin", "loop", "rec", "wait"]);
        let rec = rows.iter().find(|r| r.shown == "rec").unwrap();
        assert_eq!((rec.on, rec.on_self), (1, 1));
        assert!((p.on_share(rows[0]) - 1.0).abs() < 1e-9);
        let wait = rows.iter().find(|r| r.shown == "wait").unwrap();
        assert!((p.off_share(wait) - 1.0).abs() < 1e-9);
        // 70 ns of 100 (30 on-CPU + 70 blocked).
        assert!((p.total_share(wait) - 0.7).abs() < 1e-9);
        assert_eq!(p.rows(Sort::OffCpu)[0].shown, "wait");
        assert_eq!(wait.spec.as_deref(), Some("/bin/app:wait"));
    }

    #[test]
    fn an_inlined_function_is_a_row_traced_through_its_caller() {
        let mut p = Profile::new(10);
        p.add(&[frame("outer", Some("helper")), frame("main", None)], None);
        let rows = p.rows(Sort::SelfCpu);
        assert_eq!(rows[0].shown, "helper [inlined]");
        assert_eq!(rows[0].spec.as_deref(), Some("/bin/app:outer"));
        assert_eq!(rows[0].on_self, 1);
        let outer = rows.iter().find(|r| r.shown == "outer").unwrap();
        assert_eq!((outer.on, outer.on_self), (1, 0));
    }
}
