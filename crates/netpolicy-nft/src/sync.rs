//! The table's content from a plan: written whole in one transaction (first sync, or after a
//! failure), or changed by the diff from the plan last committed.

use std::net::IpAddr;

use netkit::netfilter::nf_tables::named_set::NamedSet;
use netkit::netfilter::nf_tables::{Batch, Family as NftFamily, Socket, Table};
use netpolicy::{
    AddrSet, Direction, Family, Isolation, Plan, PodKey, SetKind, Target, TargetChange,
};

use crate::error::Error;
use crate::layout::{self, FIRST_SET_ID, TABLE};
use crate::rules;

/// What a sync sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// The whole table was written (replacing whatever was there).
    pub full: bool,
    /// Messages of the transaction (without BATCH_BEGIN/END); 0: nothing changed.
    pub messages: usize,
    /// Size of the transaction's datagram.
    pub bytes: usize,
    /// Set and map elements added and removed (an interval set rewritten counts all of its
    /// new elements as added).
    pub elements_added: usize,
    pub elements_removed: usize,
    /// Chains created or rewritten.
    pub chains_written: usize,
}

const DIRECTIONS: [Direction; 2] = [Direction::Ingress, Direction::Egress];

/// The table in the kernel, as far as this process knows it.
#[derive(Debug, Default)]
pub struct PolicyTable {
    /// The last plan committed (without its `pods`, which the table does not hold); `None`
    /// before the first commit and after a failed one: the next sync writes it all.
    applied: Option<Plan>,
}

impl PolicyTable {
    pub fn new() -> PolicyTable {
        PolicyTable::default()
    }

    /// Makes the kernel's table hold `plan`. The first call (and the call after any failed
    /// commit) writes the whole table in one transaction that also removes whatever table of
    /// that name was there (add table; delete table; add table and everything), so an agent
    /// restart never has a moment with no rules. Later calls commit the diff between the plan
    /// last committed and `plan`, as one transaction. Returns what was sent.
    pub fn sync(&mut self, sock: &mut Socket, plan: &Plan) -> Result<SyncStats, Error> {
        let mut plan = plan.clone();
        plan.pods.clear();
        let mut out = match &self.applied {
            Some(old) => incremental(old, &plan).unwrap_or_else(|| full(&plan)),
            None => full(&plan),
        };
        out.stats.messages = out.batch.len();
        out.stats.bytes = if out.batch.is_empty() {
            0
        } else {
            out.batch.encoded_len()
        };
        // Whatever happens next, the table may not be what `applied` says until this commit
        // succeeds.
        self.applied = None;
        sock.commit(&out.batch).map_err(|source| Error::Commit {
            table: TABLE,
            what: if out.stats.full {
                "full write"
            } else {
                "update"
            },
            source: Box::new(source),
        })?;
        self.applied = Some(plan);
        Ok(out.stats)
    }

    /// Deletes the table if present.
    pub fn remove(sock: &mut Socket) -> Result<(), Error> {
        let mut batch = Batch::new();
        // Adding it first makes the deletion succeed whether or not it was there.
        batch
            .add_table(&Table::new(NftFamily::Inet, TABLE))
            .delete_table(NftFamily::Inet, TABLE);
        sock.commit(&batch).map_err(|source| Error::Remove {
            table: TABLE,
            source: Box::new(source),
        })?;
        Ok(())
    }
}

/// A transaction being written, and its counts.
struct Out {
    batch: Batch,
    stats: SyncStats,
    next_id: u32,
}

impl Out {
    fn new(full: bool) -> Out {
        Out {
            batch: Batch::new(),
            stats: SyncStats {
                full,
                ..SyncStats::default()
            },
            next_id: FIRST_SET_ID,
        }
    }

    /// `name` as a set of the table (an id fresh in this batch).
    fn set_def(&mut self, name: &str, s: &AddrSet) -> NamedSet {
        let id = self.next_id;
        self.next_id += 1;
        layout::set(name, s, id)
    }

    /// Creates a set with its elements.
    fn create_set(&mut self, name: &str, s: &AddrSet) {
        let def = self.set_def(name, s);
        self.batch.add_set(&def);
        self.fill_set(&def, s);
    }

    /// Adds every element of `s` to the (empty) set `def`.
    fn fill_set(&mut self, def: &NamedSet, s: &AddrSet) {
        if s.elements.is_empty() {
            return;
        }
        self.stats.elements_added += s.elements.len();
        if s.kind == SetKind::Intervals {
            self.batch
                .add_intervals(def, layout::interval_ranges(&s.elements));
        } else {
            let keys: Vec<Vec<u8>> = s.elements.iter().filter_map(layout::element_key).collect();
            self.batch.add_elements(def, &keys);
        }
    }

    /// Writes the rules of `addr`'s chain for `direction`, creating the chain when `create`.
    fn write_chain(&mut self, direction: Direction, addr: IpAddr, iso: &Isolation, create: bool) {
        let chain = rules::target_chain(direction, addr);
        if create {
            self.batch.create_chain(&chain);
        } else {
            self.batch.flush_chain(NftFamily::Inet, TABLE, &chain.name);
        }
        for r in rules::target_rules(direction, addr, iso) {
            self.batch.add_rule(&r);
        }
        self.stats.chains_written += 1;
    }

