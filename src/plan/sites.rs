//! The call sites of `tachy nested`: a probe on each call and one where it
//! returns, in a tree of nodes under the traced functions, drilled down to
//! a depth or into named callees.

use std::rc::Rc;

use anyhow::{bail, Result};

use std::collections::{BTreeSet, HashMap};

use super::inlined::{self, InstanceSite};
use super::{unwind, Plan, ProbeKind, MAX_NODES};
use crate::callsites::{self, Site, SiteKind};
use crate::disasm::{Decoded, JumpOperand, ProbeCost, ProbePoint};
use crate::symbols::{ifunc_note, ElfObject, Function, Pattern};

/// A function reached through the PLT, and the object defining it.
pub type Imported = (Rc<ElfObject>, Function);

/// Where indirect call `site` of `decoded` reads its callee, when its
/// probe can read it there: the callees it reaches are counted per
/// address.
fn callee_read(decoded: &Decoded, site: &Site) -> Option<JumpOperand> {
    if site.kind != SiteKind::Indirect {
        return None;
    }
    let c = decoded.calls.iter().find(|c| c.addr == site.addr)?;
    c.read
        .filter(|op| super::encode::operand_bits(op).is_some())
}

/// What `--expand` names: a callee broken down wherever it is called,
/// or (`CALLER->CALLEE`) the callees an indirect call in CALLER reaches
/// that CALLEE names, each broken down under that call: its sites count
/// only the calls made through it to that callee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expand {
    pub through: Option<Pattern>,
    pub callee: Pattern,
}

impl Expand {
    pub fn parse(text: &str) -> Result<Expand> {
        // `operator->` is a name, not the arrow.
        let arrow = text
            .match_indices("->")
            .map(|(i, _)| i)
            .find(|&i| !text[..i].trim_end().ends_with("operator"));
        let Some(i) = arrow else {
            return Ok(Expand {
                through: None,
                callee: Pattern::parse(text)?,
            });
        };
        let (caller, callee) = (text[..i].trim(), text[i + 2..].trim());
        if caller.is_empty() || callee.is_empty() {
            bail!("{text:?}: CALLER->CALLEE names the callee of CALLER's indirect calls to break down; one side is empty");
        }
        Ok(Expand {
            through: Some(Pattern::parse(caller)?),
            callee: Pattern::parse(callee)?,
        })
    }

    /// As typed.
    pub fn text(&self) -> String {
        match &self.through {
            Some(t) => format!("{}->{}", t.as_str(), self.callee.as_str()),
            None => self.callee.as_str().to_string(),
        }
    }
}

/// The callee of an indirect call whose sites are broken down under it:
/// its start, in the object of its sites, and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Via {
    pub addr: u64,
    pub name: String,
}

/// How far `tachy nested` drills down, and how it names what it finds.
pub struct Drill<'a> {
    /// The functions an imported name (a PLT call) resolves to in the
    /// traced process, when known: one, or, for an IFUNC symbol that is
    /// not resolved yet, each implementation its resolver can return.
    pub import: &'a dyn Fn(&str) -> Vec<Imported>,
    /// Levels of call sites under a traced function.
    pub depth: u32,
    /// Whether a callee (by raw name) is expanded at any level.
    pub expand: &'a dyn Fn(&str) -> bool,
    /// The functions to break down under an indirect call of the function
    /// of this object that starts at this address (`--expand
    /// CALLER->CALLEE`).
    pub through: &'a dyn Fn(&Rc<ElfObject>, u64) -> Vec<Imported>,
}

/// Where planning a traced function's tree is: how to drill down, whether
/// the function is Go code (so are its sites), and the functions expanded
/// on the way to the current one (none is expanded inside itself).
struct Walk<'a, 'b> {
    drill: &'a Drill<'b>,
    go: bool,
    path: Vec<(usize, u64)>,
    /// The next scope's sites are under an indirect call, in this callee.
    via: Option<Via>,
}

