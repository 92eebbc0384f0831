//! Every backend the agent runs, found by `Backend.Type`. Adding a backend adds a line here.

use crate::backend::{bgp, hostgw, ipip, udp, vxlan, wireguard, Registration};

/// In the order errors list them.
pub const REGISTRY: &[Registration] = &[
    vxlan::REGISTRATION,
    hostgw::REGISTRATION,
    wireguard::REGISTRATION,
    ipip::REGISTRATION,
    udp::REGISTRATION,
    bgp::REGISTRATION,
];

/// The registration answering to `type_name`.
pub fn lookup(type_name: &str) -> Option<&'static Registration> {
    REGISTRY.iter().find(|r| r.names.contains(&type_name))
}

/// Every name the registry answers to, quoted, for error messages.
pub fn known_names() -> String {
    let names: Vec<String> = REGISTRY
        .iter()
        .flat_map(|r| r.names.iter().map(|n| format!("{n:?}")))
        .collect();
    names.join(", ")
}