    /// A direction of `addr` becomes isolated: its chain, then the map element to it.
    fn add_target_direction(&mut self, direction: Direction, addr: IpAddr, iso: &Isolation) {
        self.write_chain(direction, addr, iso, true);
        let map = layout::map(direction, Family::of(addr));
        self.batch
            .add_map_elements(&map, &[layout::map_element(direction, addr)]);
        self.stats.elements_added += 1;
    }

    /// A direction of `addr` is no longer isolated: the map element out, then the chain.
    fn remove_target_direction(&mut self, direction: Direction, addr: IpAddr) {
        let map = layout::map(direction, Family::of(addr));
        self.batch
            .delete_elements(&map, &[layout::addr_bytes(addr)]);
        self.stats.elements_removed += 1;
        let chain = layout::chain_name(direction, addr);
        self.batch
            .flush_chain(NftFamily::Inet, TABLE, &chain)
            .delete_chain(NftFamily::Inet, TABLE, &chain);
    }
}

/// The whole table, replacing any table of its name, in one transaction.
fn full(plan: &Plan) -> Out {
    let mut out = Out::new(true);
    let table = Table::new(NftFamily::Inet, TABLE);
    out.batch
        .add_table(&table)
        .delete_table(NftFamily::Inet, TABLE)
        .add_table(&table);
    for (name, s) in &plan.sets {
        out.create_set(name, s);
    }
    for map in layout::maps() {
        out.batch.add_set(&map);
    }
    for (addr, target) in &plan.targets {
        for direction in DIRECTIONS {
            let iso = target.direction(direction);
            if iso.isolated() {
                out.write_chain(direction, *addr, iso, true);
            }
        }
    }
    // The map elements, one message list per map.
    for direction in DIRECTIONS {
        for family in [Family::V4, Family::V6] {
            let elements: Vec<_> = plan
                .targets
                .iter()
                .filter(|(addr, t)| {
                    Family::of(**addr) == family && t.direction(direction).isolated()
                })
                .map(|(addr, _)| layout::map_element(direction, *addr))
                .collect();
            if !elements.is_empty() {
                out.stats.elements_added += elements.len();
                out.batch
                    .add_map_elements(&layout::map(direction, family), &elements);
            }
        }
    }
    out.batch.add_chain(&rules::forward_chain());
    for r in rules::forward_rules() {
        out.batch.add_rule(&r);
    }
    out
}

/// The diff from `old` to `new` as one transaction; `None` when it cannot be one (a set that
/// changed its type under the same name: written whole instead).
fn incremental(old: &Plan, new: &Plan) -> Option<Out> {
    let changes = Plan::diff(old, new);
    if changes
        .sets_created
        .keys()
        .any(|n| changes.sets_deleted.contains(n))
    {
        return None;
    }
    let mut out = Out::new(false);
    for (name, s) in &changes.sets_created {
        out.create_set(name, s);
    }
    for (name, ch) in &changes.elements {
        let s = new.sets.get(name)?;
        let def = out.set_def(name, s);
        if s.kind == SetKind::Intervals {
            // Interval elements are linearized boundaries: replace them all.
            out.batch.flush_set(&def);
            out.stats.elements_removed += old.sets.get(name).map_or(0, |o| o.elements.len());
            out.fill_set(&def, s);
            continue;
        }
        let removed: Vec<Vec<u8>> = ch.removed.iter().filter_map(layout::element_key).collect();
        let added: Vec<Vec<u8>> = ch.added.iter().filter_map(layout::element_key).collect();
        if !removed.is_empty() {
            out.batch.delete_elements(&def, &removed);
        }
        if !added.is_empty() {
            out.batch.add_elements(&def, &added);
        }
        out.stats.elements_removed += removed.len();
        out.stats.elements_added += added.len();
    }
    // What an address no policy selects has: isolated in neither direction.
    let none = Target {
        pod: PodKey {
            namespace: String::new(),
            name: String::new(),
        },
        ingress: Isolation::default(),
        egress: Isolation::default(),
    };
    for (addr, change) in &changes.targets {
        let before = old.targets.get(addr).unwrap_or(&none);
        let after = match change {
            TargetChange::Added(t) | TargetChange::Changed(t) => t,
            TargetChange::Removed => &none,
        };
        for direction in DIRECTIONS {
            let (was, is) = (before.direction(direction), after.direction(direction));
            match (was.isolated(), is.isolated()) {
                (false, true) => out.add_target_direction(direction, *addr, is),
                (true, false) => out.remove_target_direction(direction, *addr),
                (true, true) if was != is => out.write_chain(direction, *addr, is, false),
                _ => {}
            }
        }
    }
    for name in &changes.sets_deleted {
        out.batch.delete_set(NftFamily::Inet, TABLE, name);
    }
    Some(out)
}
