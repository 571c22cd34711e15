//! A plan grown while it is attached: the nodes of a wider plan of the
//! same traced functions (more callees broken down) added to it, its own
//! ids, slots and objects unchanged, so that what the kernel counts under
//! them goes on. Pure, as the rest of the plan.

use std::collections::{BTreeSet, HashMap};

use super::{Plan, Probe, ProbeKind};

impl Plan {
    /// This plan with the call sites of `wider` it does not have added
    /// after its own: `wider` plans the same items with more callees
    /// expanded (`--expand`), so each node of this plan is one of
    /// `wider`'s, found by its parent and its slot's address, and keeps
    /// its id and slot; the new nodes, slots and objects follow, in
    /// `wider`'s order (a parent before its sites, the sites of one
    /// function on consecutive slots). The probes are `wider`'s.
    /// Err says why `wider` cannot be had this way (another item, a node
    /// or probe of this plan it does not have, a probe moved): it is
    /// then planned afresh.
    pub fn grown(&self, wider: &Plan) -> Result<Plan, String> {
        if self.items != wider.items {
            return Err("the traced functions differ".into());
        }
        let mut out = self.clone();
        let objects: Vec<usize> = wider
            .objects
            .iter()
            .map(|o| match out.objects.iter().position(|x| x == o) {
                Some(i) => i,
                None => {
                    out.objects.push(o.clone());
                    out.objects.len() - 1
                }
            })
            .collect();
        let first_slot = self.slots.len() as u32;
        let known: HashMap<(usize, u64), u32> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, &s)| (s, i as u32))
            .collect();
        let mut next = first_slot;
        let slots: Vec<u32> = wider
            .slots
            .iter()
            .map(|&(o, a)| {
                let key = (objects[o], a);
                match known.get(&key) {
                    Some(&s) => s,
                    None => {
                        out.slots.push(key);
                        next += 1;
                        next - 1
                    }
                }
            })
            .collect();
        let items = self.items.len() as u32;
        let mut node_of: HashMap<(u32, u32), u32> = self
            .site_ids()
            .map(|(id, x)| ((x.parent, x.slot), id))
            .collect();
        let mut ids: Vec<u32> = (0..items).collect();
        let mut matched = 0;
        for (_, x) in wider.site_ids() {
            let mut node = x.clone();
            node.parent = *ids
                .get(x.parent as usize)
                .ok_or("a site before its parent")?;
            node.slot = slots[x.slot as usize];
            let key = (node.parent, node.slot);
            match node_of.get(&key) {
                Some(&id) => {
                    let mine = &mut out.sites[(id - items) as usize];
                    if mine.level != node.level || mine.site.addr != node.site.addr {
                        return Err("a call site moved".into());
                    }
                    *mine = node;
                    matched += 1;
                    ids.push(id);
                }
                None => {
                    let id = out.ids();
                    out.sites.push(node);
                    node_of.insert(key, id);
                    ids.push(id);
                }
            }
        }
        if matched != self.sites.len() {
            return Err("a call site of the plan is not in the wider one".into());
        }
        let probes: BTreeSet<Probe> = wider
            .probes
            .iter()
            .map(|p| Probe {
                object: objects[p.object],
                kind: with_slot(p.kind, &slots),
                ..p.clone()
            })
            .collect();
        // A site ended by the next one's call needs that call on the next
        // slot.
        for p in &wider.probes {
            if let ProbeKind::Site {
                slot,
                exit_first: true,
                ..
            } = p.kind
            {
                let (s, prev) = (slots[slot as usize], slot.checked_sub(1));
                if prev.map(|v| slots[v as usize] + 1) != Some(s) {
                    return Err("a site's end moved off the next slot".into());
                }
            }
        }
        let mine: BTreeSet<&Probe> = self.probes.iter().collect();
        for p in &probes {
            if mine.contains(p) {
                continue;
            }
            match p.kind {
                ProbeKind::Site { slot, .. } | ProbeKind::SiteEnd { slot, .. }
                    if slot >= first_slot =>
                {
                    out.probes.push(p.clone())
                }
                _ => return Err("a probe of an attached site or function changed".into()),
            }
        }
        for (&slot, &cost) in &wider.slot_ends {
            out.slot_ends.insert(slots[slot as usize], cost);
        }
        out.ifunc_callees = wider
            .ifunc_callees
            .iter()
            .map(|(id, what)| (ids[*id as usize], what.clone()))
            .collect();
        out.left_out = wider.left_out.clone();
        out.finish();
        if out.probes.iter().cloned().collect::<BTreeSet<Probe>>() != probes {
            return Err("the probes differ from the wider plan's".into());
        }
        Ok(out)
    }
}

