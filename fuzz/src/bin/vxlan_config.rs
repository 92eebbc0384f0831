//! The vxlan plugin's config (`OverlayConfig::from_map`, and `from_json_text` as its
//! reconcile command reads a config file), its peer entries (`PeerSet`) and the desired
//! kernel state computed from them (`desired::desired_state`). Invariants: the node's own
//! subnet and every accepted peer subnet lie inside the network; a refusal is a
//! well-formed CNI error.
#![no_main]

use std::net::IpAddr;

use ferrocni_fuzz::{check_error, request, split_config};
use libfuzzer_sys::fuzz_target;
use overlay::config::inside;
use overlay::desired::{desired_state, own_subnet, NodeFacts};
use overlay::{OverlayConfig, PeerSet};

fn overlay(cfg: &OverlayConfig) {
    if let Some(subnet) = cfg.subnet {
        assert!(
            inside(subnet, cfg.network),
            "{subnet} accepted outside {}",
            cfg.network
        );
    }
    let mut peers = PeerSet::default();
    peers.extend_from_values(&cfg.peers, "peers");
    let local_ip = match (cfg.local_ip, cfg.network.ip()) {
        (Some(ip), _) => ip,
        (None, IpAddr::V4(_)) => "192.0.2.10".parse().expect("a literal address"),
        (None, IpAddr::V6(_)) => "fd00::10".parse().expect("a literal address"),
    };
    let facts = NodeFacts {
        local_ip,
        on_link: vec!["192.0.2.0/24".parse().expect("a literal network")],
    };
    let Some((subnet, mac)) = own_subnet(cfg, &peers, local_ip) else {
        return;
    };
    let desired = desired_state(cfg, &peers, &facts, subnet, mac);
    for peer in desired.peers.keys() {
        assert!(
            inside(*peer, cfg.network),
            "peer {peer} outside {}",
            cfg.network
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(cfg) = OverlayConfig::from_json_text(text) {
            overlay(&cfg);
        }
    }
    let (stdin, cni_args) = split_config(data);
    let Some(args) = request(stdin, &cni_args) else {
        return;
    };
    match OverlayConfig::from_map(&args.config) {
        Ok(cfg) => overlay(&cfg),
        Err(e) => check_error(&e.into()),
    }
});
