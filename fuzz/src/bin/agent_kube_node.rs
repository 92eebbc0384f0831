//! A Node as anyone with write access to Nodes (a kubelet, an operator, another node's flanneld)
//! leaves it: its podCIDRs and its annotations under the prefix. Input: the podCIDRs, comma
//! separated, then NUL-separated `name=value` annotations (the name without the prefix). The
//! node is read as a lease (single- and dual-stack), held to the rules every lease meets, and
//! put through the node index as a listing, an update by a node created earlier with the same
//! podCIDRs, and a deletion. The backend flags a Node may set for its own agent (`bgp-as`,
//! `bgp-peers`) are read as the agent reads them at start: the flag's check, and the peers'
//! parser. Invariants: no panic; the index never holds two leases for one key.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use ferrocni_agent::backend::bgp::options::{parse_peers_flag, PEERS};
use ferrocni_agent::backend::registry;
use ferrocni_agent::manager::kube::annotations::{Annotations, NodeFacts, DEFAULT_PREFIX};
use ferrocni_agent::manager::kube::index::NodeIndex;
use ferrocni_agent::manager::Change;
use ferrocni_agent::subnet::config::NetConfig;
use ferrocni_agent::subnet::key::SubnetKey;
use libfuzzer_sys::fuzz_target;

fn network() -> &'static NetConfig {
    static NET: OnceLock<NetConfig> = OnceLock::new();
    NET.get_or_init(|| {
        NetConfig::parse(
            "/etc/kube-flannel/net-conf.json",
            br#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#,
        )
        .expect("the network config parses")
    })
}

fn node(
    name: &str,
    created: i64,
    cidrs: &str,
    annotations: &BTreeMap<String, String>,
) -> NodeFacts {
    NodeFacts {
        name: name.to_string(),
        created,
        pod_cidrs: cidrs.split(',').map(str::to_string).collect(),
        annotations: annotations.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut fields = text.split('\0');
    let cidrs = fields.next().unwrap_or_default();
    let annotations: BTreeMap<String, String> = fields
        .map(|f| {
            let (name, value) = f.split_once('=').unwrap_or((f, ""));
            (format!("{DEFAULT_PREFIX}/{name}"), value.to_string())
        })
        .collect();
    let names = Annotations::new(DEFAULT_PREFIX).expect("the default prefix");
    let own = SubnetKey::parse("10.244.9.0-24&fd00:10:244:9::-64").expect("own key");
    for flag in registry::flags().filter(|f| f.per_node) {
        if let Some(value) = annotations.get(&names.named(flag.annotation_suffix())) {
            let _ = (flag.check)(value);
            if flag.name == PEERS.name {
                let _ = parse_peers_flag(value);
            }
        }
    }
    for dual_stack in [false, true] {
        let peer = node("peer", 2, cidrs, &annotations);
        if let Some(lease) = names.lease_of(&peer, dual_stack) {
            if let (Some(key), Ok(attrs)) = (lease.key, &lease.attrs) {
                let own = if dual_stack {
                    own
                } else {
                    SubnetKey { v6: None, ..own }
                };
                let rules = network().rules(
                    own,
                    "192.168.0.9".parse().expect("ip"),
                    Some("fd00:9::9".parse().expect("ip6")),
                );
                let _ = rules.check_lease(&key, attrs);
                let _ = names.published(attrs, &peer);
            }
        }
        let mut index = NodeIndex::new(names.clone(), dual_stack, "own");
        index.replace(
            vec![node("own", 1, "10.244.9.0/24", &BTreeMap::new()), peer],
            "1".into(),
        );
        let older = node("older", 0, cidrs, &annotations);
        let changes = index.node_changed(older);
        let mut put = std::collections::BTreeSet::new();
        for change in &changes {
            if let Change::Put { key, .. } = change {
                assert!(put.insert(*key), "two leases for {key}: {changes:?}");
            }
        }
        let snapshot = index.snapshot();
        let _ = index.node_deleted("peer");
        let _ = index.node_deleted("older");
        assert!(snapshot.leases.len() <= 2, "{:?}", snapshot.leases);
    }
});
