//! The IFB device name, identical to the reference's so both plugins find each other's
//! devices: `bwp` + the first 12 hex digits of sha512(network name + container id). The name
//! is a one-way hash, so ours also carry an alias naming the attachment, which is what lets GC
//! find the IFBs of attachments that will never see a DEL.
//!
//! The name holds no interface: one network attached twice to a container (two interfaces)
//! would need the same IFB, so the second attachment's egress shaping fails to ADD, as with
//! the reference. The alias names the interface too, so that attachment's DEL (the runtime's
//! cleanup after the failed ADD) leaves the first one's IFB, whose redirect would otherwise
//! send the first interface's traffic to a device that is gone.

use sha2::{Digest, Sha512};

const PREFIX: &str = "bwp";
const MAX_IFNAME_LEN: usize = 15;

pub fn ifb_name(network: &str, container_id: &str) -> String {
    let digest = Sha512::new()
        .chain_update(network.as_bytes())
        .chain_update(container_id.as_bytes())
        .finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{}", &hex[..MAX_IFNAME_LEN - PREFIX.len()])
}

const ALIAS_PREFIX: &str = "ferrocni-bandwidth network=";
const ALIAS_CONTAINER: &str = " container=";
const ALIAS_IFNAME: &str = " ifname=";

/// The alias set on the IFB of the attachment (network, container, interface).
pub fn ifb_alias(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{ALIAS_PREFIX}{network}{ALIAS_CONTAINER}{container_id}{ALIAS_IFNAME}{ifname}")
}

/// The attachment named by an alias written by [`ifb_alias`]: network, container and, but in
/// aliases of earlier versions, interface. (Neither a container ID nor an interface name
/// holds a space.)
fn parse_alias(alias: &str) -> Option<(&str, &str, Option<&str>)> {
    let rest = alias.strip_prefix(ALIAS_PREFIX)?;
    let (rest, ifname) = match rest.rsplit_once(ALIAS_IFNAME) {
        Some((rest, ifname)) => (rest, Some(ifname)),
        None => (rest, None),
    };
    let (network, cid) = rest.rsplit_once(ALIAS_CONTAINER)?;
    Some((network, cid, ifname))
}

/// Whether the IFB with `alias` is the attachment's (network, container, `ifname`) to
/// remove: the reference's carry no alias and ours of earlier versions no interface, and
/// those are taken as the attachment's, as before; only an alias naming another interface
/// (or another attachment altogether) keeps the IFB.
pub fn belongs_to(alias: Option<&str>, network: &str, container_id: &str, ifname: &str) -> bool {
    match alias.and_then(parse_alias) {
        Some((net, cid, own)) => {
            net == network && cid == container_id && own.is_none_or(|own| own == ifname)
        }
        None => true,
    }
}

/// Whether an IFB is ours (alias and name agree) for the container interface (`container_id`,
/// `ifname`), whatever network it names: a container holds one interface of a name, so a DEL
/// naming another network than the ADD did finds it by its alias.
pub fn made_for(name: &str, alias: Option<&str>, container_id: &str, ifname: &str) -> bool {
    alias.and_then(parse_alias).is_some_and(|(net, cid, own)| {
        cid == container_id && own == Some(ifname) && name == ifb_name(net, cid)
    })
}

/// An IFB link as GC sees it.
pub struct IfbLink<'a> {
    pub name: &'a str,
    pub alias: Option<&'a str>,
}

