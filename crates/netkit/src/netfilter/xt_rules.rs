//! Shared iptables rules kept over netlink in iptables-nft's tables: each wanted rule exists
//! exactly once in its chain, whoever else (another ADD, the reference plugin, an
//! administrator with `iptables`) writes there at the same time. Only the chains named by
//! the wanted rules are read.

use super::exec::{Error, Result};
use super::nf_tables::{xt, Batch, Rule, Socket};

/// How often the duplicate sweep relists after a concurrent change removed what it listed.
const ATTEMPTS: usize = 5;

/// Where a missing rule goes: `iptables -I CHAIN 1` or `iptables -A CHAIN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    First,
    Last,
}

/// A rule that must exist once in its chain (family, table and chain are the rule's own).
#[derive(Debug, Clone)]
pub struct Wanted {
    pub rule: Rule,
    pub place: Place,
}

impl Wanted {
    pub fn first(rule: Rule) -> Wanted {
        Wanted {
            rule,
            place: Place::First,
        }
    }

    pub fn last(rule: Rule) -> Wanted {
        Wanted {
            rule,
            place: Place::Last,
        }
    }
}

/// The distinct chains the wanted rules live in, in first-seen order.
fn chains_of(wanted: &[Wanted]) -> Vec<&str> {
    let mut chains: Vec<&str> = Vec::new();
    for w in wanted {
        if !chains.contains(&w.rule.chain.as_str()) {
            chains.push(&w.rule.chain);
        }
    }
    chains
}

/// The current rules of each chain of `wanted`.
fn listed<'a>(sock: &mut Socket, wanted: &'a [Wanted]) -> Result<Vec<(&'a str, Vec<Rule>)>> {
    let Some(first) = wanted.first() else {
        return Ok(Vec::new());
    };
    let (family, table) = (first.rule.family, first.rule.table.clone());
    chains_of(wanted)
        .into_iter()
        .map(|c| Ok((c, sock.rules(family, &table, c)?)))
        .collect()
}

fn rules_in<'a>(lists: &'a [(&str, Vec<Rule>)], chain: &str) -> &'a [Rule] {
    lists
        .iter()
        .find(|(c, _)| *c == chain)
        .map(|(_, r)| r.as_slice())
        .unwrap_or(&[])
}

/// The wanted rules missing from the kernel (for CHECK).
pub fn missing<'a>(sock: &mut Socket, wanted: &'a [Wanted]) -> Result<Vec<&'a Wanted>> {
    let lists = listed(sock, wanted)?;
    Ok(wanted
        .iter()
        .filter(|w| {
            !rules_in(&lists, &w.rule.chain)
                .iter()
                .any(|r| xt::same_rule(r, &w.rule))
        })
        .collect())
}

/// Makes every wanted rule (all of one family and table) exist once: one transaction runs
/// `prelude` (chains to ensure) and adds the missing rules in order, then copies that
/// concurrent writers added meanwhile are deleted, keeping the first of each.
pub fn ensure(sock: &mut Socket, prelude: impl Fn(&mut Batch), wanted: &[Wanted]) -> Result<()> {
    let lists = listed(sock, wanted)?;
    let mut batch = Batch::new();
    prelude(&mut batch);
    for w in wanted {
        if !rules_in(&lists, &w.rule.chain)
            .iter()
            .any(|r| xt::same_rule(r, &w.rule))
        {
            match w.place {
                Place::First => batch.insert_rule(&w.rule),
                Place::Last => batch.add_rule(&w.rule),
            };
        }
    }
    sock.commit(&batch)?;
    remove_duplicates(sock, wanted)
}

/// Deletes all but the first copy of each wanted rule (two writers that both found a rule
/// missing both added it).
fn remove_duplicates(sock: &mut Socket, wanted: &[Wanted]) -> Result<()> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let lists = listed(sock, wanted)?;
        let mut batch = Batch::new();
        for w in wanted {
            let mut copies = rules_in(&lists, &w.rule.chain)
                .iter()
                .filter(|r| xt::same_rule(r, &w.rule));
            copies.next();
            for extra in copies {
                if let Some(h) = extra.handle {
                    batch.delete_rule(w.rule.family, &w.rule.table, &w.rule.chain, h);
                }
            }
        }
        match sock.commit(&batch) {
            Ok(_) => return Ok(()),
            // Another writer removed the same copy first: look again.
            Err(e) if e.errno() == Some(libc::ENOENT) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Invalid {
        context: String::new(),
        detail: "retries exhausted".into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netfilter::nf_tables::{Family, Verdict};

    #[test]
    fn chains_in_first_seen_order() {
        let r = |c: &str| xt::rule(Family::Ip, xt::FILTER, c, Vec::new(), Verdict::Accept);
        let w = [
            Wanted::first(r("FORWARD")),
            Wanted::last(r("A")),
            Wanted::first(r("FORWARD")),
            Wanted::last(r("B")),
        ];
        assert_eq!(chains_of(&w), ["FORWARD", "A", "B"]);
        assert_eq!(w[1].place, Place::Last);
    }
}
