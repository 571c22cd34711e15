//! tachy: live function latency for compiled programs.
//!
//! The pipeline, one module a stage: `cli` (arguments) → `target`
//! (processes, files, commands) → `resolve` and `symbols` (functions by
//! name) → `disasm` and `callsites` (machine code) → `plan` (probes, as
//! data) → `probe` (the only module that touches BPF) → `report` (numbers
//! and renderers), driven by `trace` (one file per command, the run loop
//! and its outputs). Privileged or touching the system: `probe` and
//! `calibrate` (load BPF), `trace` (attaches and runs), `export` (serves
//! HTTP, writes a textfile), `target` (reads /proc, starts the command),
//! `kernel` and `plan::args` (read tracefs). The rest is pure and needs
//! no privilege; the fuzz targets use it.

pub mod calibrate;
pub mod callsites;
pub mod cli;
pub mod diff;
pub mod disasm;
pub mod duration;
pub mod explore;
pub mod export;
pub mod gate;
#[cfg(test)]
mod golden;
pub mod kernel;
pub mod merge;
pub mod naming;
pub mod plan;
pub mod probe;
pub mod report;
pub mod resolve;
pub mod scope;
pub mod stop;
pub mod symbols;
pub mod target;
pub mod trace;
pub mod usage;
pub mod version;
