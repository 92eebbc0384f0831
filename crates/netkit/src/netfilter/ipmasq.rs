//! Source NAT (masquerade) for container addresses, as the reference bridge/ptp plugins do it,
//! with both backends and the reference's object names:
//!
//! * iptables: nat chain `CNI-<sha512(net+cid)>` holding `-d <subnet> -j ACCEPT` and
//!   `! -d <multicast> -j MASQUERADE`, jumped to from `POSTROUTING -s <ip>`.
//! * nftables: table `inet cni_plugins_masquerade`, chain `postrouting` (nat/srcnat) →
//!   `goto masq_checks`, where each attachment has `ip saddr == IP ip daddr != SUBNET masquerade`
//!   with a comment starting with a hash of (net, ifname, cid).
//!
//! Teardown never needs the container addresses: the iptables chain name comes from (net, cid)
//! and the POSTROUTING jumps are found by listing; nftables rules are found by comment. The
//! iptables chain names no interface, so one network attached twice to a container (two
//! interfaces) shares it; with the attachment's addresses, a teardown takes only the jumps
//! from them (`-s IP`) and leaves the chain to the other's, as long as it has any.

use std::collections::HashSet;
use std::net::IpAddr;

use super::exec::{Error, Result};
use super::iptables::{Family, Iptables};
use super::nf_tables::build::{self, Addr};
use super::nf_tables::shared::Shared;
use super::nf_tables::{self as nft, Batch, CmpOp, Hook, Verdict, POLICY_ACCEPT};
use super::{host, naming, xt_cleanup};
use ipnetwork::IpNetwork;

const NAT: &str = "nat";
const POSTROUTING: &str = "POSTROUTING";
/// nftables objects of the reference implementation.
pub const NFT_TABLE: &str = "cni_plugins_masquerade";
pub const NFT_FAMILY: nft::Family = nft::Family::Inet;
const NFT_TABLE_COMMENT: &str =
    "Masquerading for plugins from github.com/containernetworking/plugins";
const NFT_MASQ_COMMENT: &str =
    "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet";
pub const NFT_MASQ_CHAIN: &str = "masq_checks";
pub const NFT_POSTROUTING_CHAIN: &str = "postrouting";
/// `srcnat` priority.
const SRCNAT_PRIORITY: i32 = 100;

/// Which tool programs the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
}

impl Backend {
    /// Parses the `ipMasqBackend` config value.
    pub fn parse(s: &str) -> Option<Backend> {
        match s {
            "iptables" => Some(Backend::Iptables),
            "nftables" => Some(Backend::Nftables),
            _ => None,
        }
    }

    /// The tool this backend needs (the nftables backend needs none: it speaks netlink).
    pub fn tool(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nf_tables (kernel)",
        }
    }

    /// Whether this backend can work here: iptables needs the tool of the place its rules
    /// go (iptables-legacy on a kernel without nf_tables), nftables the kernel's nf_tables.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Iptables => Iptables::for_table(Family::V4, NAT).is_installed(),
            Backend::Nftables => host::has_nf_tables(),
        }
    }

    /// The default for `network`: nftables over netlink when the kernel has nf_tables,
    /// unless the network already has iptables masquerade rules (ours or the reference's,
    /// e.g. from before an upgrade), whose pods keep the network on iptables until they are
    /// gone. Finding out reads only the POSTROUTING chains of the nat tables.
    pub fn default_for(network: &str) -> Backend {
        if !host::has_nf_tables() {
            return Backend::Iptables;
        }
        if has_iptables_state(network) {
            Backend::Iptables
        } else {
            Backend::Nftables
        }
    }
}

/// Whether some POSTROUTING rule jumps to a masquerade chain of `network` (its comment is
/// `name: "<net>" id: "<cid>"`), in iptables-nft's tables or in legacy ones.
fn has_iptables_state(network: &str) -> bool {
    let (head, _) = comment_affixes(network);
    let ours = |comment: Option<String>, target: Option<&str>| {
        comment.is_some_and(|c| c.starts_with(&head))
            && target.is_some_and(|t| t.starts_with("CNI-"))
    };
    if let Ok(mut sock) = nft::Socket::new() {
        for family in [Family::V4, Family::V6] {
            let rules = sock
                .rules(host::nft_family(family), NAT, POSTROUTING)
                .unwrap_or_default();
            if rules
                .iter()
                .any(|r| ours(nft::xt::rule_comment(r), r.target_chain()))
            {
                return true;
            }
        }
    }
    [Family::V4, Family::V6].into_iter().any(|family| {
        host::legacy_table_in_use(family, NAT)
            && Iptables::legacy(family)
                .list_rules(NAT, POSTROUTING)
                .unwrap_or_default()
                .iter()
                .any(|r| ours(r.comment().map(str::to_string), r.target()))
    })
}