/// A call site in the `tachy nested` tree. Its node id is
/// `items.len()` + its index in `Plan::sites`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteNode {
    pub parent: u32,
    /// The probed address this node is timed at (its `ProbeKind::Site`).
    pub slot: u32,
    pub site: Site,
    /// Levels below the traced function (1: its own call sites).
    pub level: u32,
    /// Whether its callee's sites are in the tree too.
    pub expanded: bool,
    /// Its parent is an indirect call, and it is a site of this callee:
    /// it counts only the calls through it to this one.
    pub via: Option<Via>,
}

impl Plan {
    /// Adds the call sites of traced function `root` (already added) and,
    /// to `depth` levels or where `expand` says, those of their callees.
    pub fn add_sites(
        &mut self,
        obj: &Rc<ElfObject>,
        f: &Function,
        root: u32,
        drill: &Drill<'_>,
    ) -> Result<()> {
        let decoded = super::decode_function(obj, f)?;
        let mut walk = Walk {
            drill,
            go: self.items.get(root as usize).is_some_and(|i| i.is_go()),
            path: vec![(self.object_index(obj), f.addr)],
            via: None,
        };
        self.add_sites_of(obj, &decoded, root, 1, &mut walk)
    }

    /// Adds the call sites of the decoded function under node `parent`,
    /// its inlined instances among them.
    /// Adds the call sites inside inlined instance `inst` of `obj`, traced
    /// as `root` (already added): its calls and the instances inside it.
    pub fn add_instance_sites(
        &mut self,
        obj: &Rc<ElfObject>,
        inst: &crate::symbols::elf::inlined::Instance,
        root: u32,
        drill: &Drill<'_>,
    ) -> Result<()> {
        let Some(f) = obj.symbols()?.function_containing(inst.entry) else {
            return Ok(());
        };
        let decoded = super::decode_function(obj, &f)?;
        let inl = inlined::instance_sites(obj, &decoded, f.addr);
        let Some(k) = inl
            .iter()
            .position(|x| x.inst.entry == inst.entry && x.inst.name == inst.name)
        else {
            return Ok(());
        };
        let mut walk = Walk {
            drill,
            go: false,
            path: vec![(self.object_index(obj), f.addr)],
            via: None,
        };
        self.add_scope(obj, &decoded, &inl, Some(k), root, 1, &mut walk)
    }

    fn add_sites_of(
        &mut self,
        obj: &Rc<ElfObject>,
        decoded: &Decoded,
        parent: u32,
        level: u32,
        walk: &mut Walk<'_, '_>,
    ) -> Result<()> {
        let start = decoded.first.as_ref().map_or(0, |i| i.addr);
        let inl = if walk.go {
            Vec::new()
        } else {
            inlined::instance_sites(obj, decoded, start)
        };
        self.add_scope(obj, decoded, &inl, None, parent, level, walk)
    }

