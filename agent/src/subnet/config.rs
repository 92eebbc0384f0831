//! The cluster network config (flannel's `<prefix>/config` in etcd), in flannel's schema and
//! with flannel's defaults and validation, plus subnet allocation within `[SubnetMin,
//! SubnetMax]`. The `Backend` object stays raw JSON here (flannel's `json.RawMessage`): the
//! backend registry parses it.

use ipnetwork::{Ipv4Network, Ipv6Network};
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::error::AgentError;
use crate::subnet::config_v6::Ipv6Config;
use crate::subnet::key::SubnetKey;
use crate::subnet::pick::pick_seeded;
use crate::subnet::validate::{Rules, V6Rules};

/// The `Backend` object of the network config, as decoded JSON.
pub type BackendObject = serde_json::Map<String, serde_json::Value>;

#[derive(Debug, Clone, PartialEq)]
pub struct NetConfig {
    pub network: Ipv4Network,
    pub subnet_len: u8,
    pub subnet_min: Ipv4Addr,
    pub subnet_max: Ipv4Addr,
    /// The IPv6 overlay, when `EnableIPv6` is set (dual-stack).
    pub ipv6: Option<Ipv6Config>,
    /// The `Backend` object as written (empty when the config has none: flannel's default,
    /// `udp`), for the backend registered for its `Type` to parse.
    pub backend: BackendObject,
}

/// The cluster network a backend carries: the config's `Network` and, on a dual-stack
/// network, its `IPv6Network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    pub v4: Ipv4Network,
    pub v6: Option<Ipv6Network>,
}

impl Network {
    pub fn dual_stack(&self) -> bool {
        self.v6.is_some()
    }
}

// Decoded with `libcni::gojson`, as flanneld (Go encoding/json) decodes it: keys match
// case-insensitively (`"network"` works), `null` is no value, unknown keys are ignored.
#[derive(Deserialize)]
struct RawConfig {
    #[serde(rename = "Network")]
    network: Option<String>,
    #[serde(rename = "SubnetLen", default)]
    subnet_len: u8,
    #[serde(rename = "SubnetMin")]
    subnet_min: Option<String>,
    #[serde(rename = "SubnetMax")]
    subnet_max: Option<String>,
    #[serde(rename = "Backend")]
    backend: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(rename = "EnableIPv4", default)]
    enable_ipv4: Option<bool>,
    #[serde(rename = "EnableIPv6", default)]
    enable_ipv6: Option<bool>,
    #[serde(rename = "IPv6Network")]
    ipv6_network: Option<String>,
    #[serde(rename = "IPv6SubnetLen", default)]
    ipv6_subnet_len: u8,
    #[serde(rename = "IPv6SubnetMin")]
    ipv6_subnet_min: Option<String>,
    #[serde(rename = "IPv6SubnetMax")]
    ipv6_subnet_max: Option<String>,
}

