//! Call sites detached and attached again while the run goes on
//! (`--max-overhead`): each site's probes are links of their own
//! (`LinkGroup::per_slot`), so that dropping them removes the site's
//! breakpoints from the target (a flag the BPF side checked would leave
//! the trap, which is the cost) and leaves every other count as it was.

use std::sync::atomic::AtomicUsize;

use anyhow::{anyhow, bail, Result};
use libbpf_rs::{Link, MapCore, MapFlags};

use super::Tracer;
use crate::plan::encode::{self, LinkGroup, Program};
use crate::plan::{Plan, ProbeTime};

/// Closes links on a thread of its own; dropped, it closes what is left
/// and waits for it to be done.
#[derive(Default)]
pub(super) struct Reaper {
    tx: Option<std::sync::mpsc::Sender<Vec<Link>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reaper {
    pub(super) fn close(&mut self, links: Vec<Link>) {
        if self.tx.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Vec<Link>>();
            self.thread = Some(std::thread::spawn(move || {
                while let Ok(mut links) = rx.recv() {
                    while let Ok(more) = rx.try_recv() {
                        links.extend(more);
                    }
                    close_side_by_side(links);
                }
            }));
            self.tx = Some(tx);
        }
        if let Some(tx) = &self.tx {
            // The thread is gone only if it panicked: close them here.
            if let Err(e) = tx.send(links) {
                drop(e.0);
            }
        }
    }
}