/// The IFBs GC removes: ours (alias and name agree) for `network` whose attachment is not in
/// `valid` (container ID, ifname; an alias without an interface: any of the container's).
/// IFBs without our alias — the reference's, or anyone else's — are left alone: nothing says
/// which attachment they belong to.
pub fn gc_victims<'a>(
    ifbs: &[IfbLink<'a>],
    network: &str,
    valid: &[(String, String)],
) -> Vec<&'a str> {
    ifbs.iter()
        .filter_map(|l| {
            let (net, cid, ifname) = parse_alias(l.alias?)?;
            let ours = net == network && l.name == ifb_name(net, cid);
            let live = valid
                .iter()
                .any(|(c, i)| c == cid && ifname.is_none_or(|own| own == i));
            (ours && !live).then_some(l.name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_for_the_interface_on_any_network() {
        let name = ifb_name("net-a", "cid");
        let alias = ifb_alias("net-a", "cid", "eth0");
        assert!(made_for(&name, Some(&alias), "cid", "eth0"));
        assert!(!made_for(&name, Some(&alias), "cid", "eth1"));
        assert!(!made_for(&name, Some(&alias), "cid2", "eth0"));
        // Name and alias disagree: not ours; no alias or no interface in it: nothing says whose.
        assert!(!made_for(
            &ifb_name("net-b", "cid"),
            Some(&alias),
            "cid",
            "eth0"
        ));
        assert!(!made_for(&name, None, "cid", "eth0"));
        let old_alias = format!("{ALIAS_PREFIX}net-a{ALIAS_CONTAINER}cid");
        assert!(!made_for(&name, Some(&old_alias), "cid", "eth0"));
    }

    #[test]
    fn matches_the_reference_name() {
        // Observed from /usr/lib/cni/bandwidth with network "bwnet" and container "cid1".
        assert_eq!(ifb_name("bwnet", "cid1"), "bwp9aa1ffe1e8dd");
        assert_eq!(ifb_name("bwnet", "cid1").len(), 15);
        assert_ne!(ifb_name("bwnet", "cid2"), ifb_name("bwnet", "cid1"));
    }

    #[test]
    fn alias_round_trips_and_fits_the_kernel_limit() {
        let cid = "c".repeat(64);
        let alias = ifb_alias("net.with-dots_1", &cid, "eth0");
        assert_eq!(
            parse_alias(&alias),
            Some(("net.with-dots_1", cid.as_str(), Some("eth0")))
        );
        assert!(alias.len() < 256, "IFALIASZ");
        assert_eq!(parse_alias("some operator's note"), None);
        // An earlier version's alias names no interface.
        let old = format!("{ALIAS_PREFIX}n{ALIAS_CONTAINER}c1");
        assert_eq!(parse_alias(&old), Some(("n", "c1", None)));
    }

    #[test]
    fn a_del_takes_its_own_attachments_ifb_only() {
        let mine = ifb_alias("n", "c1", "eth0");
        assert!(belongs_to(Some(&mine), "n", "c1", "eth0"));
        assert!(!belongs_to(Some(&mine), "n", "c1", "net1"));
        assert!(!belongs_to(Some(&mine), "n2", "c1", "eth0"));
        // The reference's (no alias) and earlier versions' (no interface): as before.
        assert!(belongs_to(None, "n", "c1", "net1"));
        let old = format!("{ALIAS_PREFIX}n{ALIAS_CONTAINER}c1");
        assert!(belongs_to(Some(&old), "n", "c1", "net1"));
    }

    #[test]
    fn gc_takes_only_our_stale_ifbs_of_this_network() {
        let names: Vec<String> = ["keep", "gone", "other-net-gone"]
            .iter()
            .map(|c| {
                ifb_name(
                    if c.starts_with("other") {
                        "net2"
                    } else {
                        "net1"
                    },
                    c,
                )
            })
            .collect();
        let aliases = [
            ifb_alias("net1", "keep", "eth0"),
            ifb_alias("net1", "gone", "eth0"),
            ifb_alias("net2", "other-net-gone", "eth0"),
        ];
        let forged = ifb_alias("net1", "someone-else", "eth0");
        let ifbs = vec![
            IfbLink {
                name: &names[0],
                alias: Some(&aliases[0]),
            },
            IfbLink {
                name: &names[1],
                alias: Some(&aliases[1]),
            },
            IfbLink {
                name: &names[2],
                alias: Some(&aliases[2]),
            },
            // The reference's IFBs carry no alias.
            IfbLink {
                name: "bwp0123456789ab",
                alias: None,
            },
            // An alias that does not match the name is not ours.
            IfbLink {
                name: "bwpfeedfeedfeed",
                alias: Some(&forged),
            },
        ];
        let valid = |c: &str, i: &str| vec![(c.to_string(), i.to_string())];
        assert_eq!(
            gc_victims(&ifbs, "net1", &valid("keep", "eth0")),
            vec![names[1].as_str()]
        );
        // Another interface of the container is not the IFB's attachment.
        assert_eq!(
            gc_victims(&ifbs, "net1", &valid("keep", "net1")),
            vec![names[0].as_str(), names[1].as_str()]
        );
        assert_eq!(
            gc_victims(&ifbs, "net1", &[]),
            vec![names[0].as_str(), names[1].as_str()]
        );
        assert!(gc_victims(&ifbs, "net3", &[]).is_empty());
    }
}