pub(crate) fn bad(key: &str, msg: impl Into<String>) -> AgentError {
    AgentError::BadConfig {
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl NetConfig {
    /// Parses and validates the JSON stored at `key` (only used in error messages).
    pub fn parse(key: &str, bytes: &[u8]) -> Result<NetConfig, AgentError> {
        let raw: RawConfig = libcni::gojson::from_slice(bytes)
            .map_err(|e| bad(key, format!("invalid JSON: {e}")))?;
        if raw.enable_ipv4 == Some(false) {
            return Err(bad(
                key,
                "IPv6-only networks (EnableIPv4=false) are not supported; use dual-stack (EnableIPv6=true with a Network)",
            ));
        }
        // As flanneld: IPv6Network alone does nothing without EnableIPv6.
        let ipv6 = if raw.enable_ipv6 == Some(true) {
            Some(Ipv6Config::parse(
                key,
                raw.ipv6_network.as_deref(),
                raw.ipv6_subnet_len,
                raw.ipv6_subnet_min.as_deref(),
                raw.ipv6_subnet_max.as_deref(),
            )?)
        } else {
            None
        };
        let network_s = raw
            .network
            .ok_or_else(|| bad(key, "\"Network\" is missing"))?;
        let network: Ipv4Network = network_s.parse().map_err(|e| {
            bad(
                key,
                format!("\"Network\" {network_s:?} is not an IPv4 CIDR: {e}"),
            )
        })?;
        let network = Ipv4Network::new(network.network(), network.prefix())
            .map_err(|e| bad(key, format!("\"Network\": {e}")))?;

        let subnet_len = if raw.subnet_len > 0 {
            if raw.subnet_len > 30 {
                return Err(bad(key, "\"SubnetLen\" must be less than /31"));
            }
            if u32::from(raw.subnet_len) < u32::from(network.prefix()) + 2 {
                return Err(bad(key, "\"Network\" must be able to accommodate at least four subnets of \"SubnetLen\""));
            }
            raw.subnet_len
        } else if network.prefix() > 28 {
            return Err(bad(
                key,
                "\"Network\" is too small: the minimum useful prefix is /28",
            ));
        } else if network.prefix() <= 22 {
            24
        } else {
            network.prefix() + 2
        };

        let size = subnet_size(subnet_len);
        let net_start = u32::from(network.network());
        let net_end = u32::from(network.broadcast());
        let mask = u32::MAX << (32 - u32::from(subnet_len));

        let bound = |name: &str, v: Option<String>, default: u32| -> Result<Ipv4Addr, AgentError> {
            let Some(s) = v else {
                return Ok(Ipv4Addr::from(default));
            };
            let ip: Ipv4Addr = s
                .parse()
                .map_err(|e| bad(key, format!("\"{name}\" {s:?}: {e}")))?;
            if !network.contains(ip) {
                return Err(bad(
                    key,
                    format!("\"{name}\" {ip} is not in the range of the Network {network}"),
                ));
            }
            if u32::from(ip) & mask != u32::from(ip) {
                return Err(bad(
                    key,
                    format!("\"{name}\" {ip} is not on a SubnetLen (/{subnet_len}) boundary"),
                ));
            }
            Ok(ip)
        };
        // The first subnet is skipped by default: its network address equals the Network's.
        let subnet_min = bound("SubnetMin", raw.subnet_min, net_start.wrapping_add(size))?;
        let subnet_max = bound("SubnetMax", raw.subnet_max, net_end & mask)?;
        if u32::from(subnet_min) > u32::from(subnet_max) {
            return Err(bad(
                key,
                format!("\"SubnetMin\" {subnet_min} is above \"SubnetMax\" {subnet_max}"),
            ));
        }

        Ok(NetConfig {
            network,
            subnet_len,
            subnet_min,
            subnet_max,
            ipv6,
            // As flanneld: a config without a Backend runs udp with its defaults.
            backend: raw.backend.unwrap_or_default(),
        })
    }

    /// The rules every other node's lease must follow on this network (`subnet::validate`),
    /// for this node's lease `own` and underlay addresses.
    pub fn rules(&self, own: SubnetKey, own_ip: Ipv4Addr, own_ipv6: Option<Ipv6Addr>) -> Rules {
        Rules {
            network: self.network,
            subnet_len: self.subnet_len,
            v6: self.ipv6.as_ref().map(|c| V6Rules {
                network: c.network,
                subnet_len: c.subnet_len,
                own_ip: own_ipv6,
            }),
            own,
            own_ip,
        }
    }

    /// Whether `other` describes the same network (the `Backend` object aside: its options
    /// are compared parsed, by the backend).
    pub fn same_network(&self, other: &NetConfig) -> bool {
        self.network == other.network
            && self.subnet_len == other.subnet_len
            && self.subnet_min == other.subnet_min
            && self.subnet_max == other.subnet_max
            && self.ipv6 == other.ipv6
    }

    /// The cluster network the backend carries.
    pub fn networks(&self) -> Network {
        Network {
            v4: self.network,
            v6: self.ipv6.as_ref().map(|c| c.network),
        }
    }

    /// Every subnet this config may hand out, in address order.
    pub fn candidate_subnets(&self) -> impl Iterator<Item = Ipv4Network> + '_ {
        let size = subnet_size(self.subnet_len);
        let start = u64::from(u32::from(self.subnet_min));
        let end = u64::from(u32::from(self.subnet_max));
        (start..=end)
            .step_by(size as usize)
            .filter_map(move |ip| Ipv4Network::new(Ipv4Addr::from(ip as u32), self.subnet_len).ok())
    }

    /// Whether `subnet` is one this config could have allocated (right length, inside the range).
    pub fn is_allocatable(&self, subnet: Ipv4Network) -> bool {
        subnet.prefix() == self.subnet_len
            && u32::from(subnet.network()) >= u32::from(self.subnet_min)
            && u32::from(subnet.network()) <= u32::from(self.subnet_max)
    }

    /// Picks a free subnet. `seed` spreads concurrent starters over the free list (flannel picks at
    /// random among the first 100 free subnets); the etcd transaction settles any remaining race.
    pub fn pick_free_subnet(
        &self,
        taken: &[Ipv4Network],
        seed: u64,
    ) -> Result<Ipv4Network, AgentError> {
        let free = self
            .candidate_subnets()
            .filter(|sn| !taken.iter().any(|t| overlaps(*t, *sn)));
        pick_seeded(free, seed).ok_or(AgentError::SubnetsExhausted {
            network: self.network,
            min: self.subnet_min,
            max: self.subnet_max,
            len: self.subnet_len,
        })
    }
}

fn subnet_size(len: u8) -> u32 {
    1u32 << (32 - u32::from(len))
}

pub fn overlaps(a: Ipv4Network, b: Ipv4Network) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NetConfig, AgentError> {
        NetConfig::parse("/coreos.com/network/config", s.as_bytes())
    }

    #[test]
    fn flannel_defaults() {
        let c = parse(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#).unwrap();
        assert_eq!(c.subnet_len, 24);
        assert_eq!(c.subnet_min, "10.244.1.0".parse::<Ipv4Addr>().unwrap());
        assert_eq!(c.subnet_max, "10.244.255.0".parse::<Ipv4Addr>().unwrap());
        assert_eq!(c.candidate_subnets().count(), 255);

        let small = parse(r#"{"Network":"10.1.0.0/24","Backend":{"Type":"vxlan"}}"#).unwrap();
        assert_eq!(small.subnet_len, 26);
        assert_eq!(small.candidate_subnets().count(), 3);
    }

    #[test]
    fn explicit_fields() {
        let c = parse(
            r#"{"Network":"10.5.0.0/16","SubnetLen":26,"SubnetMin":"10.5.10.0","SubnetMax":"10.5.10.192",
               "Backend":{"Type":"vxlan","VNI":42,"Port":4789,"DirectRouting":true}}"#,
        )
        .unwrap();
        let all: Vec<String> = c.candidate_subnets().map(|s| s.to_string()).collect();
        assert_eq!(
            all,
            [
                "10.5.10.0/26",
                "10.5.10.64/26",
                "10.5.10.128/26",
                "10.5.10.192/26"
            ]
        );
        assert_eq!(
            c.backend["Port"], 4789,
            "the Backend object stays as written"
        );
    }

    #[test]
    fn dual_stack() {
        let c = parse(
            r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap();
        let v6 = c.ipv6.unwrap();
        assert_eq!(v6.network.to_string(), "fd00:10:244::/56");
        assert_eq!(v6.subnet_len, 64);
        // Without EnableIPv6 the IPv6 fields are ignored, as flanneld ignores them.
        let c = parse(
            r#"{"Network":"10.244.0.0/16","IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap();
        assert!(c.ipv6.is_none());
        for (cfg, needle) in [
            (
                r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"Backend":{"Type":"vxlan"}}"#,
                "IPv6Network",
            ),
            (
                r#"{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00::/56","Backend":{"Type":"vxlan"}}"#,
                "IPv6-only",
            ),
        ] {
            let err = parse(cfg).unwrap_err().to_string();
            assert!(err.contains(needle), "{cfg}: {err}");
        }
    }

    #[test]
    fn decoded_as_flanneld_decodes_it() {
        // Go's encoding/json: keys match case-insensitively, the last duplicate wins, null is
        // no value.
        let c = parse(
            r#"{"network":"10.9.0.0/16","NETWORK":"10.244.0.0/16","subnetlen":25,"SubnetMin":null,
               "backend":{"type":"vxlan","vni":7,"directRouting":true}}"#,
        )
        .unwrap();
        assert_eq!(c.network.to_string(), "10.244.0.0/16");
        assert_eq!(c.subnet_len, 25);
        assert_eq!(c.subnet_min, "10.244.0.128".parse::<Ipv4Addr>().unwrap());
        assert_eq!(c.backend["vni"], 7);
        // A config without a Backend: flannel's default, an empty object.
        let c = parse(r#"{"Network":"10.244.0.0/16"}"#).unwrap();
        assert!(c.backend.is_empty());
    }

    #[test]
    fn bad_configs_are_named() {
        for (cfg, needle) in [
            ("not json", "invalid JSON"),
            (r#"{"Backend":{"Type":"vxlan"}}"#, "\"Network\" is missing"),
            (
                r#"{"Network":"10.0.0.0/33","Backend":{"Type":"vxlan"}}"#,
                "not an IPv4 CIDR",
            ),
            (
                r#"{"Network":"10.0.0.0/16","SubnetLen":31,"Backend":{"Type":"vxlan"}}"#,
                "less than /31",
            ),
            (
                r#"{"Network":"10.0.0.0/16","SubnetLen":17,"Backend":{"Type":"vxlan"}}"#,
                "four subnets",
            ),
            (
                r#"{"Network":"10.0.0.0/29","Backend":{"Type":"vxlan"}}"#,
                "too small",
            ),
            (
                r#"{"Network":"10.0.0.0/16","SubnetMin":"10.1.0.0","Backend":{"Type":"vxlan"}}"#,
                "not in the range",
            ),
            (
                r#"{"Network":"10.0.0.0/16","SubnetMin":"10.0.1.5","Backend":{"Type":"vxlan"}}"#,
                "boundary",
            ),
            (
                r#"{"Network":"10.0.0.0/16","SubnetMin":"10.0.9.0","SubnetMax":"10.0.2.0","Backend":{"Type":"vxlan"}}"#,
                "above",
            ),
            (
                r#"{"Network":"10.0.0.0/16","Backend":"vxlan"}"#,
                "invalid JSON",
            ),
        ] {
            let err = parse(cfg).unwrap_err().to_string();
            assert!(err.contains(needle), "{cfg}: {err}");
            assert!(err.contains("/coreos.com/network/config"), "{err}");
        }
    }

    #[test]
    fn allocation_stays_in_range_and_skips_taken() {
        let c = parse(
            r#"{"Network":"10.5.0.0/16","SubnetLen":24,"SubnetMin":"10.5.3.0","SubnetMax":"10.5.5.0","Backend":{"Type":"vxlan"}}"#,
        )
        .unwrap();
        let mut taken = vec![];
        for seed in [7u64, 0, 99] {
            let sn = c.pick_free_subnet(&taken, seed).unwrap();
            assert!(c.is_allocatable(sn), "{sn}");
            assert!(!taken.contains(&sn));
            taken.push(sn);
        }
        let err = c.pick_free_subnet(&taken, 1).unwrap_err().to_string();
        assert!(err.contains("exhausted"), "{err}");
        // A lease outside the range (reservation, foreign) or of another size still blocks overlaps.
        let big: Ipv4Network = "10.5.0.0/20".parse().unwrap();
        assert!(c.pick_free_subnet(&[big], 0).is_err());
    }
}