    /// Adds the sites of one scope of a decoded function under `parent`:
    /// the whole function (`within` None), or its inlined instance
    /// `inl[within]`. A scope's sites are its calls and the instances
    /// straight inside it; the calls inside those are theirs.
    #[allow(clippy::too_many_arguments)]
    fn add_scope(
        &mut self,
        obj: &Rc<ElfObject>,
        decoded: &Decoded,
        inl: &[InstanceSite],
        within: Option<usize>,
        parent: u32,
        level: u32,
        walk: &mut Walk<'_, '_>,
    ) -> Result<()> {
        let object = self.object_index(obj);
        let (drill, go) = (walk.drill, walk.go);
        let via = walk.via.take();
        let scope = within.map(|w| &inl[w]);
        let mut held: Vec<usize> = (0..inl.len())
            .filter(|&k| Some(k) != within && scope.map_or(true, |s| s.holds(&inl[k])))
            .collect();
        // Probes of one address run in an order the kernel does not
        // promise: an instance whose entry or exit stands where another
        // probe does is no site, and its calls are the sites of the code
        // around it (a nested instance may close where the one around it
        // does: it then ends with it).
        // Outer instances first: they keep an address they share.
        held.sort_by_key(|&k| (inl[k].inst.depth, inl[k].entry));
        let mut claimed: BTreeSet<u64> = BTreeSet::new();
        let mut ends: BTreeSet<u64> = BTreeSet::new();
        held.retain(|&k| {
            let x = &inl[k];
            let taken = |a: u64, exit: bool| {
                claimed.contains(&a)
                    || self.probes.iter().any(|p| {
                        p.object == object && p.vaddr == a && !(exit && self.inlined_end(p.kind))
                    })
            };
            let outside = scope.is_some_and(|s| !s.inside.contains(&x.entry));
            let clash = outside
                || taken(x.entry, false)
                || ends.contains(&x.entry)
                || x.exits.iter().any(|e| taken(e.addr, true));
            if clash {
                return false;
            }
            claimed.insert(x.entry);
            ends.extend(x.exits.iter().map(|e| e.addr));
            true
        });
        let direct: Vec<usize> = held
            .iter()
            .copied()
            .filter(|&k| !held.iter().any(|&j| j != k && inl[j].holds(&inl[k])))
            .collect();
        let in_scope = |a: u64| {
            scope.map_or(true, |s| s.inside.contains(&a))
                && !held.iter().any(|&k| inl[k].inside.contains(&a))
        };
        // Inside an instance, a call where a traced item's probe stands
        // (the instance's own entry) would open before its parent does.
        let items_probe = |a: u64| {
            within.is_some()
                && self.probes.iter().any(|p| {
                    p.object == object
                        && p.vaddr == a
                        && matches!(p.kind, ProbeKind::Entry { .. } | ProbeKind::Exit { .. })
                })
        };
        // Siblings get consecutive ids and slots, in address order, before
        // any is expanded: a site whose call is its previous sibling's
        // return address closes slot - 1 first.
        let mut sites: Vec<Site> = callsites::sites(decoded, obj)
            .into_iter()
            .filter(|site| in_scope(site.addr) && !items_probe(site.addr))
            // A tail jump to unknown code ends the traced call where it
            // jumps (see add_function): nothing to time after it.
            .filter(|site| !(site.kind == SiteKind::Tail && site.callee.is_none()))
            // Go: the prologue's call to morestack, and the jump back to
            // the entry after it, are not calls of the function's body.
            .filter(|site| !(go && super::golang::prologue_site(site)))
            .collect();
        let mut instance_of: HashMap<u64, usize> = HashMap::new();
        for &k in &direct {
            let x = &inl[k];
            instance_of.insert(x.entry, k);
            sites.push(Site {
                addr: x.entry,
                ret: None,
                kind: SiteKind::Inlined,
                callee: None,
                callee_raw: None,
                name: format!("{} [inlined]", x.inst.name),
                location: Some(x.inst.call.clone()),
            });
        }
        let body = decoded.first.as_ref().map_or(0, |f| f.addr);
        sites.sort_by_key(|s| (!(s.addr >= body && s.addr < decoded.body_end), s.addr));
        // Call ends stay off the instances' probes.
        let reserved: BTreeSet<u64> = inl
            .iter()
            .flat_map(|x| std::iter::once(x.entry).chain(x.exits.iter().map(|e| e.addr)))
            .collect();
        // A call the kernel refuses to probe (`data16 call __tls_get_addr`)
        // is left out, with a line saying so.
        let (sites, refused): (Vec<Site>, Vec<Site>) = sites.into_iter().partition(|site| {
            decoded
                .insns
                .iter()
                .find(|i| i.addr == site.addr)
                .map_or(true, |i| i.probeable)
        });
        for site in refused {
            let within = obj
                .symbols()
                .ok()
                .and_then(|ix| ix.function_containing(site.addr))
                .map(|g| format!("{}+{:#x}", g.display_name(), site.addr - g.addr))
                .unwrap_or_else(|| format!("{:#x}", site.addr));
            let text = obj
                .code_from(site.addr, 15)
                .map(|b| crate::disasm::refused_text(obj.arch, b, site.addr))
                .unwrap_or_default();
            self.left_out.push(format!(
                "the call site of {} at {within} in {}: the kernel cannot probe {text}",
                site.name,
                obj.display.display()
            ));
        }
        if self.items.len() + self.sites.len() > PLANNED_AT_MOST {
            // Too big to time already (check_tree_size says so): planning
            // the rest would only take time.
            return Ok(());
        }
        let first = (self.items.len() + self.sites.len()) as u32;
        // Each address is probed once: a function expanded under two
        // parents shares its probes, and the kernel finds a site's node from
        // its slot and the innermost open frame.
        let known = sites
            .first()
            .and_then(|s0| self.slots.iter().position(|x| *x == (object, s0.addr)));
        let first_slot = known.unwrap_or(self.slots.len()) as u32;
        // The previous site ends where this one's call stands.
        let mut merge_prev = false;
        for (k, site) in sites.iter().enumerate() {
            let slot = first_slot + k as u32;
            self.sites.push(SiteNode {
                parent,
                slot,
                site: site.clone(),
                level,
                expanded: false,
                via: via.clone(),
            });
            if known.is_some() {
                continue;
            }
            self.slots.push((object, site.addr));
            if let Some(&w) = instance_of.get(&site.addr) {
                self.add_instance_probes(obj, object, &inl[w], slot)?;
                continue;
            }
            let tail = site.kind == SiteKind::Tail;
            let exit_first = std::mem::take(&mut merge_prev);
            let mut ends_with_parent = false;
            if let Some(ret) = site.ret {
                // A call that cannot return (`_Unwind_Resume`, `abort`) is
                // often followed by a landing pad: nothing ends there.
                let never = if go {
                    super::golang::never_returns(&site.name)
                } else {
                    unwind::never_returns(&site.name)
                };
                if !never {
                    let next_call = sites.get(k + 1).filter(|n| n.ret.is_some()).map(|n| n.addr);
                    match site_end(decoded, ret, next_call, &|a| reserved.contains(&a)) {
                        SiteEnd::NextCall => merge_prev = true,
                        SiteEnd::WithParent => ends_with_parent = true,
                        SiteEnd::At(p) => {
                            self.slot_ends.insert(slot, p.cost);
                            self.push(
                                obj,
                                object,
                                p.addr,
                                ProbeKind::SiteEnd {
                                    slot,
                                    sp_adjust: p.sp_adjust,
                                    cond: None,
                                    go,
                                },
                            )?
                        }
                        SiteEnd::Nowhere => {}
                    }
                }
            }
            self.push(
                obj,
                object,
                site.addr,
                ProbeKind::Site {
                    slot,
                    tail,
                    exit_first,
                    ends_with_parent,
                    go,
                    sp_adjust: 0,
                    inlined: false,
                    reads: callee_read(decoded, site),
                },
            )?;
        }
        for (k, site) in sites.iter().enumerate() {
            let id = first + k as u32;
            // An indirect call reaches the callees named through it, when
            // its probe reads where it goes.
            let through = match callee_read(decoded, site) {
                Some(_) => (drill.through)(obj, decoded.first.as_ref().map_or(0, |i| i.addr)),
                None => Vec::new(),
            };
            let wanted = level < drill.depth
                || site.callee_raw.as_deref().is_some_and(drill.expand)
                || !through.is_empty();
            if !wanted {
                continue;
            }
            // An instance's sites are in the code already decoded.
            if let Some(&w) = instance_of.get(&site.addr) {
                self.sites[id as usize - self.items.len()].expanded = true;
                self.add_scope(obj, decoded, inl, Some(w), id, level + 1, walk)?;
                continue;
            }
            // The callee: a function of this object, or, through the PLT,
            // the one the traced process's libraries define (for an IFUNC
            // symbol, its implementations: their sites are all under this
            // one, and only those of the one the process uses run).
            let callees: Vec<(Rc<ElfObject>, Function)> =
                match (site.kind, site.callee, &site.callee_raw) {
                    (SiteKind::Call | SiteKind::Tail, Some(a), _) => {
                        match obj.symbols()?.function_starting_at(a) {
                            Some(g) => vec![(obj.clone(), g)],
                            None => continue,
                        }
                    }
                    (SiteKind::Plt, _, Some(raw)) => (drill.import)(raw),
                    (SiteKind::Indirect, _, _) => through,
                    _ => continue,
                };
            let indirect = site.kind == SiteKind::Indirect;
            for (gobj, g) in callees {
                let key = (self.object_index(&gobj), g.addr);
                if walk.path.contains(&key) {
                    continue;
                }
                let Ok(gd) = super::decode_function(&gobj, &g) else {
                    continue;
                };
                self.expanded_into(id, &gobj, &g);
                walk.via = indirect.then(|| Via {
                    addr: g.addr,
                    name: g.display_name(),
                });
                walk.path.push(key);
                self.add_sites_of(&gobj, &gd, id, level + 1, walk)?;
                walk.path.pop();
            }
        }
        Ok(())
    }