fn multicast(family: Family) -> &'static str {
    match family {
        Family::V4 => "224.0.0.0/4",
        Family::V6 => "ff00::/8",
    }
}

/// Masks the host bits off: 10.1.0.5/24 → 10.1.0.0/24.
fn subnet_of(ipn: &IpNetwork) -> IpNetwork {
    IpNetwork::new(ipn.network(), ipn.prefix()).unwrap_or(*ipn)
}

/// Installs masquerading for the container addresses `ipns` (address with its prefix).
pub fn setup(
    backend: Backend,
    ipns: &[IpNetwork],
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<()> {
    match backend {
        Backend::Iptables => setup_iptables(ipns, network, container_id),
        Backend::Nftables => setup_nftables(ipns, network, ifname, container_id),
    }
}

fn setup_iptables(ipns: &[IpNetwork], network: &str, container_id: &str) -> Result<()> {
    for family in [Family::V4, Family::V6] {
        let mine: Vec<&IpNetwork> = ipns
            .iter()
            .filter(|n| Family::of(&n.ip()) == family)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let ipt = Iptables::for_table(family, NAT);
        // Fast path: one listing and one transaction. If the transaction is refused for any
        // reason, the step-by-step path runs and reports the precise failure.
        if setup_iptables_batch(&ipt, &mine, network, container_id).is_err() {
            setup_iptables_stepwise(&ipt, &mine, network, container_id)?;
        }
    }
    Ok(())
}

/// One rule as an argument vector (without `-A CHAIN`).
type RuleSpec = Vec<String>;

/// The rule lines of an attachment's masquerade chain, and its POSTROUTING jumps keyed by
/// source address.
fn masq_lines(
    family: Family,
    ipns: &[&IpNetwork],
    chain: &str,
    comment: &str,
) -> (Vec<RuleSpec>, Vec<(String, RuleSpec)>) {
    let s = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<String>>();
    let mut chain_rules = Vec::new();
    for ipn in ipns {
        let subnet = subnet_of(ipn).to_string();
        chain_rules.push(s(&[
            "-d",
            &subnet,
            "-j",
            "ACCEPT",
            "-m",
            "comment",
            "--comment",
            comment,
        ]));
    }
    chain_rules.push(s(&[
        "!",
        "-d",
        multicast(family),
        "-j",
        "MASQUERADE",
        "-m",
        "comment",
        "--comment",
        comment,
    ]));
    let jumps = ipns
        .iter()
        .map(|ipn| {
            (
                ipn.ip().to_string(),
                s(&[
                    "-s",
                    &ipn.ip().to_string(),
                    "-j",
                    chain,
                    "-m",
                    "comment",
                    "--comment",
                    comment,
                ]),
            )
        })
        .collect();
    (chain_rules, jumps)
}

fn setup_iptables_batch(
    ipt: &Iptables,
    ipns: &[&IpNetwork],
    network: &str,
    container_id: &str,
) -> Result<()> {
    let chain = naming::chain_name(network, container_id);
    let comment = naming::comment(network, container_id);
    let (chain_rules, jumps) = masq_lines(ipt.family(), ipns, &chain, &comment);
    let existing = ipt.list_rules(NAT, POSTROUTING)?;
    let host_len = if ipt.family() == Family::V4 {
        "/32"
    } else {
        "/128"
    };
    // Declaring the chain creates it, or empties it when it exists (it is ours alone).
    let mut lines = vec![vec![
        format!(":{chain}"),
        "-".to_string(),
        "[0:0]".to_string(),
    ]];
    for rule in chain_rules {
        let mut l = vec!["-A".to_string(), chain.clone()];
        l.extend(rule);
        lines.push(l);
    }
    for (src, rule) in jumps {
        let src_spec = format!("{src}{host_len}");
        let present = existing.iter().any(|r| {
            r.target() == Some(chain.as_str())
                && r.spec.windows(2).any(|w| w[0] == "-s" && w[1] == src_spec)
        });
        if !present {
            let mut l = vec!["-A".to_string(), POSTROUTING.to_string()];
            l.extend(rule);
            lines.push(l);
        }
    }
    ipt.restore(NAT, &lines)
}

fn setup_iptables_stepwise(
    ipt: &Iptables,
    ipns: &[&IpNetwork],
    network: &str,
    container_id: &str,
) -> Result<()> {
    let chain = naming::chain_name(network, container_id);
    let comment = naming::comment(network, container_id);
    let ctx = || format!("failed to set up IP masquerade for container {container_id}");
    let (chain_rules, jumps) = masq_lines(ipt.family(), ipns, &chain, &comment);
    ipt.ensure_chain(NAT, &chain)
        .map_err(|e| e.context(ctx()))?;
    for rule in chain_rules {
        let r: Vec<&str> = rule.iter().map(String::as_str).collect();
        ipt.append_unique(NAT, &chain, &r)
            .map_err(|e| e.context(ctx()))?;
    }
    for (_, rule) in jumps {
        let r: Vec<&str> = rule.iter().map(String::as_str).collect();
        ipt.append_unique(NAT, POSTROUTING, &r)
            .map_err(|e| e.context(ctx()))?;
    }
    Ok(())
}

/// Whether an iptables rule spec matches the source `ip` (`-s IP`, `-s IP/32|128`).
fn from_source(spec: &[String], ip: IpAddr) -> bool {
    let host = ip.to_string();
    let cidr = format!("{host}/{}", if ip.is_ipv6() { 128 } else { 32 });
    spec.windows(2)
        .any(|w| w[0] == "-s" && (w[1] == host || w[1] == cidr))
}

/// Removes an attachment's POSTROUTING jumps to `chain` (those from `sources` when known),
/// then the chain unless another attachment still jumps to it: one listing and one
/// transaction normally; the tolerant step-by-step path when the chain is already gone.
fn teardown_iptables(ipt: &Iptables, chain: &str, sources: Option<&[IpAddr]>) -> Result<()> {
    let (jumps, others): (Vec<Vec<String>>, Vec<Vec<String>>) = ipt
        .list_rules(NAT, POSTROUTING)?
        .into_iter()
        .filter(|r| r.target() == Some(chain))
        .map(|r| r.spec)
        .partition(|spec| sources.is_none_or(|s| s.iter().any(|ip| from_source(spec, *ip))));
    if !others.is_empty() {
        let mut lines = Vec::new();
        for spec in &jumps {
            let mut l = vec!["-D".to_string(), POSTROUTING.to_string()];
            l.extend(spec.iter().cloned());
            lines.push(l);
        }
        return if lines.is_empty() {
            Ok(())
        } else {
            ipt.restore(NAT, &lines)
        };
    }
    if jumps.is_empty() {
        // Nothing jumps to it (a repeated DEL, or a half-made ADD): remove it if it exists.
        if ipt.clear_chain(NAT, chain)? {
            ipt.delete_chain(NAT, chain)?;
        }
        return Ok(());
    }
    let mut lines = Vec::new();
    for spec in &jumps {
        let mut l = vec!["-D".to_string(), POSTROUTING.to_string()];
        l.extend(spec.iter().cloned());
        lines.push(l);
    }
    lines.push(vec!["-F".to_string(), chain.to_string()]);
    lines.push(vec!["-X".to_string(), chain.to_string()]);
    if ipt.restore(NAT, &lines).is_ok() {
        return Ok(());
    }
    ipt.remove_chain_and_jumps(NAT, chain, &[POSTROUTING])
        .map(|_| ())
}

fn masq_rule(ipn: &IpNetwork, comment: &str) -> nft::Rule {
    let subnet = subnet_of(ipn);
    nft::Rule::new(
        NFT_FAMILY,
        NFT_TABLE,
        NFT_MASQ_CHAIN,
        build::all([
            build::nfproto(ipn.is_ipv6()),
            build::host(Addr::Saddr, CmpOp::Eq, ipn.ip()),
            build::addr(Addr::Daddr, CmpOp::Neq, subnet),
            build::masquerade(),
        ]),
    )
    .with_comment(comment)
}

fn multicast_return(v6: bool) -> nft::Rule {
    let (addr, len): (std::net::IpAddr, u8) = if v6 {
        (
            std::net::Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0).into(),
            8,
        )
    } else {
        (std::net::Ipv4Addr::new(224, 0, 0, 0).into(), 4)
    };
    let net = IpNetwork::new(addr, len).unwrap_or(IpNetwork::from(addr));
    nft::Rule::new(
        NFT_FAMILY,
        NFT_TABLE,
        NFT_POSTROUTING_CHAIN,
        build::all([
            build::nfproto(v6),
            build::addr(Addr::Daddr, CmpOp::Eq, net),
            build::verdict(Verdict::Return),
        ]),
    )
}

