//! Helpers shared by the fuzz targets (each includes this with `mod common;`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_dir() {
    if let Some(d) = DIR.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// A directory of this process's own under `$TMPDIR` (or /tmp), made on
/// first use and removed when the process exits normally. A crash leaves it
/// behind: `smoke.sh` and `make fuzz` point TMPDIR at a directory they remove.
pub fn dir(target: &str) -> &'static Path {
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("tachy-fuzz-{target}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("cannot make {}: {e}", d.display()));
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe { libc::atexit(remove_dir) };
        d
    })
}

/// Writes `data` to this process's input file (the same path every run,
/// truncated and rewritten) and returns its path.
pub fn write_input(target: &str, data: &[u8]) -> PathBuf {
    let p = dir(target).join("input");
    std::fs::write(&p, data).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
    p
}

/// Up to `n` u64s read from the last `8 * n` bytes of `data` (for
/// addresses the fuzzer can steer without a format of its own).
pub fn tail_u64s(data: &[u8], n: usize) -> Vec<u64> {
    let k = (data.len() / 8).min(n);
    data[data.len() - 8 * k..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}