    /// The probes of inlined instance `x` as the site of `slot`: where it
    /// opens and each way out other than its function's return.
    fn add_instance_probes(
        &mut self,
        obj: &ElfObject,
        object: usize,
        x: &InstanceSite,
        slot: u32,
    ) -> Result<()> {
        let mut cost = None;
        for e in &x.exits {
            self.push(
                obj,
                object,
                e.addr,
                ProbeKind::SiteEnd {
                    slot,
                    sp_adjust: e.sp_adjust,
                    cond: e.cond,
                    go: false,
                },
            )?;
            let c = self.probes.last().map(|p| p.cost);
            cost = cost.max(c);
        }
        if let Some(c) = cost {
            self.slot_ends.insert(slot, c);
        }
        self.push(
            obj,
            object,
            x.entry,
            ProbeKind::Site {
                slot,
                tail: false,
                exit_first: false,
                ends_with_parent: x.exits.is_empty(),
                go: false,
                sp_adjust: x.entry_adjust,
                inlined: true,
                reads: None,
            },
        )
    }

    /// Whether `kind` is the end of an inlined instance's site.
    fn inlined_end(&self, kind: ProbeKind) -> bool {
        let ProbeKind::SiteEnd { slot, .. } = kind else {
            return false;
        };
        self.sites
            .iter()
            .any(|n| n.slot == slot && n.site.kind == SiteKind::Inlined)
    }