/// The shared objects: the table, `masq_checks`, and `postrouting` holding exactly the
/// multicast returns and `goto masq_checks`. The reference re-adds them and rebuilds
/// `postrouting` on every ADD; [`Shared`] writes only what is missing or differs, so an ADD
/// finding them right commits creations only (nothing for the kernel's deferred destroy to
/// wait on). Being part of the ADD's one batch keeps concurrent ADDs safe.
fn shared_objects() -> Shared {
    let mut s = Shared::new(nft::Table::new(NFT_FAMILY, NFT_TABLE).with_comment(NFT_TABLE_COMMENT));
    s.chain(nft::Chain::new(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN).with_comment(NFT_MASQ_COMMENT))
        .owned_chain(
            nft::Chain::base(
                NFT_FAMILY,
                NFT_TABLE,
                NFT_POSTROUTING_CHAIN,
                "nat",
                Hook::Postrouting,
                SRCNAT_PRIORITY,
                Some(POLICY_ACCEPT),
            ),
            Vec::new(),
            vec![
                multicast_return(false),
                multicast_return(true),
                nft::Rule::new(
                    NFT_FAMILY,
                    NFT_TABLE,
                    NFT_POSTROUTING_CHAIN,
                    build::verdict(Verdict::Goto(NFT_MASQ_CHAIN.into())),
                ),
            ],
        );
    s
}

