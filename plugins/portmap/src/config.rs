//! portmap configuration: fields, defaults, validation, backend choice,
//! and the container addresses taken from prevResult.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use libcni::result::CniResult;

use crate::error::PortmapError;
use serde::Deserialize;

/// Default mark bit for "needs masquerade" (0x2000), as in the reference.
pub const DEFAULT_MARK_MASQ_BIT: u32 = 13;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Iptables,
    Nftables,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One `runtimeConfig.portMappings` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    pub protocol: Protocol,
    /// `None` when absent or empty.
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// Whether this mapping applies to a container address of `v6`'s family, and the host
    /// address to match (`None`: any local address).
    pub fn host_ip_for(&self, v6: bool) -> Option<Option<IpAddr>> {
        match self.host_ip {
            None => Some(None),
            Some(ip) if ip.is_ipv6() != v6 => None,
            Some(ip) if ip.is_unspecified() => Some(None),
            Some(ip) => Some(Some(ip)),
        }
    }
}

#[derive(Debug, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "PortMapEntry")]
struct RawMapping {
    #[serde(rename = "hostPort")]
    host_port: i64,
    #[serde(rename = "containerPort")]
    container_port: i64,
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default, rename = "hostIP")]
    host_ip: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RawRuntimeConfig {
    #[serde(default, rename = "portMappings")]
    port_mappings: Option<Vec<RawMapping>>,
}

#[derive(Debug, Default, Deserialize)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "PortMapConf")]
struct RawConf {
    #[serde(default)]
    snat: Option<bool>,
    #[serde(default, rename = "masqAll")]
    masq_all: Option<bool>,
    #[serde(default, rename = "markMasqBit")]
    mark_masq_bit: Option<i64>,
    #[serde(default, rename = "externalSetMarkChain")]
    external_set_mark_chain: Option<String>,
    #[serde(default, rename = "conditionsV4")]
    conditions_v4: Option<Vec<String>>,
    #[serde(default, rename = "conditionsV6")]
    conditions_v6: Option<Vec<String>>,
    #[serde(default)]
    backend: Option<String>,
    #[serde(default, rename = "runtimeConfig")]
    runtime_config: Option<RawRuntimeConfig>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapConf {
    pub mappings: Vec<PortMapping>,
    pub snat: bool,
    pub masq_all: bool,
    pub mark_masq_bit: u32,
    pub external_set_mark_chain: Option<String>,
    pub conditions_v4: Vec<String>,
    pub conditions_v6: Vec<String>,
    /// `None`: not configured, chosen from what the host supports.
    pub backend: Option<Backend>,
}

/// Conditions in iptables syntax start with an option (`-s`, `! -d`...); anything else is nft.
pub fn is_iptables_syntax(conditions: &[String]) -> bool {
    conditions
        .first()
        .is_some_and(|t| t.starts_with('-') || t.starts_with('!'))
}

/// Characters that would end an nft statement or start a comment: never allowed in a token,
/// so a condition cannot smuggle another command into the ruleset (the reference passes the
/// text to nft as it is). Quotes, braces and commas are nft match syntax and fine.
fn check_condition_tokens(conditions: &[String], field: &'static str) -> Result<(), PortmapError> {
    for t in conditions {
        if t.chars()
            .any(|c| matches!(c, ';' | '\n' | '\r' | '#' | '\0'))
        {
            return Err(PortmapError::ConditionToken {
                token: t.clone(),
                field,
            });
        }
    }
    Ok(())
}

fn parse_mapping(m: RawMapping) -> Result<PortMapping, PortmapError> {
    let port = |value: i64, which: &'static str| {
        u16::try_from(value)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(PortmapError::PortNumber { which, value })
    };
    // The reference checks the container port first.
    let container_port = port(m.container_port, "container")?;
    let host_port = port(m.host_port, "host")?;
    let protocol = match m
        .protocol
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") | Some("tcp") => Protocol::Tcp,
        Some("udp") => Protocol::Udp,
        Some("sctp") => Protocol::Sctp,
        Some(other) => {
            return Err(PortmapError::Protocol {
                protocol: other.to_string(),
                host_port,
            })
        }
    };
    let host_ip = match m.host_ip.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(s.parse::<IpAddr>().map_err(|_| PortmapError::HostIp {
            host_ip: s.to_string(),
            host_port,
        })?),
    };
    Ok(PortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

/// Parses and validates the request config, in the reference's order and words (plain
/// errors there, code 999; ADD and DEL prefix them with "failed to parse config: ").
pub fn parse(
    config: &serde_json::Map<String, serde_json::Value>,
) -> Result<PortMapConf, PortmapError> {
    let raw: RawConf = libcni::gojson::from_map(config).map_err(PortmapError::Decode)?;

    if raw.mark_masq_bit.is_some() && raw.external_set_mark_chain.is_some() {
        return Err(PortmapError::MarkChainAndBit);
    }
    let mark_masq_bit = match raw.mark_masq_bit {
        None => DEFAULT_MARK_MASQ_BIT,
        Some(b) if (0..=31).contains(&b) => b as u32,
        Some(_) => return Err(PortmapError::MarkBitRange),
    };
    if let Some(chain) = &raw.external_set_mark_chain {
        let ok = !chain.is_empty()
            && chain.len() <= 28
            && chain
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(PortmapError::MarkChainName(chain.clone()));
        }
    }
    let conditions_v4 = raw.conditions_v4.clone().unwrap_or_default();
    let conditions_v6 = raw.conditions_v6.clone().unwrap_or_default();
    check_condition_tokens(&conditions_v4, "conditionsV4")?;
    check_condition_tokens(&conditions_v6, "conditionsV6")?;

    let backend = match raw.backend.as_deref() {
        None | Some("") => None,
        Some("iptables") => Some(Backend::Iptables),
        Some("nftables") => Some(Backend::Nftables),
        Some(other) => return Err(PortmapError::UnknownBackend(other.to_string())),
    };
    let mappings = raw
        .runtime_config
        .and_then(|r| r.port_mappings)
        .unwrap_or_default()
        .into_iter()
        .map(parse_mapping)
        .collect::<Result<Vec<_>, _>>()?;
    let conf = PortMapConf {
        mappings,
        snat: raw.snat.unwrap_or(true),
        masq_all: raw.masq_all.unwrap_or(false),
        mark_masq_bit,
        external_set_mark_chain: raw.external_set_mark_chain.clone(),
        conditions_v4,
        conditions_v6,
        backend,
    };
    // Ours: the nftables backend has no mark to set (the reference ignores the field).
    if backend == Some(Backend::Nftables) && raw.mark_masq_bit.is_some() {
        return Err(PortmapError::MarkBitWithNftables);
    }
    conf.check_backend_options(backend)?;
    Ok(conf)
}