    /// Site node `id` is broken down into the sites of `g`, of `gobj`. An
    /// IFUNC's implementation is named as `latency` names it, and the
    /// node, when the process's own is known, after it.
    fn expanded_into(&mut self, id: u32, gobj: &Rc<ElfObject>, g: &Function) {
        let node = &mut self.sites[id as usize - self.items.len()];
        node.expanded = true;
        let Some(i) = &g.ifunc else {
            return;
        };
        if i.resolved {
            node.site.name = format!("{} {}", node.site.name, ifunc_note(true, &g.names.full));
        }
        let object = self.object_index(gobj);
        self.ifunc_callees.push((
            id,
            format!(
                "{} in {} at {:#x}",
                g.display_name(),
                self.objects[object].display.display(),
                g.addr
            ),
        ));
    }
}

/// Nodes planned at most. Past this a tree is refused without being planned
/// to the end (its size is then given as "more than" this).
const PLANNED_AT_MOST: usize = 2 * MAX_NODES;

impl Plan {
    /// Refuses a tree with more nodes (traced functions and call sites) than
    /// the BPF side can time, saying how many it has and, when one fits,
    /// the depth that does.
    pub fn check_tree_size(&self, depth: u32) -> Result<()> {
        let nodes = self.items.len() + self.sites.len();
        if nodes <= MAX_NODES {
            return Ok(());
        }
        let whole = nodes <= PLANNED_AT_MOST;
        let has = if !whole {
            format!("more than {PLANNED_AT_MOST}")
        } else {
            nodes.to_string()
        };
        // The nodes each shallower depth would have (only known when the
        // whole tree was planned: planning goes depth first).
        let fits = whole
            .then(|| {
                (1..depth).rev().find_map(|d| {
                    let n = self.items.len() + self.sites.iter().filter(|s| s.level <= d).count();
                    (n <= MAX_NODES).then_some((d, n))
                })
            })
            .flatten();
        let hint = match fits {
            Some((d, n)) => {
                format!("--depth {d} has {n}, or name the callees to break down with --expand")
            }
            None if depth > 1 && !whole => {
                "lower --depth, or name the callees to break down with --expand".to_string()
            }
            None => "name fewer functions, or fewer callees with --expand".to_string(),
        };
        bail!("the call tree has {has} nodes, more than the {MAX_NODES} tachy can time: {hint}")
    }
}

