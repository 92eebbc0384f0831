//! MAC spoof checking on a bridge port (reference `pkg/link/spoofcheck.go`): frames entering
//! from the port must carry the container's MAC.
//!
//! Objects: table `bridge nat`, base chain `PREROUTING` (filter, prerouting, priority -300,
//! policy accept) with `iifname <port> jump cni-br-iface-<id>`; chain `cni-br-iface-<id>` jumps
//! to `cni-br-iface-<id>-mac`, which returns for `ether saddr <mac>` and drops the rest. Every
//! rule carries the comment `macspoofchk-<id>`, where `<id>` is `<containerID>-<ifname>`.

use super::exec::{Error, Result};
use super::nf_tables::build;
use super::nf_tables::expr::meta_key;
use super::nf_tables::{
    Batch, Chain, CmpOp, Expr, Family, Hook, Rule, Socket, Table, Verdict, POLICY_ACCEPT,
};

const FAMILY: Family = Family::Bridge;
const TABLE: &str = "nat";
const BASE_CHAIN: &str = "PREROUTING";
const BASE_PRIORITY: i32 = -300;
/// How often a teardown is rebuilt when a listed rule vanished meanwhile.
const ATTEMPTS: usize = 5;

/// The spoof checker of one attachment.
#[derive(Debug, Clone)]
pub struct SpoofChecker {
    iface: String,
    mac: String,
    ref_id: String,
}

impl SpoofChecker {
    /// `iface`: the host-side port; `mac`: the container MAC; `ref_id`: `<containerID>-<ifname>`.
    pub fn new(iface: &str, mac: &str, ref_id: &str) -> SpoofChecker {
        SpoofChecker {
            iface: iface.to_string(),
            mac: mac.to_string(),
            ref_id: ref_id.to_string(),
        }
    }

    /// The reference's unique ID of an attachment. It names no network: the objects belong
    /// to the host port of one container interface, and an interface name is unique within a
    /// container, so two live attachments never share them (kept for the reference's names).
    pub fn ref_id_for(container_id: &str, ifname: &str) -> String {
        format!("{container_id}-{ifname}")
    }

    pub fn iface_chain(&self) -> String {
        format!("cni-br-iface-{}", self.ref_id)
    }

    pub fn mac_chain(&self) -> String {
        format!("{}-mac", self.iface_chain())
    }

    pub fn comment(&self) -> String {
        format!("macspoofchk-{}", self.ref_id)
    }

    /// Installs the chains and rules in one transaction (the chains are emptied first, so a
    /// repeated ADD leaves one set of rules).
    pub fn setup(&self) -> Result<()> {
        let ctx = || format!("failed to setup spoof-check on {}", self.iface);
        let mac = crate::link::parse_mac(&self.mac).map_err(|e| Error::Invalid {
            context: ctx(),
            detail: e.to_string(),
        })?;
        let (iface_chain, mac_chain, comment) =
            (self.iface_chain(), self.mac_chain(), self.comment());
        let mut b = Batch::new();
        b.add_table(&Table::new(FAMILY, TABLE))
            .add_chain(&Chain::base(
                FAMILY,
                TABLE,
                BASE_CHAIN,
                "filter",
                Hook::Prerouting,
                BASE_PRIORITY,
                Some(POLICY_ACCEPT),
            ))
            .add_chain(&Chain::new(FAMILY, TABLE, &iface_chain))
            .add_chain(&Chain::new(FAMILY, TABLE, &mac_chain))
            .flush_chain(FAMILY, TABLE, &iface_chain)
            .flush_chain(FAMILY, TABLE, &mac_chain);
        let rule = |chain: &str, exprs: Vec<Expr>| {
            Rule::new(FAMILY, TABLE, chain, exprs).with_comment(&comment)
        };
        b.add_rule(&rule(
            BASE_CHAIN,
            build::all([
                build::ifname(true, CmpOp::Eq, &self.iface),
                build::verdict(Verdict::Jump(iface_chain.clone())),
            ]),
        ))
        .add_rule(&rule(
            &iface_chain,
            build::verdict(Verdict::Jump(mac_chain.clone())),
        ))
        .add_rule(&rule(
            &mac_chain,
            build::all([build::ether_saddr(mac), build::verdict(Verdict::Return)]),
        ))
        .add_rule(&rule(&mac_chain, build::verdict(Verdict::Drop)));
        Socket::new()
            .and_then(|mut s| s.commit(&b))
            .map(|_| ())
            .map_err(|e| e.context(ctx()))
    }

