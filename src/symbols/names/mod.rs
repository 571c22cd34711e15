//! Names: demangling (C++, Rust legacy and v0, Go as Go prints it), the
//! function patterns users write and the canonical form both are compared
//! in, and globs. Pure text: reads no object.

pub mod canon;
pub mod demangle;
pub mod glob;
pub mod go;
pub mod pattern;
pub mod syntax;

pub use demangle::{demangle, Lang, Names, Part};
pub use glob::glob_match;
pub use pattern::{quoted, Pattern};