/// Where a call site's return is observed: at the cheapest probe point of
/// the straight-line code after the call (the kernel emulates `push`,
/// `nop`, branches and calls, and single-steps the rest). That may be the
/// next site's call, which then ends this site before it opens its own, if
/// SP there is SP at the return. The end stays before any address `stop`
/// names (an inlined instance's entry or exit); a call that returns right
/// onto one (the way out of the instance around it) ends with that.
pub(super) fn site_end(
    d: &Decoded,
    ret: u64,
    next_call: Option<u64>,
    stop: &dyn Fn(u64) -> bool,
) -> SiteEnd {
    let usable = |p: &&ProbePoint| !p.is_call || (Some(p.addr) == next_call && p.sp_adjust == 0);
    let mut points = d.probe_points_from(ret);
    if let Some(k) = points.iter().position(|p| stop(p.addr)) {
        if k == 0 && points[0].addr == ret {
            return SiteEnd::WithParent;
        }
        points.truncate(k);
    }
    if let Some(p) = points
        .iter()
        .filter(usable)
        .find(|p| p.cost == ProbeCost::Emulated)
    {
        return if p.is_call {
            SiteEnd::NextCall
        } else {
            SiteEnd::At(*p)
        };
    }
    if d.only_epilogue_from(ret) {
        return SiteEnd::WithParent;
    }
    match points.iter().find(usable) {
        Some(p) if p.is_call => SiteEnd::NextCall,
        Some(p) => SiteEnd::At(*p),
        None => SiteEnd::Nowhere,
    }
}

