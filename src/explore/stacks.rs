//! The profile's stacks are unwound and named by the user-stack unwinder
//! that `--stack` records share (`symbols::unwind`).

pub use crate::symbols::unwind::{Frame, Stacks};
