//! The agent's table `inet ferrocni_policy` read in its netns, one verdict map, set or chain
//! at a time (never the whole table), and what a change shows there once enforced.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::process::Stdio;

use serde_json::Value;

use crate::Netns;

pub(super) const TABLE: &str = "ferrocni_policy";
/// The verdict maps (the rest of the table's sets are the plan's).
const MAPS: [&str; 4] = ["ingress4", "ingress6", "egress4", "egress6"];

/// The keys of set or verdict map `name`, `None` when it cannot be read. Listing one set
/// reads only it (a few ms); `nft get element` or `list chain` read every set's elements
/// first (some 40 ms at 10,000 elements).
pub(super) fn members(ns: &Netns, name: &str) -> Option<BTreeSet<String>> {
    let what = if MAPS.contains(&name) { "map" } else { "set" };
    let out = ns
        .command(&["nft", "-j", "list", what, "inet", TABLE, name])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let doc: Value = serde_json::from_slice(&out.stdout).ok()?;
    let entries = doc["nftables"].as_array()?;
    let elements = entries.iter().find_map(|e| e[what]["elem"].as_array());
    // A set's element is its key; a map's a [key, verdict] pair.
    let key = |e: &Value| match e {
        Value::Array(pair) => pair.first().and_then(Value::as_str).map(String::from),
        other => other.as_str().map(String::from),
    };
    Some(elements.into_iter().flatten().filter_map(key).collect())
}

/// The rules of `ip`'s ingress chain (empty when it has none).
pub(super) fn ingress_chain(ns: &Netns, ip: Ipv4Addr) -> String {
    ns.command(&[
        "nft",
        "list",
        "chain",
        "inet",
        TABLE,
        &format!("ingress-{ip}"),
    ])
    .stderr(Stdio::null())
    .output()
    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    .unwrap_or_default()
}

/// Whether `text` has the number `n` as a word of its own.
pub(super) fn has_number(text: &str, n: u16) -> bool {
    let n = n.to_string();
    text.split(|c: char| !c.is_ascii_digit()).any(|w| w == n)
}

/// The table's set names, without their elements.
pub(super) fn set_names(ns: &Netns) -> Vec<String> {
    let doc = ns
        .command(&["nft", "-j", "-t", "list", "sets", "inet"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
        .unwrap_or_default();
    doc["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["set"]["table"] == TABLE)
        .filter_map(|e| e["set"]["name"].as_str().map(String::from))
        .collect()
}

/// One change the bench makes and what the kernel shows once it is enforced.
pub(super) enum Landed {
    /// The address is (or is no longer) a key of the ingress verdict map, or an element of
    /// a set.
    InSet {
        set: String,
        ip: Ipv4Addr,
        present: bool,
    },
    /// The ingress chain of `ip` names (or no longer names) a policy.
    ChainNames {
        ip: Ipv4Addr,
        marker: String,
        present: bool,
    },
    /// The ingress chain of `ip` has port `port`.
    ChainPort { ip: Ipv4Addr, port: u16 },
}

/// Sets listed during one look at the kernel, by name.
pub(super) type Listed = BTreeMap<String, Option<BTreeSet<String>>>;

impl Landed {
    /// Whether the change shows in the kernel; each set is listed once for all the changes
    /// of one look.
    pub(super) fn holds_in(&self, ns: &Netns, listed: &mut Listed) -> bool {
        match self {
            Landed::InSet { set, ip, present } => {
                let keys = listed
                    .entry(set.clone())
                    .or_insert_with(|| members(ns, set));
                keys.as_ref()
                    .is_some_and(|k| k.contains(&ip.to_string()) == *present)
            }
            Landed::ChainNames {
                ip,
                marker,
                present,
            } => ingress_chain(ns, *ip).contains(marker.as_str()) == *present,
            Landed::ChainPort { ip, port } => has_number(&ingress_chain(ns, *ip), *port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_whole_words() {
        assert!(has_number("tcp dport { 8003, 9001 } accept", 9001));
        assert!(!has_number("tcp dport 19001 accept", 9001));
    }
}
