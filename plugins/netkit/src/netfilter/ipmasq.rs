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
//! and the POSTROUTING jumps are found by listing; nftables rules are found by comment.

use std::collections::HashSet;

use ipnetwork::IpNetwork;
use serde_json::{json, Value};

use super::exec::{Error, Result};
use super::iptables::{Family, Iptables};
use super::naming;
use super::nftables as nft;

const NAT: &str = "nat";
const POSTROUTING: &str = "POSTROUTING";
/// nftables objects of the reference implementation.
pub const NFT_TABLE: &str = "cni_plugins_masquerade";
pub const NFT_FAMILY: &str = "inet";
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

    /// The command-line tool this backend runs.
    pub fn tool(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nft",
        }
    }

    /// Whether this backend's tool is installed (a file lookup, not a run).
    pub fn is_installed(self) -> bool {
        super::exec::find_tool(self.tool()).is_some()
    }

    /// The reference default: iptables, unless only nftables is available. Decided by which
    /// tools are installed (a file lookup) rather than by running them, to keep ADD fast.
    pub fn default_for_host() -> Backend {
        if !Backend::Iptables.is_installed() && Backend::Nftables.is_installed() {
            Backend::Nftables
        } else {
            Backend::Iptables
        }
    }
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
        let ipt = Iptables::new(family);
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

