//! The kernel's refusals, told apart by the errno they carry: which probe
//! the kernel will not place (left out, the others attached), a process
//! gone while probes were being attached, a feature refused to everyone
//! here. Never by the text of a message.

use std::fmt;

/// The kernel's ENOTSUPP (not the C library's ENOTSUP): returned by the
/// x86 uprobe decoder for an instruction it will not probe.
const ENOTSUPP: i32 = 524;

/// What a refusal means for tachy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The instruction under a probe: ENOTSUPP from the x86 uprobe
    /// decoder, ENOEXEC when it cannot decode it, EINVAL for an address it
    /// will not patch. Only that probe is left out.
    Instruction,
    /// The process exited (ESRCH).
    ProcessGone,
    /// Refused to every function or program here: no permission (EPERM,
    /// EACCES) or not supported by this kernel (EOPNOTSUPP, ENOSYS).
    NotSupported,
    /// Anything else.
    Other,
}

impl Refusal {
    fn of_errno(errno: i32) -> Refusal {
        match errno {
            ENOTSUPP | libc::ENOEXEC | libc::EINVAL => Refusal::Instruction,
            libc::ESRCH => Refusal::ProcessGone,
            libc::EOPNOTSUPP | libc::ENOSYS | libc::EPERM | libc::EACCES => Refusal::NotSupported,
            _ => Refusal::Other,
        }
    }
}

/// A libbpf-rs error with the errno it carries. libbpf-rs keeps the errno
/// inside its error without a way to read it back (its `ErrorKind` has no
/// kind for ESRCH, ENOEXEC, ENOTSUPP or EOPNOTSUPP); libbpf leaves it in
/// `errno` when a call fails, so [`KernelError::last`] reads it right
/// after the call and keeps it when it agrees with the error's kind.
#[derive(Debug)]
pub struct KernelError {
    errno: Option<i32>,
    error: libbpf_rs::Error,
}

impl KernelError {
    /// The error of the libbpf-rs call that just failed.
    pub fn last(error: libbpf_rs::Error) -> KernelError {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|&n| n > 0 && libbpf_rs::Error::from_raw_os_error(n).kind() == error.kind());
        KernelError { errno, error }
    }

    /// An error of a known errno.
    #[cfg(test)]
    pub fn of_errno(errno: i32) -> KernelError {
        KernelError {
            errno: Some(errno),
            error: libbpf_rs::Error::from_raw_os_error(errno),
        }
    }

    pub fn refusal(&self) -> Refusal {
        match self.errno {
            Some(n) => Refusal::of_errno(n),
            None => match self.error.kind() {
                libbpf_rs::ErrorKind::PermissionDenied | libbpf_rs::ErrorKind::Unsupported => {
                    Refusal::NotSupported
                }
                _ => Refusal::Other,
            },
        }
    }

    pub fn libbpf(&self) -> &libbpf_rs::Error {
        &self.error
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// The traced process exited while probes were being attached: callers
/// tell it from other failures with `downcast_ref::<ProcessGone>()`.
#[derive(Debug)]
pub struct ProcessGone;

impl fmt::Display for ProcessGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the process exited while probes were being attached")
    }
}

impl std::error::Error for ProcessGone {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_by_errno() {
        for (errno, want) in [
            (ENOTSUPP, Refusal::Instruction),
            (libc::ENOEXEC, Refusal::Instruction),
            (libc::EINVAL, Refusal::Instruction),
            (libc::ESRCH, Refusal::ProcessGone),
            (libc::EOPNOTSUPP, Refusal::NotSupported),
            (libc::EPERM, Refusal::NotSupported),
            (libc::EACCES, Refusal::NotSupported),
            (libc::ENOMEM, Refusal::Other),
        ] {
            assert_eq!(
                KernelError::of_errno(errno).refusal(),
                want,
                "errno {errno}"
            );
        }
    }

    /// The errno libbpf leaves is read back, and kept only when it is the
    /// error's: an errno of another kind is not taken for it.
    #[test]
    fn errno_is_read_after_the_call() {
        let set = |n: i32| {
            // SAFETY: errno is this thread's; writing it is what libbpf does.
            unsafe { *libc::__errno_location() = n };
        };
        set(libc::ESRCH);
        let e = KernelError::last(libbpf_rs::Error::from_raw_os_error(libc::ESRCH));
        assert_eq!(e.refusal(), Refusal::ProcessGone);
        set(libc::EPERM);
        let e = KernelError::last(libbpf_rs::Error::from_raw_os_error(libc::EINVAL));
        assert_eq!(e.refusal(), Refusal::Other);
    }
}
