//! The objects a plugin shares between its attachments (its table, its chains, the rules of
//! the chains it owns whole), written only where they are missing or differ.
//!
//! The reference plugins re-add their table and chains and rebuild the chains they own on
//! every ADD. Done literally, every ADD deletes rules (the flush) and updates chains (an
//! `add chain` of an existing chain), and each of those leaves work for the kernel's deferred
//! destroy, which the plugin's exit then waits for ([`super::release`]). Reading the few
//! objects first (one lookup per chain, one dump per owned chain) lets an ADD that finds them
//! right commit only creations. The outcome is the reference's: whatever is missing is
//! created, an owned chain that holds anything but its rules is rebuilt, all in the caller's
//! one transaction. A change racing between the read and the commit either makes the commit
//! fail (a chain we add to was deleted: ENOENT, which callers retry with a fresh plan) or is
//! a concurrent ADD writing the same objects.

use super::msg::{Chain, Rule, Table};
use super::set::AnonSet;
use super::socket::{Batch, Socket};
use crate::netfilter::exec::Result;

/// One chain: to exist (with its hook), and, when `content` is given, to hold exactly it.
struct Wanted {
    chain: Chain,
    content: Option<Content>,
}

/// A chain's whole content: its rules, and the anonymous sets they look up (created before
/// them in the same transaction).
struct Content {
    sets: Vec<AnonSet>,
    rules: Vec<Rule>,
}

/// A table and its shared chains, in the order they are to be created (a chain another one
/// jumps to comes first).
pub struct Shared {
    table: Table,
    chains: Vec<Wanted>,
}

impl Shared {
    pub fn new(table: Table) -> Shared {
        Shared {
            table,
            chains: Vec::new(),
        }
    }

    /// A chain that must exist; its rules are not managed here.
    pub fn chain(&mut self, chain: Chain) -> &mut Self {
        self.chains.push(Wanted {
            chain,
            content: None,
        });
        self
    }

    /// A chain whose whole content is `rules` (looking up `sets`): flushed and refilled when
    /// it holds anything else.
    pub fn owned_chain(&mut self, chain: Chain, sets: Vec<AnonSet>, rules: Vec<Rule>) -> &mut Self {
        self.chains.push(Wanted {
            chain,
            content: Some(Content { sets, rules }),
        });
        self
    }

    /// Adds to `batch` what brings the kernel's objects to the wanted state; nothing when they
    /// are in it already.
    pub fn plan(&self, sock: &mut Socket, batch: &mut Batch) -> Result<()> {
        let family = self.table.family;
        let table = &self.table.name;
        if !sock.table_exists(family, table)? {
            batch.add_table(&self.table);
            for w in &self.chains {
                batch.create_chain(&w.chain);
                if let Some(c) = &w.content {
                    fill(batch, c);
                }
            }
            return Ok(());
        }
        for w in &self.chains {
            let Some(have) = sock.chain(family, table, &w.chain.name)? else {
                batch.create_chain(&w.chain);
                if let Some(c) = &w.content {
                    fill(batch, c);
                }
                continue;
            };
            if !hooked_as_wanted(&have, &w.chain) {
                // As the reference would: `add chain` fixes the policy, or fails on a
                // different hook with the kernel's error.
                batch.add_chain(&w.chain);
            }
            if let Some(c) = &w.content {
                let rules = sock.rules(family, table, &w.chain.name)?;
                if !same_rules(&rules, &c.rules) {
                    batch.flush_chain(family, table, &w.chain.name);
                    fill(batch, c);
                }
            }
        }
        Ok(())
    }
}

fn fill(batch: &mut Batch, c: &Content) {
    for s in &c.sets {
        batch.add_anon_set(s);
    }
    for r in &c.rules {
        batch.add_rule(r);
    }
}

/// Whether an existing chain has the wanted hook, priority and type, and the wanted policy
/// when one is stated (`add chain` without a policy leaves the existing one).
fn hooked_as_wanted(have: &Chain, want: &Chain) -> bool {
    match (&have.base, &want.base) {
        (None, None) => true,
        (Some(h), Some(w)) => {
            h.kind == w.kind
                && h.hook == w.hook
                && h.priority == w.priority
                && (w.policy.is_none() || w.policy == h.policy)
        }
        _ => false,
    }
}

/// Whether the kernel's rules are ours, in order: same expressions, protocol and userdata.
/// (Rules looking up anonymous sets never compare equal, the kernel naming the sets: such
/// chains are rebuilt every time, as the reference does.)
fn same_rules(have: &[Rule], want: &[Rule]) -> bool {
    have.len() == want.len()
        && have
            .iter()
            .zip(want)
            .all(|(h, w)| h.exprs == w.exprs && h.compat == w.compat && h.userdata == w.userdata)
}

#[cfg(test)]
mod tests {
    use super::super::expr::Verdict;
    use super::super::msg::{Family, Hook, POLICY_ACCEPT};
    use super::*;
    use crate::netfilter::nf_tables::build;

    fn base(policy: Option<u32>) -> Chain {
        Chain::base(
            Family::Inet,
            "t",
            "post",
            "nat",
            Hook::Postrouting,
            100,
            policy,
        )
    }

    #[test]
    fn hooks_compare_with_an_unstated_policy_as_any() {
        assert!(hooked_as_wanted(&base(Some(POLICY_ACCEPT)), &base(None)));
        assert!(hooked_as_wanted(
            &base(Some(POLICY_ACCEPT)),
            &base(Some(POLICY_ACCEPT))
        ));
        assert!(!hooked_as_wanted(
            &base(Some(0)), // drop
            &base(Some(POLICY_ACCEPT))
        ));
        assert!(!hooked_as_wanted(
            &Chain::new(Family::Inet, "t", "post"),
            &base(None)
        ));
        let mut other = base(None);
        if let Some(b) = other.base.as_mut() {
            b.priority = 99;
        }
        assert!(!hooked_as_wanted(&other, &base(None)));
    }

    #[test]
    fn rules_compare_by_content_not_handle() {
        let r = Rule::new(
            Family::Inet,
            "t",
            "post",
            build::verdict(Verdict::Goto("x".into())),
        );
        let mut live = r.clone();
        live.handle = Some(4);
        assert!(same_rules(&[live.clone()], std::slice::from_ref(&r)));
        assert!(!same_rules(&[live.clone(), live], std::slice::from_ref(&r)));
        assert!(!same_rules(&[r.clone().with_comment("c")], &[r]));
    }
}