impl PortMapConf {
    /// Options of the other backend are refused when the backend is configured, as the
    /// reference words it (it names every such option).
    pub fn check_backend_options(&self, backend: Option<Backend>) -> Result<(), PortmapError> {
        let Some(backend) = backend else {
            return Ok(());
        };
        let (name, other) = match backend {
            Backend::Iptables => ("iptables", "nftables"),
            Backend::Nftables => ("nftables", "iptables"),
        };
        let mut wrong: Vec<&'static str> = Vec::new();
        if backend == Backend::Nftables && self.external_set_mark_chain.is_some() {
            wrong.push("externalSetMarkChain");
        }
        for (conds, field) in [
            (&self.conditions_v4, "conditionsV4"),
            (&self.conditions_v6, "conditionsV6"),
        ] {
            // As the reference: an empty list, or one whose first token is empty, says nothing.
            if conds.first().is_none_or(|t| t.is_empty()) {
                continue;
            }
            if is_iptables_syntax(conds) == (backend == Backend::Nftables) {
                wrong.push(field);
            }
        }
        if wrong.is_empty() {
            return Ok(());
        }
        Err(PortmapError::OtherBackendOptions {
            backend: name,
            other,
            options: wrong,
        })
    }

    /// The backend implied by the conditions' syntax, if any conditions are set.
    pub fn backend_from_conditions(&self) -> Option<Backend> {
        [&self.conditions_v4, &self.conditions_v6]
            .into_iter()
            .find(|c| !c.is_empty())
            .map(|c| {
                if is_iptables_syntax(c) {
                    Backend::Iptables
                } else {
                    Backend::Nftables
                }
            })
    }

    pub fn conditions(&self, v6: bool) -> &[String] {
        if v6 {
            &self.conditions_v6
        } else {
            &self.conditions_v4
        }
    }
}