/// Probe kind `k`, its slot (a call site's) renumbered by `slots`.
fn with_slot(mut k: ProbeKind, slots: &[u32]) -> ProbeKind {
    if let ProbeKind::Site { slot, .. } | ProbeKind::SiteEnd { slot, .. } = &mut k {
        *slot = slots[*slot as usize];
    }
    k
}

#[cfg(test)]
mod tests {
    use super::super::{ObjectRef, Settings, SiteNode};
    use super::*;
    use crate::callsites::{Site, SiteKind};
    use crate::disasm::ProbeCost;

    /// A plan of one traced item and `sites` as (parent, slot's address,
    /// whether its call ends the site before it), slots in order of first
    /// use.
    fn plan(sites: &[(u32, u64, bool)]) -> Plan {
        let mut p = Plan::new(Settings::default());
        p.objects.push(ObjectRef {
            display: "/bin/app".into(),
            open_path: "/bin/app".into(),
        });
        p.add_syscall("read", 0);
        for &(parent, addr, exit_first) in sites {
            let slot = p.slots.len() as u32;
            p.slots.push((0, addr));
            p.sites.push(SiteNode {
                parent,
                slot,
                site: Site {
                    addr,
                    ret: Some(addr + 5),
                    kind: SiteKind::Call,
                    callee: None,
                    callee_raw: None,
                    name: format!("f{addr:x}"),
                    location: None,
                },
                level: if parent == 0 { 1 } else { 2 },
                expanded: false,
                via: None,
            });
            p.probes.push(Probe {
                object: 0,
                vaddr: addr,
                offset: addr,
                kind: ProbeKind::Site {
                    slot,
                    tail: false,
                    exit_first,
                    ends_with_parent: false,
                    go: false,
                    sp_adjust: 0,
                    inlined: false,
                    reads: None,
                },
                cost: ProbeCost::Emulated,
            });
        }
        p.finish();
        p
    }

    /// The callee of site 1 broken down: its two sites come before site
    /// 2's in the wider plan, after every site of the grown one, with ids
    /// and slots of their own; the others keep theirs.
    #[test]
    fn new_sites_come_after_the_old_ones() {
        let old = plan(&[(0, 0x10, false), (0, 0x20, false), (2, 0x100, false)]);
        let wider = plan(&[
            (0, 0x10, false),
            (0, 0x20, false),
            (1, 0x200, false),
            (1, 0x205, true),
            (2, 0x100, false),
        ]);
        let g = old.grown(&wider).expect("grown");
        let nodes: Vec<(u32, u32, u64)> = g
            .sites
            .iter()
            .map(|x| (x.parent, x.slot, x.site.addr))
            .collect();
        assert_eq!(
            nodes,
            [
                (0, 0, 0x10),
                (0, 1, 0x20),
                (2, 2, 0x100),
                (1, 3, 0x200),
                (1, 4, 0x205)
            ]
        );
        assert_eq!(g.children(1), [4, 5]);
        assert_eq!(g.children(2), [3]);
        assert_eq!(g.probes.len(), 5);
        assert!(g.probes.iter().any(|p| matches!(
            p.kind,
            ProbeKind::Site {
                slot: 4,
                exit_first: true,
                ..
            }
        )));
        // A site of the plan the wider one has not: planned afresh.
        let narrower = plan(&[(0, 0x10, false), (0, 0x20, false)]);
        assert!(old.grown(&narrower).is_err());
    }
}
