//! The integration tests, one module per area, in one test binary: it
//! links tachy once, and `cargo test --release --test it NAME` picks tests
//! of any area by name (`kernel::`, `latency::`, ...).

mod common;

mod args;
mod arm64;
mod budget;
mod by;
mod errors;
mod exits;
mod explore;
mod faults;
mod fixtures_selftest;
mod fleet;
mod go;
mod hostile;
mod icall;
mod ijump;
mod inlined;
mod install;
mod kernel;
mod latency;
mod libc;
mod list;
mod matrix;
mod nested;
mod patterns;
mod privilege;
mod probe_time;
mod reach;
mod records;
mod retval;
mod shapes;
mod stacks;
mod why;
mod wide;