/// Where a call site ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SiteEnd {
    /// A probe of its own here.
    At(ProbePoint),
    /// The next site's call ends it before opening its own.
    NextCall,
    /// Only the function's epilogue follows: it ends when the function does.
    WithParent,
    /// Nowhere (it never returns, or nothing there can be probed).
    Nowhere,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disasm::{decode, Range};

    /// A plan of one traced function with `per_level[l]` sites at level
    /// l + 1.
    fn plan_with(per_level: &[usize]) -> Plan {
        let mut plan = Plan::default();
        plan.add_syscall("read", 0);
        for (l, &n) in per_level.iter().enumerate() {
            for _ in 0..n {
                plan.sites.push(SiteNode {
                    parent: 0,
                    slot: 0,
                    site: Site {
                        addr: 0,
                        ret: None,
                        kind: SiteKind::Call,
                        callee: None,
                        callee_raw: None,
                        name: "f".into(),
                        location: None,
                    },
                    level: l as u32 + 1,
                    expanded: false,
                    via: None,
                });
            }
        }
        plan
    }

    /// A tree too big says how big, the limit, and the depth that fits.
    #[test]
    fn tree_size_is_checked_with_a_depth_that_fits() {
        assert!(plan_with(&[40, 4055]).check_tree_size(2).is_ok());
        let err = |p: Plan, depth| p.check_tree_size(depth).unwrap_err().to_string();
        assert_eq!(
            err(plan_with(&[24, 488, 1794, 3589]), 4),
            "the call tree has 5896 nodes, more than the 4096 tachy can time: --depth 3 has 2307, \
             or name the callees to break down with --expand"
        );
        assert_eq!(
            err(plan_with(&[4000, 4000]), 2),
            "the call tree has 8001 nodes, more than the 4096 tachy can time: --depth 1 has \
             4001, or name the callees to break down with --expand"
        );
        assert_eq!(
            err(plan_with(&[5000, 10]), 2),
            "the call tree has 5011 nodes, more than the 4096 tachy can time: name fewer \
             functions, or fewer callees with --expand"
        );
        assert_eq!(
            err(plan_with(&[24, 488, 8000]), 3),
            "the call tree has more than 8192 nodes, more than the 4096 tachy can time: lower \
             --depth, or name the callees to break down with --expand"
        );
        assert_eq!(
            err(plan_with(&[5000]), 1),
            "the call tree has 5001 nodes, more than the 4096 tachy can time: name fewer \
             functions, or fewer callees with --expand"
        );
    }

    /// The kernel refuses a probe on an instruction with a CS prefix (the
    /// padding `cs nopw` that follows a call in libsqlite3): attaching to a
    /// running process then fails with ENOTSUPP.
    #[test]
    fn probe_point_skips_segment_prefixed_return_addresses() {
        // call 0x2000; cs nopw 0x0(%rax,%rax,1); ds nop; push %rax; ret
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x3e, 0x90, 0x50, 0xc3,
        ];
        let d = decode(&[Range {
            addr: 0x1000,
            bytes: &code,
        }])
        .unwrap();
        match site_end(&d, 0x1005, None, &|_| false) {
            SiteEnd::At(p) => assert_eq!((p.addr, p.sp_adjust), (0x1011, 0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn probe_point_skips_lock_prefixed_return_addresses() {
        // call 0x2000; lock addq $1,0x10(%rip); push %rax; ret
        let code = [
            0xe8, 0xfb, 0x0f, 0x00, 0x00, 0xf0, 0x48, 0x83, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01,
            0x50, 0xc3,
        ];
        let d = decode(&[Range {
            addr: 0x1000,
            bytes: &code,
        }])
        .unwrap();
        let at = |a| match site_end(&d, a, None, &|_| false) {
            SiteEnd::At(p) => Some((p.addr, p.sp_adjust)),
            _ => None,
        };
        assert_eq!(at(0x1005), Some((0x100e, 0)));
        assert_eq!(at(0x100e), Some((0x100e, 0)));
        // Only the `ret` follows: the site ends with the function.
        assert_eq!(site_end(&d, 0x100f, None, &|_| false), SiteEnd::WithParent);
    }

    #[test]
    fn expand_splits_at_the_arrow_but_not_in_operator_arrow() {
        use super::Expand;
        let e = Expand::parse("dispatch->slow_b").unwrap();
        assert_eq!(e.through.as_ref().map(|p| p.as_str()), Some("dispatch"));
        assert_eq!(e.callee.as_str(), "slow_b");
        assert_eq!(e.text(), "dispatch->slow_b");
        let e = Expand::parse("Ptr::operator->").unwrap();
        assert!(e.through.is_none());
        let e = Expand::parse("Ptr::operator->->ns::run").unwrap();
        assert_eq!(
            e.through.as_ref().map(|p| p.as_str()),
            Some("Ptr::operator->")
        );
        assert_eq!(e.callee.as_str(), "ns::run");
        assert!(Expand::parse("dispatch->").is_err());
        assert!(Expand::parse(" -> x").is_err());
    }
}