    /// Removes the jump rule(s) and both chains; succeeds when they are already gone.
    /// Only `ref_id` matters here (the interface and MAC may be unknown at DEL time).
    pub fn teardown(&self) -> Result<()> {
        let ctx = format!("failed to teardown spoof-check {}", self.ref_id);
        let Ok(mut sock) = Socket::new() else {
            return Ok(());
        };
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let listing = Listing::jumps_only(&mut sock).map_err(|e| e.context(&ctx))?;
            let mut b = Batch::new();
            self.teardown_ops(&listing, &mut sock, &mut b)
                .map_err(|e| e.context(&ctx))?;
            match sock.commit(&b) {
                Ok(_) => return Ok(()),
                Err(e) if matches!(e.errno(), Some(libc::ENOENT | libc::EBUSY)) => last = Some(e),
                Err(e) => return Err(e.context(&ctx)),
            }
        }
        Err(last
            .map(|e| e.context(&ctx))
            .unwrap_or_else(|| Error::Invalid {
                context: ctx,
                detail: "retries exhausted".into(),
            }))
    }

    /// Adds to `b` the removal of this check's jump rule(s) and chains, as far as they exist.
    fn teardown_ops(&self, listing: &Listing, sock: &mut Socket, b: &mut Batch) -> Result<()> {
        let comment = self.comment();
        for r in &listing.jumps {
            if r.comment().as_deref() == Some(comment.as_str()) {
                if let Some(h) = r.handle {
                    b.delete_rule(FAMILY, TABLE, BASE_CHAIN, h);
                }
            }
        }
        // The iface chain jumps to the mac chain: flush both before deleting either.
        let mut present = Vec::new();
        for chain in [self.iface_chain(), self.mac_chain()] {
            let exists = match &listing.chains {
                Some(names) => names.contains(&chain),
                None => sock.chain(FAMILY, TABLE, &chain)?.is_some(),
            };
            if exists {
                b.flush_chain(FAMILY, TABLE, &chain);
                present.push(chain);
            }
        }
        for chain in present {
            b.delete_chain(FAMILY, TABLE, &chain);
        }
        Ok(())
    }

    /// Whether the rules are installed (for CHECK).
    pub fn is_installed(&self) -> Result<bool> {
        let mut sock = Socket::new()?;
        let comment = self.comment();
        let jump = sock
            .rules(FAMILY, TABLE, BASE_CHAIN)?
            .iter()
            .any(|r| r.comment().as_deref() == Some(comment.as_str()));
        let mac_rules = sock.rules(FAMILY, TABLE, &self.mac_chain())?.len();
        Ok(jump && mac_rules >= 2)
    }
}

/// What teardown and GC read: the rules of `bridge nat PREROUTING` (one per attachment) and,
/// for GC only, the chain names of the bridge family.
struct Listing {
    jumps: Vec<Rule>,
    chains: Option<Vec<String>>,
}

impl Listing {
    fn jumps_only(sock: &mut Socket) -> Result<Listing> {
        Ok(Listing {
            jumps: sock.rules(FAMILY, TABLE, BASE_CHAIN)?,
            chains: None,
        })
    }

    fn with_chains(sock: &mut Socket) -> Result<Listing> {
        let mut l = Listing::jumps_only(sock)?;
        l.chains = Some(
            sock.chains_of_family_table(FAMILY, TABLE)?
                .into_iter()
                .map(|c| c.name)
                .collect(),
        );
        Ok(l)
    }
}

/// GC: tears down the spoof checks that can no longer belong to a live attachment. One is stale
/// when its attachment is not in `valid` (`(containerID, ifname)` pairs) and either its bridge
/// port is gone (`port_exists` says no) or its jump rule is missing. Either way no pod can be
/// behind it, so this holds whichever network the attachment belonged to: the rules carry no
/// network name. Returns the reference IDs removed.
pub fn gc(
    valid: &[(String, String)],
    port_exists: impl FnMut(&str) -> bool,
) -> Result<Vec<String>> {
    let Ok(mut sock) = Socket::new() else {
        return Ok(Vec::new());
    };
    let listing = Listing::with_chains(&mut sock).map_err(|e| e.context("spoof-check GC"))?;
    let valid: Vec<String> = valid
        .iter()
        .map(|(cid, ifname)| SpoofChecker::ref_id_for(cid, ifname))
        .collect();
    let stale = stale_ref_ids(&listing, &valid, port_exists);
    // One listing, one transaction for all of them.
    let mut b = Batch::new();
    for id in &stale {
        SpoofChecker::new("", "", id).teardown_ops(&listing, &mut sock, &mut b)?;
    }
    sock.commit(&b)
        .map_err(|e| e.context("spoof-check GC: failed to remove stale checks"))?;
    Ok(stale)
}

