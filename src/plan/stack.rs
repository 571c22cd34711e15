//! `--stack`: how the user stacks of recorded calls are taken, decided
//! from the objects of the traced functions. The chain of callers starts
//! in the traced function's object; frame pointers are walked in the
//! kernel only where every traced object keeps them, else the stack is
//! copied and unwound by tachy with `.eh_frame`.

use crate::symbols::unwind::keeps_frame_pointers;
use crate::symbols::ElfObject;

/// How a recorded call's stack is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackHow {
    /// The rbp chain, walked by the BPF program (up to 64 frames).
    FramePointers,
    /// 8-12 KiB of the stack above the caller's SP, copied by the BPF
    /// program and unwound by tachy with the objects' `.eh_frame`.
    Copy,
}

impl StackHow {
    /// As the report's header and each record say it.
    pub fn name(self) -> &'static str {
        match self {
            StackHow::FramePointers => "frame pointers",
            StackHow::Copy => "stack copy",
        }
    }

    /// Frame pointers where every object keeps them, else a copy.
    /// `TACHY_STACK_METHOD=fp|copy` overrides it (to measure one against
    /// the other on the same program).
    pub fn decide<'a>(objects: impl IntoIterator<Item = &'a ElfObject>) -> StackHow {
        match std::env::var("TACHY_STACK_METHOD").as_deref() {
            Ok("fp") => return StackHow::FramePointers,
            Ok("copy") => return StackHow::Copy,
            _ => {}
        }
        let mut all = true;
        let mut any = false;
        for o in objects {
            any = true;
            all &= keeps_frame_pointers(o);
        }
        if all && any {
            StackHow::FramePointers
        } else {
            StackHow::Copy
        }
    }
}