/// How often a transaction is rebuilt when a rule it deletes vanished meanwhile.
const ATTEMPTS: usize = 5;

fn is_race(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT | libc::EBUSY))
}

fn setup_nftables(
    ipns: &[IpNetwork],
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<()> {
    let ctx = format!("failed to set up IP masquerade (nftables) for container {container_id}");
    let prefix = naming::instance_hash(network, ifname, container_id);
    let comment = naming::instance_comment(network, ifname, container_id);
    let mut sock = nft::Socket::new().map_err(|e| e.context(&ctx))?;
    let shared = shared_objects();
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let mut batch = Batch::new();
        shared
            .plan(&mut sock, &mut batch)
            .map_err(|e| e.context(&ctx))?;
        let stale =
            masq_rules(&mut sock, |c| c.starts_with(&prefix)).map_err(|e| e.context(&ctx))?;
        for handle in stale {
            batch.delete_rule(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN, handle);
        }
        for ipn in ipns {
            batch.add_rule(&masq_rule(ipn, &comment));
        }
        match sock.commit(&batch) {
            Ok(_) => return Ok(()),
            Err(e) if is_race(&e) => last = Some(e),
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

/// Handles of `masq_checks` rules whose comment satisfies `pred` (one dump of that chain).
fn masq_rules(sock: &mut nft::Socket, pred: impl Fn(&str) -> bool) -> Result<Vec<u64>> {
    Ok(sock
        .rules(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN)?
        .into_iter()
        .filter(|r| r.comment().as_deref().is_some_and(&pred))
        .filter_map(|r| r.handle)
        .collect())
}

/// Deletes the `masq_checks` rules whose comment satisfies `pred`; a host without nf_tables
/// has none.
fn delete_nft_rules(pred: impl Fn(&str) -> bool) -> Result<()> {
    let Ok(mut sock) = nft::Socket::new() else {
        return Ok(());
    };
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let mut batch = Batch::new();
        for h in masq_rules(&mut sock, &pred)? {
            batch.delete_rule(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN, h);
        }
        match sock.commit(&batch) {
            Ok(_) => return Ok(()),
            Err(e) if is_race(&e) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Invalid {
        context: String::new(),
        detail: "retries exhausted".into(),
    }))
}

/// Removes an attachment's POSTROUTING jumps to the iptables chain `CNI-<hash>` (those from
/// `sources` when known) and the chain once nothing jumps to it: over netlink where
/// iptables-nft keeps them (`ip nat` / `ip6 nat` in nf_tables), and with the iptables tool
/// where legacy tables are in use. Nothing else of the table is read.
fn teardown_iptables_any(family: Family, chain: &str, sources: Option<&[IpAddr]>) -> Result<()> {
    if let Ok(mut sock) = nft::Socket::new() {
        xt_cleanup::remove_jumps_naming(
            &mut sock,
            host::nft_family(family),
            NAT,
            chain,
            &[POSTROUTING],
            sources,
        )?;
    }
    if host::legacy_table_in_use(family, NAT) {
        match teardown_iptables(&Iptables::legacy(family), chain, sources) {
            Ok(()) => {}
            Err(e) if e.is_tool_missing() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Removes the masquerading of one attachment in BOTH backends (it may have been set up by
/// another version, configuration or the reference plugins). The nftables rules are found by
/// container and interface on any network; the iptables chain by the reference's name, a hash
/// of network and container (a DEL naming another network leaves it to that network's GC).
/// Failures are collected and reported together after trying everything.
pub fn teardown(network: &str, ifname: &str, container_id: &str) -> Result<()> {
    teardown_families(
        network,
        ifname,
        container_id,
        &[Family::V4, Family::V6],
        &[],
    )
}

/// Like [`teardown`], with iptables restricted to the families the attachment had addresses
/// in, and to the jumps from its addresses `sources` (when the caller knows them; empty:
/// every jump to the chain of (network, container)).
pub fn teardown_families(
    network: &str,
    ifname: &str,
    container_id: &str,
    families: &[Family],
    sources: &[IpAddr],
) -> Result<()> {
    let mut errors = Vec::new();
    let chain = naming::chain_name(network, container_id);
    for family in families {
        let mine: Vec<IpAddr> = sources
            .iter()
            .copied()
            .filter(|ip| Family::of(ip) == *family)
            .collect();
        let sources = (!sources.is_empty()).then_some(mine.as_slice());
        if let Err(e) = teardown_iptables_any(*family, &chain, sources) {
            errors.push(e.to_string());
        }
    }
    // The network is not part of the match: the attachment's rules go even when this DEL
    // names another network than its ADD did.
    if let Err(e) = delete_nft_rules(|c| naming::names_attachment(c, ifname, container_id)) {
        errors.push(e.to_string());
    }
    join_errors(
        errors,
        &format!("failed to tear down IP masquerade for container {container_id}"),
    )
}

fn join_errors(errors: Vec<String>, context: &str) -> Result<()> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid {
            context: context.to_string(),
            detail: errors.join("; "),
        })
    }
}

/// Whether the masquerading of `ipns` is in place (for CHECK).
pub fn verify(
    backend: Backend,
    ipns: &[IpNetwork],
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<()> {
    match backend {
        Backend::Iptables => {
            let chain = naming::chain_name(network, container_id);
            let comment = naming::comment(network, container_id);
            for ipn in ipns {
                let ipt = Iptables::for_table(Family::of(&ipn.ip()), NAT);
                let src = ipn.ip().to_string();
                if !ipt.exists(
                    NAT,
                    POSTROUTING,
                    &[
                        "-s",
                        &src,
                        "-j",
                        &chain,
                        "-m",
                        "comment",
                        "--comment",
                        &comment,
                    ],
                )? {
                    return Err(Error::Invalid {
                        context: format!("IP masquerade for {ipn}"),
                        detail: format!("no {} nat POSTROUTING rule jumps to {chain}", ipt.tool()),
                    });
                }
            }
            Ok(())
        }
        Backend::Nftables => {
            let prefix = naming::instance_hash(network, ifname, container_id);
            let found = masq_rules(&mut nft::Socket::new()?, |c| c.starts_with(&prefix))?.len();
            if found < ipns.len() {
                return Err(Error::Invalid {
                    context: format!("IP masquerade for container {container_id}"),
                    detail: format!(
                        "expected {} nftables masquerade rules, found {found}",
                        ipns.len()
                    ),
                });
            }
            Ok(())
        }
    }
}

/// CHECK without a configured backend: the rules may be in either backend (the default
/// depends on what the network had when ADD ran).
pub fn verify_default(
    ipns: &[IpNetwork],
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<()> {
    match verify(Backend::Nftables, ipns, network, ifname, container_id) {
        Ok(()) => Ok(()),
        Err(nft_err) => {
            verify(Backend::Iptables, ipns, network, ifname, container_id).map_err(|_| nft_err)
        }
    }
}

/// Garbage collection: removes the masquerading of every attachment of `network` that is not in
/// `valid` ((containerID, ifname) pairs), in both backends. iptables rules are keyed by
/// container only, so a container with any valid attachment keeps its chain.
pub fn gc(network: &str, valid: &[(String, String)]) -> Result<()> {
    let mut errors = Vec::new();
    let valid_cids: HashSet<&str> = valid.iter().map(|(c, _)| c.as_str()).collect();
    let (head, tail) = comment_affixes(network);
    let stale_cid = |comment: Option<String>, target: Option<&str>| -> Option<String> {
        let c = comment?;
        let cid = c.strip_prefix(head.as_str())?.strip_suffix(tail)?;
        (!valid_cids.contains(cid) && target == Some(naming::chain_name(network, cid).as_str()))
            .then(|| cid.to_string())
    };
    let mut sock = nft::Socket::new().ok();
    for family in [Family::V4, Family::V6] {
        // iptables-nft rules, over netlink.
        if let Some(sock) = sock.as_mut() {
            let nf = host::nft_family(family);
            match sock.rules(nf, NAT, POSTROUTING) {
                Ok(rules) => {
                    let stale: HashSet<String> = rules
                        .iter()
                        .filter_map(|r| stale_cid(nft::xt::rule_comment(r), r.target_chain()))
                        .collect();
                    for cid in stale {
                        let chain = naming::chain_name(network, &cid);
                        if let Err(e) = xt_cleanup::remove_chain_and_jumps(
                            sock,
                            nf,
                            NAT,
                            &chain,
                            &[POSTROUTING],
                        ) {
                            errors.push(e.to_string());
                        }
                    }
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        // Legacy tables, with the tool.
        if !host::legacy_table_in_use(family, NAT) {
            continue;
        }
        let ipt = Iptables::legacy(family);
        let rules = match ipt.list_rules(NAT, POSTROUTING) {
            Ok(r) => r,
            Err(e) if e.is_tool_missing() => continue,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let stale: HashSet<String> = rules
            .iter()
            .filter_map(|r| stale_cid(r.comment().map(str::to_string), r.target()))
            .collect();
        for cid in stale {
            if let Err(e) =
                ipt.remove_chain_and_jumps(NAT, &naming::chain_name(network, &cid), &[POSTROUTING])
            {
                errors.push(e.to_string());
            }
        }
    }
    let net_prefix = format!("{}-", naming::short_hash(network));
    let keep: HashSet<String> = valid
        .iter()
        .map(|(c, i)| naming::instance_hash(network, i, c))
        .collect();
    let stale_nft =
        |c: &str| c.starts_with(&net_prefix) && !keep.iter().any(|k| c.starts_with(k.as_str()));
    if let Err(e) = delete_nft_rules(stale_nft) {
        errors.push(e.to_string());
    }
    join_errors(
        errors,
        &format!("failed to garbage-collect IP masquerade rules of network {network}"),
    )
}

/// `name: "<net>" id: "` and `"`: what surrounds the container ID in an iptables comment.
fn comment_affixes(network: &str) -> (String, &'static str) {
    let full = naming::comment(network, "");
    let head = full.strip_suffix('"').unwrap_or(&full).to_string();
    (head, "\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comment_affixes_surround_cid() {
        let (head, tail) = comment_affixes("net");
        let c = naming::comment("net", "abc");
        assert_eq!(
            c.strip_prefix(head.as_str())
                .and_then(|c| c.strip_suffix(tail)),
            Some("abc")
        );
    }

    #[test]
    fn masq_rule_matches_the_subnet() {
        let r = masq_rule(&"10.1.0.5/24".parse().unwrap(), "c");
        let want = build::addr(Addr::Daddr, CmpOp::Neq, "10.1.0.0/24".parse().unwrap());
        assert!(r.exprs.windows(want.len()).any(|w| w == want.as_slice()));
        assert_eq!(r.comment().as_deref(), Some("c"));
        let r6 = masq_rule(&"fd00::5/64".parse().unwrap(), "c");
        assert_eq!(r6.exprs[..2], build::nfproto(true)[..]);
    }

    #[test]
    fn backend_names() {
        assert_eq!(Backend::parse("iptables"), Some(Backend::Iptables));
        assert_eq!(Backend::parse("nftables"), Some(Backend::Nftables));
        assert_eq!(Backend::parse("ebtables"), None);
    }
}
