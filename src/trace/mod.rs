//! The top of `tachy latency`, `tachy nested` and `tachy list`: one file
//! per command over shared stages. The traced target (`target`), the run
//! loop and its one state (`run`), the records (`records`), report
//! assembly (`assemble`) from options made once from the settings
//! (`options`), and the outputs behind one interface (`sink`).

mod assemble;
pub mod budget;
pub(crate) mod latency;
mod list;
pub(crate) mod nested;
mod options;
mod records;
pub mod run;
pub mod sink;
mod stacks;
pub(crate) mod target;

pub use latency::latency;
pub use list::list;
pub use options::{ReportOptions, TreeOptions};
