//! What changes between two plans, in the terms of an nf_tables transaction: sets to create
//! and delete, elements to add to and remove from the sets both plans have, and the targets
//! whose isolation or clauses changed (whose rules are rewritten).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::plan::{AddrSet, Element, Plan, Target};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElementChanges {
    pub added: Vec<Element>,
    pub removed: Vec<Element>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetChange {
    Added(Target),
    /// The new value.
    Changed(Target),
    Removed,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Changes {
    /// New sets, with their elements. A set whose family or kind changed is deleted and
    /// created again (it is in both lists: delete first).
    pub sets_created: BTreeMap<Arc<str>, AddrSet>,
    pub sets_deleted: BTreeSet<Arc<str>>,
    /// Sets in both plans whose elements differ.
    pub elements: BTreeMap<Arc<str>, ElementChanges>,
    pub targets: BTreeMap<IpAddr, TargetChange>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.sets_created.is_empty()
            && self.sets_deleted.is_empty()
            && self.elements.is_empty()
            && self.targets.is_empty()
    }

    /// Whether the change is set elements alone (no set made or removed, no rule rewritten).
    pub fn only_elements(&self) -> bool {
        self.sets_created.is_empty() && self.sets_deleted.is_empty() && self.targets.is_empty()
    }
}

impl Plan {
    /// What turns `old` into `new`.
    pub fn diff(old: &Plan, new: &Plan) -> Changes {
        let mut changes = Changes::default();
        for (name, set) in &old.sets {
            match new.sets.get(name) {
                None => {
                    changes.sets_deleted.insert(name.clone());
                }
                Some(n) if n.family != set.family || n.kind != set.kind => {
                    changes.sets_deleted.insert(name.clone());
                    changes.sets_created.insert(name.clone(), n.clone());
                }
                Some(n) => {
                    let added: Vec<Element> =
                        n.elements.difference(&set.elements).copied().collect();
                    let removed: Vec<Element> =
                        set.elements.difference(&n.elements).copied().collect();
                    if !added.is_empty() || !removed.is_empty() {
                        changes
                            .elements
                            .insert(name.clone(), ElementChanges { added, removed });
                    }
                }
            }
        }
        for (name, set) in &new.sets {
            if !old.sets.contains_key(name) {
                changes.sets_created.insert(name.clone(), set.clone());
            }
        }
        for (ip, t) in &old.targets {
            match new.targets.get(ip) {
                None => {
                    changes.targets.insert(*ip, TargetChange::Removed);
                }
                Some(n) if n != t => {
                    changes
                        .targets
                        .insert(*ip, TargetChange::Changed(n.clone()));
                }
                Some(_) => {}
            }
        }
        for (ip, t) in &new.targets {
            if !old.targets.contains_key(ip) {
                changes.targets.insert(*ip, TargetChange::Added(t.clone()));
            }
        }
        changes
    }
}