/// Closes `links` on threads of their own, up to 64 at a time. Closing a
/// uprobe link waits for the kernel's RCU grace periods (66 ms a link on
/// these machines): one after another, shedding the 55 hot sites of
/// sqlite3_step at depth 2 (110 links) took 22 s, all the while their
/// breakpoints still trapped; closed side by side, the waits overlap.
fn close_side_by_side(mut links: Vec<Link>) {
    const WIDTH: usize = 64;
    while !links.is_empty() {
        let wave: Vec<Link> = links.drain(..links.len().min(WIDTH)).collect();
        std::thread::scope(|s| {
            for link in wave {
                // Where no thread can be started, the closure, and the
                // link in it, is dropped here: closed all the same.
                let _ = std::thread::Builder::new().spawn_scoped(s, move || drop(link));
            }
        });
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The probes of one call site (one slot): how they were attached, and
/// the links that hold them while they are.
#[derive(Default)]
pub(super) struct SiteLinks {
    pub groups: Vec<LinkGroup>,
    pub links: Vec<(Program, Vec<Link>)>,
}

impl<'obj> Tracer<'obj> {
    /// Takes `plan`, grown from the one attached by call sites of slots
    /// from `first_slot` on (`Plan::grown`: the ids and slots before them
    /// unchanged), while the run goes on: the new sites' probes are kept
    /// as those held back at the start (attached by
    /// [`Tracer::resume_site`]), its ids are read from now on, and the
    /// probes' own time of every id is `probe_time`. Fails, changing
    /// nothing, when the counters have no room for its ids or a program
    /// its sites need is not loaded ([`super::Live::room`]).
    pub fn grow(&mut self, plan: &Plan, first_slot: u32, probe_time: &[ProbeTime]) -> Result<()> {
        if plan.ids() > self.nfuncs {
            bail!(
                "the counters have room for {} timed functions and call sites, not {}",
                self.nfuncs,
                plan.ids()
            );
        }
        let loaded = self.loaded_programs();
        let mut parts = Vec::new();
        for g in encode::link_groups(plan) {
            for (slot, part) in g.per_slot() {
                match slot {
                    Some(slot) if slot >= first_slot => {
                        if !loaded.iter().any(|p| p == part.program.name()) {
                            bail!("the program {} is not loaded", part.program.name());
                        }
                        parts.push((slot, part));
                    }
                    _ => {}
                }
            }
        }
        for (slot, part) in parts {
            self.sites.entry(slot).or_default().groups.push(part);
        }
        self.ids = plan.ids();
        self.filtered.resize(plan.ids() as usize, false);
        self.rec_lost_seen.resize(plan.ids().max(1) as usize, 0);
        self.fill_probe_time(probe_time)
    }

    /// Stops timing call site `slot` at once: its nodes leave the map the
    /// BPF side finds them in, so its call opens no frame from now on. Its
    /// probes stay until detached ([`Tracer::detach_site_calls`], then
    /// [`Tracer::detach_site_ends`] once the calls in flight have ended).
    pub fn stop_site(&mut self, plan: &Plan, slot: u32) {
        for (key, _) in encode::site_nodes(plan)
            .into_iter()
            .filter(|&(key, _)| (key >> 32) as u32 == slot)
        {
            // Absent already (stopped before): nothing to do.
            let _ = self.skel.maps.site_nodes.delete(&key.to_ne_bytes());
        }
    }

    /// Detaches the probe on the call of site `slot`.
    pub fn detach_site_calls(&mut self, slot: u32) {
        self.detach_site(slot, |p| matches!(p, Program::Site | Program::GoSite));
    }

    /// Detaches the probes that end site `slot` (its calls in flight have
    /// ended by now or are counted as left).
    pub fn detach_site_ends(&mut self, slot: u32) {
        self.detach_site(slot, |p| matches!(p, Program::SiteEnd | Program::GoSiteEnd));
    }

    /// Detaches the links of site `slot` whose program is `which`. The
    /// kernel takes tens of milliseconds to remove a link's breakpoints
    /// (more on a busy machine): the links are closed by a thread of their
    /// own, in the order given, and the run loop goes on.
    fn detach_site(&mut self, slot: u32, which: impl Fn(Program) -> bool) {
        let Some(site) = self.sites.get_mut(&slot) else {
            return;
        };
        let (gone, kept) = std::mem::take(&mut site.links)
            .into_iter()
            .partition(|(p, _)| which(*p));
        site.links = kept;
        let links: Vec<Link> = gone.into_iter().flat_map(|(_, l)| l).collect();
        if !links.is_empty() {
            self.reaper.close(links);
        }
    }

    /// Times site `slot` (again, or from now on when it was held back at
    /// the start): its probes attached as at the start (the ends first,
    /// then the call), then its nodes put back.
    pub fn resume_site(&mut self, plan: &Plan, slot: u32) -> Result<()> {
        self.attach_site_probes(plan, slot)?;
        self.time_site(plan, slot)
    }

    /// Attaches every probe of site `slot` not attached now (the ends
    /// first, then the call), its nodes left out: it times nothing until
    /// [`Tracer::time_site`], so that sites attached together, each
    /// ended by the next one's call, start timing once all are in.
    pub fn attach_site_probes(&mut self, plan: &Plan, slot: u32) -> Result<()> {
        self.attach_site(plan, slot, |_| true)
    }

    /// Puts the nodes of site `slot`, whose probes are attached, back in
    /// the map the BPF side finds them in: its calls are timed from now.
    pub fn time_site(&mut self, plan: &Plan, slot: u32) -> Result<()> {
        for (key, node) in encode::site_nodes(plan)
            .into_iter()
            .filter(|&(key, _)| (key >> 32) as u32 == slot)
        {
            self.skel
                .maps
                .site_nodes
                .update(&key.to_ne_bytes(), &node, MapFlags::ANY)
                .map_err(|e| anyhow!("cannot time a call site again: {e}"))?;
        }
        Ok(())
    }

    /// Attaches the probe on the call of site `slot` alone, its nodes left
    /// out: it then only ends the site before it (`exit_first`), which is
    /// timed while this one is not.
    pub fn attach_site_calls(&mut self, plan: &Plan, slot: u32) -> Result<()> {
        self.attach_site(plan, slot, |p| matches!(p, Program::Site | Program::GoSite))
    }

    /// Attaches the probes of site `slot` whose program is `which` and
    /// that are not attached now, in their order of activation.
    fn attach_site(
        &mut self,
        plan: &Plan,
        slot: u32,
        which: impl Fn(Program) -> bool,
    ) -> Result<()> {
        let Some(site) = self.sites.get(&slot) else {
            return Ok(());
        };
        let attached: Vec<Program> = site.links.iter().map(|(p, _)| *p).collect();
        let mut groups: Vec<LinkGroup> = site
            .groups
            .iter()
            .filter(|g| which(g.program) && !attached.contains(&g.program))
            .cloned()
            .collect();
        groups.sort_by_key(|g| g.program.activation_rank());
        let refused = self.refused.len();
        for g in groups {
            let links = self.attach_group(plan, &g, &AtomicUsize::new(0))?;
            if let Some(site) = self.sites.get_mut(&slot) {
                site.links.push((g.program, links));
            }
        }
        // Refused at the start already, and said then.
        self.refused.truncate(refused);
        Ok(())
    }
}