/// The reference IDs `gc` removes.
fn stale_ref_ids(
    listing: &Listing,
    valid: &[String],
    mut port_exists: impl FnMut(&str) -> bool,
) -> Vec<String> {
    let mut jumps: Vec<(String, Option<String>)> = Vec::new();
    for rule in &listing.jumps {
        let Some(ref_id) = rule
            .comment()
            .and_then(|c| c.strip_prefix("macspoofchk-").map(str::to_string))
        else {
            continue;
        };
        jumps.push((ref_id, iifname_of(rule)));
    }
    let mut stale: Vec<String> = jumps
        .iter()
        .filter(|(_, port)| !port.as_deref().is_some_and(&mut port_exists))
        .map(|(id, _)| id.clone())
        .collect();
    // A chain pair left without its jump rule (cleaned up by hand, or half-removed).
    let chains = listing.chains.clone().unwrap_or_default();
    for chain in &chains {
        let Some(id) = chain.strip_prefix("cni-br-iface-") else {
            continue;
        };
        let pair = SpoofChecker::new("", "", id);
        if chains.contains(&pair.mac_chain()) && !jumps.iter().any(|(j, _)| j == id) {
            stale.push(id.to_string());
        }
    }
    stale.sort();
    stale.dedup();
    stale.retain(|id| !valid.contains(id));
    stale
}

/// The port an `iifname <port> jump ...` rule matches.
fn iifname_of(rule: &Rule) -> Option<String> {
    rule.exprs.windows(2).find_map(|w| match w {
        [Expr::Meta { key, .. }, Expr::Cmp { data, .. }] if *key == meta_key::IIFNAME => {
            let name = data.split(|b| *b == 0).next().unwrap_or(data);
            Some(String::from_utf8_lossy(name).into_owned())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_reference() {
        let sc = SpoofChecker::new(
            "veth1",
            "02:00:00:00:00:01",
            &SpoofChecker::ref_id_for("cid", "eth0"),
        );
        assert_eq!(sc.iface_chain(), "cni-br-iface-cid-eth0");
        assert_eq!(sc.mac_chain(), "cni-br-iface-cid-eth0-mac");
        assert_eq!(sc.comment(), "macspoofchk-cid-eth0");
    }

    fn jump(id: &str, port: &str) -> Rule {
        Rule::new(
            FAMILY,
            TABLE,
            BASE_CHAIN,
            build::all([
                build::ifname(true, CmpOp::Eq, port),
                build::verdict(Verdict::Jump(format!("cni-br-iface-{id}"))),
            ]),
        )
        .with_comment(&format!("macspoofchk-{id}"))
    }

    fn chains(id: &str) -> Vec<String> {
        vec![
            format!("cni-br-iface-{id}"),
            format!("cni-br-iface-{id}-mac"),
        ]
    }

    #[test]
    fn gc_selects_unlisted_attachments_whose_port_is_gone_or_jump_missing() {
        let mut names = vec!["PREROUTING".to_string()];
        for id in [
            "live-eth0",
            "gone-eth0",
            "valid-eth0",
            "orphan-eth0",
            "odd-mac",
        ] {
            names.extend(chains(id));
        }
        let listing = Listing {
            jumps: vec![
                jump("live-eth0", "vethlive"),
                jump("gone-eth0", "vethgone"),
                jump("valid-eth0", "vethvalid"),
                // An attachment whose ifname is "mac": its iface chain ends in "-mac".
                jump("odd-mac", "vethodd"),
            ],
            chains: Some(names),
        };
        assert_eq!(iifname_of(&listing.jumps[0]).as_deref(), Some("vethlive"));
        let exists = |p: &str| p == "vethlive" || p == "vethodd";
        let valid = vec![
            SpoofChecker::ref_id_for("valid", "eth0"),
            SpoofChecker::ref_id_for("orphan-not", "eth0"),
        ];
        assert_eq!(
            stale_ref_ids(&listing, &valid, exists),
            vec!["gone-eth0".to_string(), "orphan-eth0".to_string()]
        );
    }
}
