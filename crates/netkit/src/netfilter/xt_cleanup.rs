//! Removal of iptables chains written by iptables-nft (ours or the reference plugins'), over
//! netlink: only the chain itself and the chains that jump to it are looked at, so the cost
//! does not grow with the rest of the table (kube-proxy's thousands of rules).

use std::net::IpAddr;

use super::exec::Result;
use super::nf_tables::{Batch, Family, Socket};

/// How often a removal is retried when a concurrent change invalidated what was listed.
const ATTEMPTS: usize = 5;

/// Removes `chain` of iptables-nft `table` with the rules of `from` that jump to it, in one
/// transaction. Returns whether the chain existed. (A missing chain has no jumps: the kernel
/// refuses rules jumping to chains that do not exist.)
pub fn remove_chain_and_jumps(
    sock: &mut Socket,
    family: Family,
    table: &str,
    chain: &str,
    from: &[&str],
) -> Result<bool> {
    remove_jumps_naming(sock, family, table, chain, from, None)
}

/// Removes the rules of `from` that jump to `chain` and name one of `sources` (`-s IP`), then
/// `chain` itself when no other rule jumps to it, in one transaction; with `sources` `None`,
/// every jump and the chain. A chain several attachments jump to (the reference names the
/// masquerade chain by network and container ID, not by interface) keeps the others' jumps.
/// Returns whether the chain existed.
pub fn remove_jumps_naming(
    sock: &mut Socket,
    family: Family,
    table: &str,
    chain: &str,
    from: &[&str],
    sources: Option<&[IpAddr]>,
) -> Result<bool> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        if sock.chain(family, table, chain)?.is_none() {
            return Ok(false);
        }
        let mut batch = Batch::new();
        let mut others = 0;
        for entry in from {
            for rule in sock.rules(family, table, entry)? {
                if let (Some(h), Some(chain_)) = (rule.handle, rule.target_chain()) {
                    if chain_ != chain {
                        continue;
                    }
                    let mine = sources.is_none_or(|s| s.iter().any(|ip| rule.names_address(*ip)));
                    if mine {
                        batch.delete_rule(family, table, entry, h);
                    } else {
                        others += 1;
                    }
                }
            }
        }
        if others == 0 {
            batch
                .flush_chain(family, table, chain)
                .delete_chain(family, table, chain);
        }
        if batch.is_empty() {
            return Ok(true);
        }
        match sock.commit(&batch) {
            Ok(_) => return Ok(true),
            // A rule listed above vanished, or a new jump appeared: list again.
            Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::EBUSY)) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last
        .unwrap_or_else(|| super::exec::Error::Invalid {
            context: String::new(),
            detail: "retries exhausted".into(),
        })
        .context(format!(
            "failed to remove iptables chain {} {table} {chain}",
            family.name()
        )))
}
