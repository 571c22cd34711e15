//! The plan's nodes as one tree: an id below `items.len()` is a traced
//! item (a root), one above it a call site of `tachy nested`. Only this
//! file knows how ids split; the rest of the program asks [`Plan::node`],
//! [`Plan::children`] and [`Plan::root_of`].

use super::{Item, Plan, SiteNode};

/// One node of the plan, by id.
#[derive(Clone, Copy, Debug)]
pub enum Node<'a> {
    /// A traced function, system call or kernel function.
    Item(&'a Item),
    /// A call site (`tachy nested`).
    Site(&'a SiteNode),
}

impl Node<'_> {
    /// The name reports show.
    pub fn name(&self) -> &str {
        match self {
            Node::Item(i) => &i.name,
            Node::Site(x) => &x.site.name,
        }
    }
}

/// Each node's call sites and each site's traced function, computed once
/// when the plan is finished.
#[derive(Clone, Debug, Default)]
pub(super) struct Tree {
    /// Per id: the ids of its call sites, in plan order.
    children: Vec<Vec<u32>>,
    /// Per site (index in `Plan::sites`): the id of its traced function.
    roots: Vec<u32>,
}

impl Tree {
    /// Parents come before their sites in `sites`.
    pub(super) fn new(items: usize, sites: &[SiteNode]) -> Tree {
        let mut children: Vec<Vec<u32>> = vec![Vec::new(); items + sites.len()];
        let mut roots: Vec<u32> = Vec::with_capacity(sites.len());
        for (i, x) in sites.iter().enumerate() {
            let id = (items + i) as u32;
            if let Some(list) = children.get_mut(x.parent as usize) {
                list.push(id);
            }
            let parent = x.parent as usize;
            let root = match parent.checked_sub(items) {
                None => x.parent,
                Some(p) => roots.get(p).copied().unwrap_or(x.parent),
            };
            roots.push(root);
        }
        Tree { children, roots }
    }
}

impl Plan {
    /// The node `id` names, if any.
    pub fn node(&self, id: u32) -> Option<Node<'_>> {
        let id = id as usize;
        match id.checked_sub(self.items.len()) {
            None => self.items.get(id).map(Node::Item),
            Some(i) => self.sites.get(i).map(Node::Site),
        }
    }

    /// The call site of `id`, if `id` is one.
    pub fn site(&self, id: u32) -> Option<&SiteNode> {
        match self.node(id)? {
            Node::Site(x) => Some(x),
            Node::Item(_) => None,
        }
    }

    /// Whether the probe of site `slot` reads the callee of its indirect
    /// call (counted per callee).
    pub fn reads_callee(&self, slot: u32) -> bool {
        self.probes.iter().any(|p| {
            matches!(p.kind, super::ProbeKind::Site { slot: s, reads: Some(_), .. } if s == slot)
        })
    }

    /// The ids of the call sites under node `id`, in plan order (none
    /// before the plan is finished).
    pub fn children(&self, id: u32) -> &[u32] {
        self.tree
            .children
            .get(id as usize)
            .map_or(&[], |v| v.as_slice())
    }

    /// The traced item node `id` belongs to: itself for an item, the
    /// function whose tree holds it for a call site.
    pub fn root_of(&self, id: u32) -> u32 {
        match (id as usize).checked_sub(self.items.len()) {
            None => id,
            Some(i) => self.tree.roots.get(i).copied().unwrap_or(id),
        }
    }

    /// The index in `Plan::sites` of call site `id` (the place of its
    /// entries in per-site tables).
    pub fn site_index(&self, id: u32) -> Option<usize> {
        let i = (id as usize).checked_sub(self.items.len())?;
        (i < self.sites.len()).then_some(i)
    }

    /// The ids of the call sites, in plan order, with their nodes.
    pub fn site_ids(&self) -> impl Iterator<Item = (u32, &SiteNode)> + '_ {
        let first = self.items.len() as u32;
        (first..).zip(&self.sites)
    }
}
