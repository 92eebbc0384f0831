//! The iptables backend's rules written over netlink, for hosts whose iptables is
//! iptables-nft: the rules go into `ip filter` / `ip6 filter` (where iptables-nft keeps the
//! host's FORWARD policy, so they take effect) exactly as iptables-nft would write them,
//! so `iptables -S` shows them and iptables (or the reference plugin) can check and delete
//! them, and we theirs. Only FORWARD, CNI-FORWARD and the admin chain are ever read.

use std::net::IpAddr;

use netkit::netfilter::nf_tables::{xt, Batch, Family, Hook, Rule, Socket, Verdict};
use netkit::netfilter::xt_rules::{self, Wanted};

use crate::chains::{ADMIN_JUMP_COMMENT, FORWARD_JUMP_COMMENT, PRIV_CHAIN};
use crate::error::FirewallError;

const FILTER: &str = xt::FILTER;
const FORWARD: &str = "FORWARD";
const ATTEMPTS: usize = 5;
/// The errno of "rule vanished" (a concurrent DEL got there first).
const ENOENT: i32 = 2;

fn family(v6: bool) -> Family {
    if v6 {
        Family::Ip6
    } else {
        Family::Ip
    }
}

fn forward_jump(fam: Family) -> Rule {
    xt::rule(
        fam,
        FILTER,
        FORWARD,
        vec![xt::comment_match(FORWARD_JUMP_COMMENT)],
        Verdict::Jump(PRIV_CHAIN.into()),
    )
}

fn admin_jump(fam: Family, admin_chain: &str) -> Rule {
    xt::rule(
        fam,
        FILTER,
        PRIV_CHAIN,
        vec![xt::comment_match(ADMIN_JUMP_COMMENT)],
        Verdict::Jump(admin_chain.into()),
    )
}

/// `-d IP -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT` and `-s IP -j ACCEPT`.
pub fn address_rules(ip: IpAddr) -> Vec<Rule> {
    let fam = family(ip.is_ipv6());
    let mut established = xt::host(false, ip);
    established.push(xt::ctstate_match(
        xt::CT_STATE_RELATED | xt::CT_STATE_ESTABLISHED,
    ));
    vec![
        xt::rule(fam, FILTER, PRIV_CHAIN, established, Verdict::Accept),
        xt::rule(fam, FILTER, PRIV_CHAIN, xt::host(true, ip), Verdict::Accept),
    ]
}

/// Whether `filter` FORWARD must be created (it does not exist yet). An existing one is left
/// alone: sending it again would set its policy back to accept (an operator's `iptables -P
/// FORWARD DROP` undone), which iptables never does.
pub fn forward_missing(sock: &mut Socket, fam: Family) -> Result<bool, FirewallError> {
    Ok(sock.chain(fam, FILTER, FORWARD)?.is_none())
}

/// Creates `filter` and its FORWARD chain as iptables-nft creates them (see
/// [`forward_missing`]).
pub fn ensure_forward(b: &mut Batch, fam: Family) {
    xt::ensure_builtin(
        b,
        fam,
        FILTER,
        FORWARD,
        "filter",
        Hook::Forward,
        xt::PRIO_FILTER,
    );
}

/// The shared jumps (inserted first, as `iptables -I ... 1`) and the address rules
/// (appended), each kept exactly once.
fn wanted(fam: Family, ips: &[IpAddr], admin_chain: &str) -> Vec<Wanted> {
    let mut w = vec![
        Wanted::first(forward_jump(fam)),
        Wanted::first(admin_jump(fam, admin_chain)),
    ];
    w.extend(
        ips.iter()
            .flat_map(|ip| address_rules(*ip))
            .map(Wanted::last),
    );
    w
}

/// ADD for one family: the chains and jumps (when missing) and the address rules, in one
/// transaction; copies a concurrent ADD added meanwhile are removed again.
pub fn add(ips: &[IpAddr], v6: bool, admin_chain: &str) -> Result<(), FirewallError> {
    let fam = family(v6);
    let mut sock = Socket::new()?;
    let create_forward = forward_missing(&mut sock, fam)?;
    let prelude = |b: &mut Batch| {
        if create_forward {
            ensure_forward(b, fam);
        }
        xt::ensure_chain(b, fam, FILTER, PRIV_CHAIN);
        xt::ensure_chain(b, fam, FILTER, admin_chain);
    };
    xt_rules::ensure(&mut sock, prelude, &wanted(fam, ips, admin_chain))
        .map_err(|e| FirewallError::AddRules(Box::new(e)))
}

/// DEL for one family: the address rules (every copy); missing ones are fine.
pub fn del(ips: &[IpAddr], v6: bool) -> Result<(), FirewallError> {
    let fam = family(v6);
    let Ok(mut sock) = Socket::new() else {
        return Ok(());
    };
    let wanted: Vec<Rule> = ips.iter().flat_map(|ip| address_rules(*ip)).collect();
    for _ in 0..ATTEMPTS {
        let mut b = Batch::new();
        for r in sock.rules(fam, FILTER, PRIV_CHAIN)? {
            if wanted.iter().any(|w| xt::same_rule(&r, w)) {
                if let Some(h) = r.handle {
                    b.delete_rule(fam, FILTER, PRIV_CHAIN, h);
                }
            }
        }
        match sock.commit(&b) {
            Ok(_) => return Ok(()),
            Err(e) if matches!(e.errno(), Some(ENOENT)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(FirewallError::DeleteRace)
}

/// CHECK for one family.
pub fn check(ips: &[IpAddr], v6: bool, admin_chain: &str) -> Result<(), FirewallError> {
    let fam = family(v6);
    let mut sock = Socket::new()?;
    for chain in [PRIV_CHAIN, admin_chain] {
        if sock.chain(fam, FILTER, chain)?.is_none() {
            return Err(FirewallError::NftChainMissing {
                family: fam.name(),
                table: FILTER,
                chain: chain.to_string(),
            });
        }
    }
    if let Some(w) = xt_rules::missing(&mut sock, &wanted(fam, ips, admin_chain))?.first() {
        return Err(FirewallError::NftRuleMissing {
            family: fam.name(),
            table: FILTER,
            chain: w.rule.chain.clone(),
        });
    }
    Ok(())
}
