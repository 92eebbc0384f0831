//! The IFB device name, identical to the reference's so both plugins find each other's
//! devices: `bwp` + the first 12 hex digits of sha512(network name + container id). The name
//! is a one-way hash, so ours also carry an alias naming the attachment, which is what lets GC
//! find the IFBs of attachments that will never see a DEL.

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

/// The alias set on the IFB of (network, container).
pub fn ifb_alias(network: &str, container_id: &str) -> String {
    format!("{ALIAS_PREFIX}{network}{ALIAS_CONTAINER}{container_id}")
}

/// (network, container) from an alias written by [`ifb_alias`].
fn parse_alias(alias: &str) -> Option<(&str, &str)> {
    alias
        .strip_prefix(ALIAS_PREFIX)?
        .rsplit_once(ALIAS_CONTAINER)
}

/// An IFB link as GC sees it.
pub struct IfbLink<'a> {
    pub name: &'a str,
    pub alias: Option<&'a str>,
}

/// The IFBs GC removes: ours (alias and name agree) for `network` whose container is not in
/// `valid_containers`. IFBs without our alias — the reference's, or anyone else's — are left
/// alone: nothing says which attachment they belong to.
pub fn gc_victims<'a>(
    ifbs: &[IfbLink<'a>],
    network: &str,
    valid_containers: &[&str],
) -> Vec<&'a str> {
    ifbs.iter()
        .filter_map(|l| {
            let (net, cid) = parse_alias(l.alias?)?;
            let ours = net == network && l.name == ifb_name(net, cid);
            (ours && !valid_containers.contains(&cid)).then_some(l.name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let alias = ifb_alias("net.with-dots_1", &cid);
        assert_eq!(parse_alias(&alias), Some(("net.with-dots_1", cid.as_str())));
        assert!(alias.len() < 256, "IFALIASZ");
        assert_eq!(parse_alias("some operator's note"), None);
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
            ifb_alias("net1", "keep"),
            ifb_alias("net1", "gone"),
            ifb_alias("net2", "other-net-gone"),
        ];
        let forged = ifb_alias("net1", "someone-else");
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
        assert_eq!(
            gc_victims(&ifbs, "net1", &["keep"]),
            vec![names[1].as_str()]
        );
        assert_eq!(
            gc_victims(&ifbs, "net1", &[]),
            vec![names[0].as_str(), names[1].as_str()]
        );
        assert!(gc_victims(&ifbs, "net3", &[]).is_empty());
    }
}
