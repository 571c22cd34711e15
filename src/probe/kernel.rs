//! Kernel functions: fentry/fexit where the kernel loads them (an instance
//! of the program per function, on the first instance's maps), else a
//! kprobe/kretprobe pair; one clear line where neither works.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use anyhow::{anyhow, bail, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::KprobeOpts;

use super::error::{KernelError, Refusal};
use super::load::{configure, skip_record_maps};
use super::skel::TachySkelBuilder;
use super::Tracer;
use crate::plan::Plan;

impl<'obj> Tracer<'obj> {
    /// Times the plan's kernel functions with fentry/fexit where the kernel
    /// allows (cheapest: a direct call from the function's ftrace site), else
    /// with a kprobe/kretprobe pair; says in one line why neither works.
    pub(super) fn attach_kernel_functions(&mut self, plan: &Plan, verbose: bool) -> Result<()> {
        // Why fentry/fexit is not used for any function (not tried, or
        // refused as a whole: no permission, no support).
        let mut fentry_refused = fentry_unavailable().map(str::to_string);
        let (mut fentries, mut kprobes) = (0, 0);
        for (name, id) in plan.kernel_functions() {
            let mut fentry_failed = fentry_refused.clone();
            if fentry_refused.is_none() {
                match self.attach_fentry(plan, name, id) {
                    Ok(()) => {
                        fentries += 1;
                        continue;
                    }
                    Err(e) => {
                        if verbose {
                            eprintln!("tachy: fentry/fexit on {name}: {}", e.text);
                        }
                        // Other errors are this function's own (not in
                        // BTF, not traceable): it alone goes to kprobes.
                        if e.refuses_all {
                            fentry_refused = Some(e.text.clone());
                        }
                        fentry_failed = Some(e.text);
                    }
                }
            }
            if !crate::kernel::kprobes_available() {
                let fentry = fentry_failed.as_deref().unwrap_or("not tried");
                bail!(
                    "kernel function {name} cannot be traced here: fentry/fexit failed ({fentry}) and this kernel has no kprobes (CONFIG_KPROBES is off); a kernel with CONFIG_KPROBES=y, or one that loads fentry programs (CONFIG_DEBUG_INFO_BTF=y and CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS=y), can; system calls are timed here with syscall:NAME"
                );
            }
            // Exit first, as for fentry/fexit.
            for (prog, ret) in [
                (&self.skel.progs.tachy_kexit, true),
                (&self.skel.progs.tachy_kentry, false),
            ] {
                let opts = KprobeOpts {
                    cookie: id as u64,
                    ..Default::default()
                };
                let link = prog.attach_kprobe_with_opts(ret, name, opts).map_err(|e| {
                    anyhow!("cannot attach a kprobe to kernel function {name}: {e}")
                })?;
                self.links.push(link);
            }
            kprobes += 1;
        }
        self.kernel_with = match (fentries, kprobes) {
            (0, 0) => None,
            (_, 0) => Some("fentry/fexit"),
            (0, _) => Some("kprobes"),
            _ => Some("fentry/fexit, and kprobes where fentry failed"),
        };
        Ok(())
    }

    /// Loads an instance of the program whose fentry and fexit programs
    /// are attached to kernel function `name`, counting as function `id`,
    /// on the maps of the first instance. Only the two links are kept: they
    /// hold the programs, which hold the maps.
    fn attach_fentry(&mut self, plan: &Plan, name: &str, id: u32) -> Result<(), FentryError> {
        let mut storage = MaybeUninit::uninit();
        let mut open = TachySkelBuilder::default()
            .open(&mut storage)
            .map_err(|e| FentryError::of(e, "cannot open the BPF program: "))?;
        configure(&mut open, plan, self.pid, id).map_err(|e| FentryError {
            text: format!("{e:#}"),
            refuses_all: false,
        })?;
        let shared = &self.skel.maps;
        let m = &mut open.maps;
        for (map, from) in [
            (&mut m.kframes, shared.kframes.as_fd()),
            (&mut m.followed, shared.followed.as_fd()),
            (&mut m.threads, shared.threads.as_fd()),
            (&mut m.stats, shared.stats.as_fd()),
            (&mut m.part_hist, shared.part_hist.as_fd()),
            (&mut m.sys_ids, shared.sys_ids.as_fd()),
            (&mut m.sys_start, shared.sys_start.as_fd()),
            // The interval generation the counters are kept under.
            (&mut m.bss, shared.bss.as_fd()),
        ] {
            map.reuse_fd(from)
                .map_err(|e| FentryError::of(e, "cannot share the BPF maps: "))?;
        }
        // Kernel functions make no records (refused with the option).
        skip_record_maps(&mut open).map_err(|e| FentryError {
            text: format!("{e:#}"),
            refuses_all: false,
        })?;
        for mut prog in open.open_object_mut().progs_mut() {
            prog.set_autoload(false);
        }
        for p in [&mut open.progs.tachy_fentry, &mut open.progs.tachy_fexit] {
            p.set_autoload(true);
            p.set_attach_target(0, Some(name.to_string()))
                .map_err(|e| FentryError::of(e, ""))?;
        }
        let skel = open.load().map_err(|e| FentryError::of(e, ""))?;
        // Exit first: a call already under way when the entry attaches
        // then leaves no frame behind. Both or neither are kept.
        let mut links = Vec::with_capacity(2);
        for p in [&skel.progs.tachy_fexit, &skel.progs.tachy_fentry] {
            let link = p.attach_trace().map_err(|e| FentryError::of(e, ""))?;
            links.push(link);
        }
        self.links.extend(links);
        Ok(())
    }
}

/// Why fentry/fexit is not even tried, if it is not: it needs the kernel's
/// BTF. TACHY_NO_FENTRY=1 forces kprobes (to compare the two).
fn fentry_unavailable() -> Option<&'static str> {
    if std::env::var_os("TACHY_NO_FENTRY").is_some() {
        return Some("disabled by TACHY_NO_FENTRY");
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF, /sys/kernel/btf/vmlinux");
    }
    None
}

/// Why fentry/fexit failed on a kernel function.
struct FentryError {
    text: String,
    /// Refused for every function (no permission, no support), not for
    /// this one alone (not in BTF, not traceable).
    refuses_all: bool,
}

impl FentryError {
    /// The error of the libbpf-rs call that just failed.
    fn of(e: libbpf_rs::Error, context: &str) -> FentryError {
        let e = KernelError::last(e);
        FentryError {
            text: format!("{context}{}", short_errno(e.libbpf())),
            refuses_all: e.refusal() == Refusal::NotSupported,
        }
    }
}

/// A libbpf error as the errno it carries ("Operation not permitted"),
/// without libbpf's context.
fn short_errno(e: &libbpf_rs::Error) -> String {
    let s = e.to_string();
    let s = match s.rsplit_once(": ") {
        Some((_, tail)) if !tail.is_empty() => tail,
        _ => &s,
    };
    match s.split_once(" (os error") {
        Some((msg, _)) => msg.to_string(),
        None => s.to_string(),
    }
}
