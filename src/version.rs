//! The version string, as `--version`, the man pages and the `--hlog`
//! header say it: below both `cli` and `report`.

/// tachy's version, set by build.rs.
pub const VERSION: &str = env!("TACHY_VERSION");