/// Removes an attachment's chain and the POSTROUTING rules jumping to it: one listing and
/// one transaction normally; the tolerant step-by-step path when the chain is already gone.
fn teardown_iptables(ipt: &Iptables, chain: &str) -> Result<()> {
    let jumps: Vec<Vec<String>> = ipt
        .list_rules(NAT, POSTROUTING)?
        .into_iter()
        .filter(|r| r.target() == Some(chain))
        .map(|r| r.spec)
        .collect();
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

fn masq_rule_expr(ipn: &IpNetwork) -> Vec<Value> {
    let proto = if ipn.is_ipv4() { "ip" } else { "ip6" };
    let subnet = subnet_of(ipn);
    vec![
        json!({"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "saddr"}}, "right": ipn.ip().to_string()}}),
        json!({"match": {"op": "!=", "left": {"payload": {"protocol": proto, "field": "daddr"}},
            "right": {"prefix": {"addr": subnet.network().to_string(), "len": subnet.prefix()}}}}),
        json!({"masquerade": null}),
    ]
}

fn multicast_return(proto: &str, addr: &str, len: u8) -> Value {
    nft::rule(
        NFT_FAMILY,
        NFT_TABLE,
        NFT_POSTROUTING_CHAIN,
        vec![
            json!({"match": {"op": "==", "left": {"payload": {"protocol": proto, "field": "daddr"}}, "right": {"prefix": {"addr": addr, "len": len}}}}),
            json!({"return": null}),
        ],
        None,
    )
}

fn setup_nftables(
    ipns: &[IpNetwork],
    network: &str,
    ifname: &str,
    container_id: &str,
) -> Result<()> {
    let ctx = format!("failed to set up IP masquerade (nftables) for container {container_id}");
    let prefix = naming::instance_hash(network, ifname, container_id);
    let stale = find_nft_rules(|c| c.starts_with(&prefix)).map_err(|e| e.context(&ctx))?;
    let mut tx = vec![
        nft::add(json!({"table": {"family": NFT_FAMILY, "name": NFT_TABLE,
            "comment": "Masquerading for plugins from github.com/containernetworking/plugins"}})),
        nft::add(
            json!({"chain": {"family": NFT_FAMILY, "table": NFT_TABLE, "name": NFT_MASQ_CHAIN,
            "comment": "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet"}}),
        ),
        nft::add(
            json!({"chain": {"family": NFT_FAMILY, "table": NFT_TABLE, "name": NFT_POSTROUTING_CHAIN,
            "type": "nat", "hook": "postrouting", "prio": SRCNAT_PRIORITY, "policy": "accept"}}),
        ),
        nft::flush(nft::chain(NFT_FAMILY, NFT_TABLE, NFT_POSTROUTING_CHAIN)),
        nft::add(multicast_return("ip", "224.0.0.0", 4)),
        nft::add(multicast_return("ip6", "ff00::", 8)),
        nft::add(nft::rule(
            NFT_FAMILY,
            NFT_TABLE,
            NFT_POSTROUTING_CHAIN,
            vec![json!({"goto": {"target": NFT_MASQ_CHAIN}})],
            None,
        )),
    ];
    for handle in stale {
        tx.push(nft::delete_rule(
            NFT_FAMILY,
            NFT_TABLE,
            NFT_MASQ_CHAIN,
            handle,
        ));
    }
    let comment = naming::instance_comment(network, ifname, container_id);
    for ipn in ipns {
        tx.push(nft::add(nft::rule(
            NFT_FAMILY,
            NFT_TABLE,
            NFT_MASQ_CHAIN,
            masq_rule_expr(ipn),
            Some(&comment),
        )));
    }
    nft::apply(tx, &ctx)
}

/// Handles of `masq_checks` rules whose comment satisfies `keep_if`.
fn find_nft_rules(pred: impl Fn(&str) -> bool) -> Result<Vec<u64>> {
    let Some(rules) = nft::list_chain(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN)? else {
        return Ok(Vec::new());
    };
    Ok(rules
        .into_iter()
        .filter(|r| r.comment.as_deref().is_some_and(&pred))
        .map(|r| r.handle)
        .collect())
}

/// Removes the masquerading of one attachment in BOTH backends (it may have been set up by
/// another version or configuration). A tool that is not installed is skipped; other failures
/// are collected and reported together after trying everything.
pub fn teardown(network: &str, ifname: &str, container_id: &str) -> Result<()> {
    teardown_families(network, ifname, container_id, &[Family::V4, Family::V6])
}

/// Like [`teardown`], with iptables restricted to the families the attachment had addresses
/// in (when the caller knows them), to save tool runs.
pub fn teardown_families(
    network: &str,
    ifname: &str,
    container_id: &str,
    families: &[Family],
) -> Result<()> {
    let mut errors = Vec::new();
    // The nftables listing runs while iptables works.
    let nft_listing = nft::spawn_list_chain(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN);
    let chain = naming::chain_name(network, container_id);
    for family in families {
        match teardown_iptables(&Iptables::new(*family), &chain) {
            Ok(()) => {}
            Err(e) if e.is_tool_missing() => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    let prefix = naming::instance_hash(network, ifname, container_id);
    let nft_result = nft_listing
        .and_then(|p| nft::finish_list_chain(p, NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN))
        .and_then(|rules| {
            let tx: Vec<Value> = rules
                .into_iter()
                .flatten()
                .filter(|r| r.comment.as_deref().is_some_and(|c| c.starts_with(&prefix)))
                .map(|r| nft::delete_rule(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN, r.handle))
                .collect();
            nft::apply(tx, "failed to delete nftables masquerade rules")
        });
    if let Err(e) = nft_result {
        if !e.is_tool_missing() {
            errors.push(e.to_string());
        }
    }
    join_errors(
        errors,
        &format!("failed to tear down IP masquerade for container {container_id}"),
    )
}

fn delete_nft_rules(pred: impl Fn(&str) -> bool) -> Result<()> {
    let handles = find_nft_rules(pred)?;
    let tx = handles
        .into_iter()
        .map(|h| nft::delete_rule(NFT_FAMILY, NFT_TABLE, NFT_MASQ_CHAIN, h))
        .collect();
    nft::apply(tx, "failed to delete nftables masquerade rules")
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
                let ipt = Iptables::new(Family::of(&ipn.ip()));
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
            let found = find_nft_rules(|c| c.starts_with(&prefix))?.len();
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

/// Garbage collection: removes the masquerading of every attachment of `network` that is not in
/// `valid` ((containerID, ifname) pairs), in both backends. iptables rules are keyed by
/// container only, so a container with any valid attachment keeps its chain.
pub fn gc(network: &str, valid: &[(String, String)]) -> Result<()> {
    let mut errors = Vec::new();
    let valid_cids: HashSet<&str> = valid.iter().map(|(c, _)| c.as_str()).collect();
    let (head, tail) = comment_affixes(network);
    for family in [Family::V4, Family::V6] {
        let ipt = Iptables::new(family);
        let rules = match ipt.list_rules(NAT, POSTROUTING) {
            Ok(r) => r,
            Err(e) if e.is_tool_missing() => continue,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let mut stale = HashSet::new();
        for rule in &rules {
            let Some(cid) = rule
                .comment()
                .and_then(|c| c.strip_prefix(head.as_str()))
                .and_then(|c| c.strip_suffix(tail))
            else {
                continue;
            };
            if valid_cids.contains(cid)
                || rule.target() != Some(naming::chain_name(network, cid).as_str())
            {
                continue;
            }
            stale.insert(cid.to_string());
        }
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
        if !e.is_tool_missing() {
            errors.push(e.to_string());
        }
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
    fn masq_expr_uses_subnet() {
        let e = masq_rule_expr(&"10.1.0.5/24".parse().unwrap());
        assert_eq!(e[0]["match"]["right"], "10.1.0.5");
        assert_eq!(e[1]["match"]["right"]["prefix"]["addr"], "10.1.0.0");
        assert_eq!(e[1]["match"]["right"]["prefix"]["len"], 24);
        let e = masq_rule_expr(&"fd00::5/64".parse().unwrap());
        assert_eq!(e[0]["match"]["left"]["payload"]["protocol"], "ip6");
    }

    #[test]
    fn backend_names() {
        assert_eq!(Backend::parse("iptables"), Some(Backend::Iptables));
        assert_eq!(Backend::parse("nftables"), Some(Backend::Nftables));
        assert_eq!(Backend::parse("ebtables"), None);
    }
}
