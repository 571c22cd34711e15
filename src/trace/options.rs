//! What the reports need of the settings, made once from them: the
//! assembly of reports and the sinks never see the command line.

use crate::cli::{Format, TraceSettings};
use crate::plan::by::ByKey;
use crate::plan::filter::Filter;
use crate::report::fmt::human;
use crate::report::Unit;

/// How reports are assembled and written.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    pub unit: Unit,
    /// Each report says when it was taken.
    pub timestamp: bool,
    /// The text report shows functions never called too (`--all`).
    pub all: bool,
    /// `--by`: the keys calls are grouped by (none: no groups).
    pub by: Vec<ByKey>,
    /// `--top`: groups shown per function.
    pub top: Option<usize>,
    /// `tachy nested`: the report is a tree of call sites.
    pub tree: Option<TreeOptions>,
    pub format: Format,
}

/// How the tree of `tachy nested` is reported.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    /// A histogram for every call site.
    pub hist: bool,
    /// The call sites that never ran are shown too.
    pub all_sites: bool,
    /// The filter on durations, as the report says it.
    pub filter: Option<String>,
    /// The options that drop a traced call's site counts when it ends,
    /// before which the callees of indirect sites are counted (see
    /// `TreeReport::callees_before`).
    pub callees_before: Option<String>,
}

impl ReportOptions {
    pub fn new(s: &TraceSettings) -> ReportOptions {
        let filter = match (s.min_ns, s.max_ns) {
            (None, None) => None,
            (Some(lo), None) => Some(format!("slower than {}", human(lo as f64))),
            (None, Some(hi)) => Some(format!("faster than {}", human(hi as f64))),
            (Some(lo), Some(hi)) => Some(format!(
                "between {} and {}",
                human(lo as f64),
                human(hi as f64)
            )),
        };
        // A site's counts wait for the outermost traced call's end and are
        // dropped with it where these reject it; its callees are counted
        // at the call (src/bpf/sites.h).
        let mut drop: Vec<&str> = Vec::new();
        if s.min_ns.is_some() {
            drop.push("--slower-than");
        }
        if s.max_ns.is_some() {
            drop.push("--faster-than");
        }
        // A filter on arguments alone rejects a call at its entry, before
        // any site in it: only one on the return value drops counts.
        if s.filter.as_ref().is_some_and(Filter::reads_ret) {
            drop.push("--filter");
        }
        let callees_before = (!drop.is_empty()).then(|| drop.join(" and "));
        ReportOptions {
            unit: s.unit,
            timestamp: s.timestamp,
            all: s.all,
            by: s.by.clone(),
            top: s.top,
            tree: s.mode.nested().map(|n| TreeOptions {
                hist: n.hist,
                all_sites: n.all_sites,
                filter,
                callees_before,
            }),
            format: s.output.format,
        }
    }

    /// The names of the `--by` keys, as reports head their columns.
    pub fn by_names(&self) -> Vec<String> {
        self.by.iter().map(|k| k.name().to_string()).collect()
    }
}