/// The container's first IPv4 and first IPv6 address (with prefix) on CNI_IFNAME: IPs whose
/// interface index names another interface or a host-side one are skipped.
pub fn container_addresses(
    result: &CniResult,
    ifname: &str,
) -> (Option<IpNetwork>, Option<IpNetwork>) {
    let mut v4 = None;
    let mut v6 = None;
    for ip in &result.ips {
        if let Some(idx) = ip.interface {
            if let Some(iface) = result.interfaces.get(idx) {
                if iface.name != ifname || iface.sandbox.is_empty() {
                    continue;
                }
            }
        }
        match ip.address {
            IpNetwork::V4(_) if v4.is_none() => v4 = Some(ip.address),
            IpNetwork::V6(_) if v6.is_none() => v6 = Some(ip.address),
            _ => {}
        }
    }
    (v4, v6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(v: serde_json::Value) -> Result<PortMapConf, libcni::CniError> {
        parse(v.as_object().unwrap()).map_err(Into::into)
    }

    #[test]
    fn defaults_and_mappings() {
        let c = conf(
            json!({"name":"n","type":"portmap","runtimeConfig":{"portMappings":[
            {"hostPort":8080,"containerPort":80,"protocol":"tcp"},
            {"hostPort":53,"containerPort":53,"protocol":"UDP","hostIP":"127.0.0.1"},
            {"hostPort":9,"containerPort":9,"hostIP":""}]}}),
        )
        .unwrap();
        assert!(c.snat && !c.masq_all);
        assert_eq!(c.mark_masq_bit, 13);
        assert_eq!(c.backend, None);
        assert_eq!(c.mappings.len(), 3);
        assert_eq!(c.mappings[1].protocol, Protocol::Udp);
        assert_eq!(c.mappings[1].host_ip, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(c.mappings[2].protocol, Protocol::Tcp);
        assert_eq!(c.mappings[2].host_ip, None);
    }

    #[test]
    fn runtime_shapes_containerd_crio_podman() {
        // containerd 1.6 (go-cni PortMapping without JSON tags).
        let c = conf(
            json!({"name":"k8s-pod-network","type":"portmap","runtimeConfig":{"portMappings":[
            {"HostPort":18080,"ContainerPort":8080,"Protocol":"tcp","HostIP":""},
            {"HostPort":5353,"ContainerPort":53,"Protocol":"udp","HostIP":"127.0.0.1"}]}}),
        )
        .unwrap();
        assert_eq!(c.mappings.len(), 2);
        assert_eq!(
            (
                c.mappings[0].host_port,
                c.mappings[0].container_port,
                c.mappings[0].protocol,
                c.mappings[0].host_ip
            ),
            (18080, 8080, Protocol::Tcp, None)
        );
        assert_eq!(c.mappings[1].protocol, Protocol::Udp);
        assert_eq!(c.mappings[1].host_ip, Some("127.0.0.1".parse().unwrap()));
        // CRI-O (ocicni) and podman: the CONVENTIONS.md names.
        for runtime in [
            json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":""}]}),
            json!({"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}),
        ] {
            let c =
                conf(json!({"name":"podman","type":"portmap","runtimeConfig":runtime})).unwrap();
            assert_eq!(
                (c.mappings[0].host_port, c.mappings[0].container_port),
                (8080, 80)
            );
        }
    }

    #[test]
    fn rejects_bad_input() {
        let bad = [
            json!({"runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80}]}}),
            json!({"runtimeConfig":{"portMappings":[{"hostPort":70000,"containerPort":80}]}}),
            json!({"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":-1}]}}),
            json!({"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":1,"protocol":"icmp"}]}}),
            json!({"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":1,"hostIP":"x"}]}}),
            json!({"markMasqBit":32}),
            json!({"markMasqBit":1,"externalSetMarkChain":"X"}),
            json!({"externalSetMarkChain":"bad chain"}),
            json!({"backend":"pf"}),
            json!({"backend":"nftables","markMasqBit":3}),
            json!({"backend":"nftables","conditionsV4":["-s","1.2.3.4"]}),
            json!({"backend":"iptables","conditionsV4":["ip","saddr","1.2.3.4"]}),
            json!({"conditionsV4":["ip","saddr","1.2.3.4;","flush","ruleset"]}),
            json!({"conditionsV4":["ip saddr 1.2.3.4\nflush ruleset"]}),
            json!({"conditionsV6":["ip6","saddr","fd00::1","#"]}),
        ];
        for b in bad {
            assert!(conf(b.clone()).is_err(), "accepted {b}");
        }
    }

    #[test]
    fn accepts_nft_match_syntax() {
        let c = conf(json!({"conditionsV4": ["iifname", "\"eth*\"", "ip saddr != { 10.0.0.0/8, 192.168.1.1 }"],
                            "conditionsV6": ["ip6", "saddr", "{fd00::/64,fd01::1}"]}))
        .unwrap();
        assert_eq!(c.backend_from_conditions(), Some(Backend::Nftables));
        assert_eq!(c.conditions(false).len(), 3);
    }

    #[test]
    fn host_ip_family_filter() {
        let m = |ip: Option<&str>| PortMapping {
            host_port: 1,
            container_port: 1,
            protocol: Protocol::Tcp,
            host_ip: ip.map(|s| s.parse().unwrap()),
        };
        assert_eq!(m(None).host_ip_for(false), Some(None));
        assert_eq!(m(Some("0.0.0.0")).host_ip_for(false), Some(None));
        assert_eq!(m(Some("0.0.0.0")).host_ip_for(true), None);
        assert_eq!(m(Some("::")).host_ip_for(true), Some(None));
        assert_eq!(
            m(Some("10.0.0.1")).host_ip_for(false),
            Some(Some("10.0.0.1".parse().unwrap()))
        );
    }

    #[test]
    fn picks_sandbox_addresses() {
        let r = CniResult::from_value(&json!({"cniVersion":"1.0.0",
            "interfaces":[{"name":"br0"},{"name":"veth1"},{"name":"eth0","sandbox":"/run/netns/x"}],
            "ips":[{"address":"10.0.0.1/24","interface":0},{"address":"10.0.0.5/24","interface":2},
                   {"address":"10.0.0.6/24","interface":2},{"address":"fd00::5/64"}]}))
        .unwrap();
        let (v4, v6) = container_addresses(&r, "eth0");
        assert_eq!(v4, Some("10.0.0.5/24".parse().unwrap()));
        assert_eq!(v6, Some("fd00::5/64".parse().unwrap()));
    }
}
