//! Every backend the agent runs, found by `Backend.Type`. Adding a backend adds a line here;
//! its registration brings the rest (options, flags, what it needs).

use crate::backend::flag::Flag;
use crate::backend::{bgp, hostgw, ipip, udp, vxlan, wireguard, Backend, Registration};
use crate::error::AgentError;
use crate::subnet::config::{bad, NetConfig};

/// In the order errors, `--help` and `--list-backends` list them.
pub const REGISTRY: &[Registration] = &[
    vxlan::REGISTRATION,
    hostgw::REGISTRATION,
    wireguard::REGISTRATION,
    ipip::REGISTRATION,
    udp::REGISTRATION,
    bgp::REGISTRATION,
];

/// flannel's backend for a config without `Backend` or without `Backend.Type`.
const DEFAULT_TYPE: &str = "udp";

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

/// The backend of network config `net` (read from `key`, which errors name), parsed by the
/// backend registered for its `Backend.Type`, and its registration.
pub fn backend_of(
    key: &str,
    net: &NetConfig,
) -> Result<(&'static Registration, Box<dyn Backend>), AgentError> {
    let ty = match libcni::gojson::get(&net.backend, "Type") {
        Some(serde_json::Value::String(s)) => s.as_str(),
        Some(_) => return Err(bad(key, "\"Backend.Type\" must be a string")),
        None => DEFAULT_TYPE,
    };
    let registration = lookup(ty).ok_or_else(|| {
        bad(
            key,
            format!(
                "backend type {ty:?} is not supported by ferrocni-agent (only {})",
                known_names()
            ),
        )
    })?;
    let backend = (registration.parse)(&net.backend, &net.networks()).map_err(|m| bad(key, m))?;
    Ok((registration, backend))
}

/// Every flag the backends bring, each once (backends may share one), in registry order.
pub fn flags() -> impl Iterator<Item = &'static Flag> {
    REGISTRY
        .iter()
        .flat_map(|r| r.flags.iter())
        .enumerate()
        .filter(|(i, f)| {
            !REGISTRY
                .iter()
                .flat_map(|r| r.flags.iter())
                .take(*i)
                .any(|earlier| earlier.name == f.name)
        })
        .map(|(_, f)| f)
}

/// The backend flag called `name`.
pub fn flag(name: &str) -> Option<&'static Flag> {
    flags().find(|f| f.name == name)
}

/// `--list-backends`: one line per backend: its name, what it needs of the node (`kernel:<link
/// kind>`, `program:<name>:<Debian package>`, comma-separated, `-` for nothing) and what it is.
pub fn listing() -> String {
    let mut out = String::new();
    for r in REGISTRY {
        let needs: Vec<String> = r.needs.iter().map(ToString::to_string).collect();
        let needs = if needs.is_empty() {
            "-".to_string()
        } else {
            needs.join(",")
        };
        out.push_str(&format!(
            "{:<10} {needs:<19} {}\n",
            r.names[0], r.description
        ));
    }
    out
}

/// The network config `json` at `key` and its backend, as the agent reads them.
#[cfg(test)]
pub fn parse_config(key: &str, json: &str) -> Result<(NetConfig, Box<dyn Backend>), AgentError> {
    let net = NetConfig::parse(key, json.as_bytes())?;
    let (_, backend) = backend_of(key, &net)?;
    Ok((net, backend))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_is_listed_with_its_needs() {
        let list = listing();
        let names: Vec<&str> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            names,
            ["vxlan", "host-gw", "wireguard", "ipip", "udp", "bgp"]
        );
        for line in list.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() > 2, "{line}");
        }
        assert!(list.contains("\nbgp        program:bird:bird2 "), "{list}");
        assert!(list.contains("\nudp        kernel:tun "), "{list}");
        assert!(list.contains("\nhost-gw    -   "), "{list}");
    }

    #[test]
    fn shared_flags_are_listed_once() {
        let names: Vec<&str> = flags().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "--state-dir",
                "--vxlan-bin",
                "--vxlan-lock-file",
                "--udp-datapath",
                "--bird-binary",
                "--bgp-dir",
                "--bgp-peers",
                "--bgp-as"
            ]
        );
        assert!(flag("--bgp-dir").is_some() && flag("--iface").is_none());
    }

    #[test]
    fn the_config_names_its_backend() {
        let key = "/coreos.com/network/config";
        let (_, b) = parse_config(key, r#"{"Network":"10.244.0.0/16"}"#).unwrap();
        assert_eq!(b.type_name(), "udp", "flannel's default");
        for (cfg, needle) in [
            (
                r#"{"Network":"10.0.0.0/16","Backend":{"Type":"alloc"}}"#,
                "backend type \"alloc\" is not supported by ferrocni-agent (only \"vxlan\", \"host-gw\", \"wireguard\", \"ipip\", \"udp\", \"bgp\")",
            ),
            (
                r#"{"Network":"10.0.0.0/16","Backend":{"Type":7}}"#,
                "\"Backend.Type\" must be a string",
            ),
            (
                r#"{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":0}}"#,
                "VNI",
            ),
            (
                r#"{"Network":"10.0.0.0/16","Backend":{"Type":"vxlan","VNI":"x"}}"#,
                "Backend",
            ),
        ] {
            let err = parse_config(key, cfg).unwrap_err().to_string();
            assert!(err.contains(needle), "{cfg}: {err}");
            assert!(err.starts_with(&format!("bad network config at {key}: ")), "{err}");
        }
    }
}
