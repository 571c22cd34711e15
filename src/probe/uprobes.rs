//! Attaching the plan's uprobes: one uprobe_multi link per object and
//! program where the kernel has them, one link per probe otherwise; a
//! probe the kernel refuses for its instruction is left out, the others
//! attached.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{anyhow, Context, Result};
use libbpf_rs::skel::Skel;
use libbpf_rs::{Link, UprobeMultiOpts, UprobeOpts};

use super::error::{KernelError, ProcessGone, Refusal};
use super::skel::TachySkel;
use super::Tracer;
use crate::plan::encode::{LinkGroup, Program};
use crate::plan::Plan;

impl<'obj> Tracer<'obj> {
    /// One link per group where the kernel has uprobe_multi, one per probe
    /// otherwise; call-site probes one group per site (`LinkGroup::
    /// per_slot`), kept apart so that a site can be detached alone; those
    /// of the slots `held_back` are kept for later, not attached.
    pub(super) fn attach_uprobes(
        &mut self,
        plan: &Plan,
        groups: &[LinkGroup],
        attached: &AtomicUsize,
        held_back: &std::collections::BTreeSet<u32>,
    ) -> Result<()> {
        // Following forks, probes fire in every process and the BPF side
        // keeps only the followed ones: a fork is not known in advance.
        self.link_pid = match self.pid {
            Some(pid) if !plan.settings.follow && plan.pids.is_empty() => pid as i32,
            _ => -1,
        };
        // The kernel resolves the path it is given from tachy's root: a
        // path under a process's root is opened inside that root first and
        // handed over as this open file.
        let mut held = Vec::with_capacity(plan.objects.len());
        for object in &plan.objects {
            held.push(match crate::target::in_process_root(&object.open_path) {
                Some(_) => Some(
                    crate::target::open_file(&object.open_path)
                        .with_context(|| format!("cannot open {}", object.display.display()))?,
                ),
                None => None,
            });
        }
        self.held = held;
        // In the groups' order (`Program::activation_rank`): function
        // entries go live last, in every object.
        for g in groups {
            for (slot, part) in g.per_slot() {
                if let Some(slot) = slot.filter(|s| held_back.contains(s)) {
                    self.sites.entry(slot).or_default().groups.push(part);
                    continue;
                }
                let links = self.attach_group(plan, &part, attached)?;
                match slot {
                    Some(slot) => {
                        let site = self.sites.entry(slot).or_default();
                        site.groups.push(part);
                        site.links.push((g.program, links));
                    }
                    None => self.links.extend(links),
                }
            }
        }
        Ok(())
    }

    /// Attaches one group's probes: one link where the kernel has
    /// uprobe_multi, one per probe otherwise; the probes the kernel refuses
    /// for their instruction are left out (and listed in `refused`).
    pub(super) fn attach_group(
        &mut self,
        plan: &Plan,
        g: &LinkGroup,
        attached: &AtomicUsize,
    ) -> Result<Vec<Link>> {
        let (Some(object), Some(held)) = (plan.objects.get(g.object), self.held.get(g.object))
        else {
            return Ok(Vec::new());
        };
        let display = object.display.display();
        let fd_path = held
            .as_ref()
            .map(|f| std::path::PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())));
        let path = fd_path.as_deref().unwrap_or(&object.open_path);
        let what = || format!("cannot attach probes to {display}");
        let prog = uprobe_program(&self.skel, g.program)?;
        let link_pid = self.link_pid;
        let mut out = Vec::new();
        if self.multi {
            let attach = |sites: &[(u64, u64)]| {
                let opts = UprobeMultiOpts {
                    retprobe: g.program.is_return(),
                    offsets: sites.iter().map(|s| s.0 as usize).collect(),
                    cookies: sites.iter().map(|s| s.1).collect(),
                    ..Default::default()
                };
                prog.attach_uprobe_multi_with_opts(link_pid, path, "", opts)
                    .map_err(KernelError::last)
            };
            let mut refused = Vec::new();
            let links = attach_dropping_refused(&attach, &g.sites, &mut refused)
                .map_err(attach_error)
                .with_context(what)?;
            out.extend(links);
            attached.fetch_add(g.sites.len() - refused.len(), Ordering::Relaxed);
            self.refused
                .extend(refused.into_iter().map(|offset| (g.object, offset)));
        } else {
            for &(offset, cookie) in &g.sites {
                let opts = UprobeOpts {
                    cookie,
                    retprobe: g.program.is_return(),
                    ..Default::default()
                };
                let link = prog
                    .attach_uprobe_with_opts(link_pid, path, offset as usize, opts)
                    .map_err(KernelError::last);
                match link {
                    Ok(link) => {
                        out.push(link);
                        attached.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if kernel_refused(&e) => self.refused.push((g.object, offset)),
                    Err(e) => return Err(attach_error(e)).with_context(what),
                }
            }
        }
        Ok(out)
    }
}

