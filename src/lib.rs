//! tachy: live function latency for compiled programs.
//!
//! The pipeline, one module a stage: `cli` (arguments) → `target`
//! (processes, files, commands) → `resolve` and `symbols` (functions by
//! name) → `disasm` and `callsites` (machine code) → `plan` (probes, as
//! data) → `probe` (the only module that touches BPF) → `report` (numbers
//! and renderers), driven by `session`. Everything but `probe` and
//! `session` is pure and needs no privilege; the fuzz targets use it.

pub mod calibrate;
pub mod callsites;
pub mod cli;
pub mod disasm;
pub mod docs;
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
pub mod session;
pub mod stop;
pub mod symbols;
pub mod target;