/// The loaded program that runs probes of `p`.
fn uprobe_program<'a>(skel: &'a TachySkel<'_>, p: Program) -> Result<libbpf_rs::ProgramMut<'a>> {
    skel.object()
        .progs_mut()
        .find(|prog| prog.name() == p.name())
        .with_context(|| format!("the BPF object has no program {}", p.name()))
}

/// Whether the kernel refused a probe for the instruction under it rather
/// than for the process or the caller.
fn kernel_refused(e: &KernelError) -> bool {
    e.refusal() == Refusal::Instruction
}

/// Attaches a batch of (file offset, cookie) sites as one link.
type AttachBatch<'a, L> = dyn Fn(&[(u64, u64)]) -> Result<L, KernelError> + 'a;

/// Attaches `sites` as one link; if the kernel refuses one of them, which
/// fails the whole link, attaches each half the same way, so that only the
/// refused sites are left out (their offsets go to `refused`). A batch of
/// n sites with k refused takes about 2k log2(n) attempts. When every site
/// is refused, the refusal is about the link rather than an instruction:
/// it is the error.
fn attach_dropping_refused<L>(
    attach: &AttachBatch<'_, L>,
    sites: &[(u64, u64)],
    refused: &mut Vec<u64>,
) -> Result<Vec<L>, KernelError> {
    let first = match attach(sites) {
        Ok(link) => return Ok(vec![link]),
        Err(e) if kernel_refused(&e) && sites.len() > 1 => e,
        Err(e) => return Err(e),
    };
    let (a, b) = sites.split_at(sites.len() / 2);
    let mut mine = Vec::new();
    let mut links = bisect(attach, a, &mut mine)?;
    links.extend(bisect(attach, b, &mut mine)?);
    if mine.len() == sites.len() {
        return Err(first);
    }
    refused.extend(mine);
    Ok(links)
}

/// One step of [`attach_dropping_refused`].
fn bisect<L>(
    attach: &AttachBatch<'_, L>,
    sites: &[(u64, u64)],
    refused: &mut Vec<u64>,
) -> Result<Vec<L>, KernelError> {
    if sites.is_empty() {
        return Ok(Vec::new());
    }
    match attach(sites) {
        Ok(link) => Ok(vec![link]),
        Err(e) if kernel_refused(&e) => {
            if let [(offset, _)] = sites {
                refused.push(*offset);
                return Ok(Vec::new());
            }
            let (a, b) = sites.split_at(sites.len() / 2);
            let mut links = bisect(attach, a, refused)?;
            links.extend(bisect(attach, b, refused)?);
            Ok(links)
        }
        Err(e) => Err(e),
    }
}

fn attach_error(e: KernelError) -> anyhow::Error {
    match e.refusal() {
        Refusal::ProcessGone => anyhow::Error::new(ProcessGone),
        _ => anyhow!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch with refused sites attaches all the others in a few
    /// links and names the refused ones; a batch refused whole (every site
    /// refused) is an error, as is any other failure.
    #[test]
    fn refused_sites_are_found_by_halving() {
        let refuse = |bad: Vec<u64>| {
            move |sites: &[(u64, u64)]| -> Result<Vec<u64>, KernelError> {
                if sites.iter().any(|s| bad.contains(&s.0)) {
                    Err(KernelError::of_errno(524))
                } else {
                    Ok(sites.iter().map(|s| s.0).collect())
                }
            }
        };
        let sites: Vec<(u64, u64)> = (0..1000).map(|o| (o * 4, o)).collect();
        let attach = refuse(vec![40, 3000, 3996]);
        let mut refused = Vec::new();
        let links = attach_dropping_refused(&attach, &sites, &mut refused).unwrap();
        assert_eq!(refused, [40, 3000, 3996]);
        let mut attached: Vec<u64> = links.into_iter().flatten().collect();
        attached.sort_unstable();
        assert_eq!(attached.len(), 997);
        assert!(links_len_is_small(&attach, &sites));

        let all = refuse((0..10).map(|o| o * 4).collect());
        let mut refused = Vec::new();
        assert!(attach_dropping_refused(&all, &sites[..10], &mut refused).is_err());
        assert!(refused.is_empty());

        let gone = |_: &[(u64, u64)]| -> Result<(), KernelError> {
            Err(KernelError::of_errno(libc::ESRCH))
        };
        assert!(attach_dropping_refused(&gone, &sites, &mut refused).is_err());
    }

    /// Halving keeps the links few: about two per refused site per level.
    fn links_len_is_small(attach: &AttachBatch<'_, Vec<u64>>, sites: &[(u64, u64)]) -> bool {
        let mut refused = Vec::new();
        let links = attach_dropping_refused(attach, sites, &mut refused).unwrap();
        links.len() <= 2 * refused.len() * 10
    }
}
