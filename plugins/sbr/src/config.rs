//! sbr configuration: `table`, `gateways`, `addSourceHints`, and the addresses of prevResult
//! that belong to `CNI_IFNAME`.

use std::net::IpAddr;

use libcni::result::{CniResult, IpConfig};
use libcni::skel::CmdArgs;
use serde::Deserialize;

use crate::error::SbrError;

#[derive(Deserialize, Default)]
// Go's struct name, for its wording of type errors.
#[serde(rename = "NetConf")]
struct Raw {
    #[serde(default)]
    table: Option<i64>,
    #[serde(default)]
    gateways: Vec<String>,
    #[serde(default, rename = "addSourceHints")]
    add_source_hints: bool,
}

/// What ADD and DEL act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sbr {
    /// A fixed table: only rules are added, routes stay where they are.
    pub table: Option<u32>,
    /// Gateways replacing prevResult's, one per family at most.
    pub gateway_v4: Option<IpAddr>,
    pub gateway_v6: Option<IpAddr>,
    /// Keep the subnet routes in the main table (with the address as source hint).
    pub add_source_hints: bool,
}

impl Sbr {
    /// The gateway of the default route in the table of `ip`: the configured one of its
    /// family, else prevResult's.
    pub fn gateway_for(&self, ip: &IpConfig) -> Option<IpAddr> {
        let configured = match ip.address.ip() {
            IpAddr::V4(_) => self.gateway_v4,
            IpAddr::V6(_) => self.gateway_v6,
        };
        configured.or(ip.gateway)
    }
}

pub fn parse(args: &CmdArgs) -> Result<Sbr, SbrError> {
    let raw: Raw = args.decode_config().map_err(SbrError::Decode)?;
    from_raw(raw)
}

fn from_raw(raw: Raw) -> Result<Sbr, SbrError> {
    let table = match raw.table {
        None => None,
        Some(t) => Some(
            u32::try_from(t)
                .ok()
                .filter(|t| *t != 0)
                .ok_or(SbrError::Table(t))?,
        ),
    };
    if raw.gateways.len() > 2 {
        return Err(SbrError::TooManyGateways);
    }
    let mut sbr = Sbr {
        table,
        add_source_hints: raw.add_source_hints,
        ..Default::default()
    };
    for gw in &raw.gateways {
        let ip: IpAddr = gw.parse().map_err(|_| SbrError::Gateway(gw.clone()))?;
        let slot = match ip {
            IpAddr::V4(_) => &mut sbr.gateway_v4,
            IpAddr::V6(_) => &mut sbr.gateway_v6,
        };
        if let Some(previous) = *slot {
            return Err(SbrError::RepeatedGatewayFamily {
                family: if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                previous,
                gateway: gw.clone(),
            });
        }
        *slot = Some(ip);
    }
    Ok(sbr)
}

/// prevResult's addresses on `ifname`: those with no interface index, or whose index names
/// `ifname` (an out-of-range index counts as a match, as in the reference).
pub fn addresses_of(prev: &CniResult, ifname: &str) -> Result<Vec<IpConfig>, SbrError> {
    if prev.ips.is_empty() {
        return Err(SbrError::NoAddresses(ifname.to_string()));
    }
    Ok(prev
        .ips
        .iter()
        .filter(|ip| match ip.interface {
            None => true,
            Some(i) => prev
                .interfaces
                .get(i)
                .is_none_or(|iface| iface.name == ifname),
        })
        .cloned()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::result::Interface;
    use serde_json::json;

    fn raw(v: serde_json::Value) -> Result<Sbr, SbrError> {
        from_raw(libcni::gojson::from_value(&v).unwrap())
    }

    #[test]
    fn options() {
        assert_eq!(raw(json!({})).unwrap(), Sbr::default());
        let s = raw(
            json!({"Table": 5001, "gateways": ["10.0.0.9", "fd00::9"], "addSourceHints": true}),
        )
        .unwrap();
        assert_eq!(s.table, Some(5001));
        assert_eq!(s.gateway_v4, Some("10.0.0.9".parse().unwrap()));
        assert_eq!(s.gateway_v6, Some("fd00::9".parse().unwrap()));
        assert!(s.add_source_hints);
    }

    #[test]
    fn bad_options() {
        assert!(raw(json!({"table": 0})).is_err());
        assert!(raw(json!({"table": -1})).is_err());
        assert!(raw(json!({"table": 4294967296i64})).is_err());
        let e = raw(json!({"gateways": ["10.0.0.1", "10.0.0.2"]})).unwrap_err();
        assert!(e.to_string().contains("multiple IPv4"), "{e}");
        assert!(raw(json!({"gateways": ["a", "b", "c"]})).is_err());
        assert!(raw(json!({"gateways": ["nope"]})).is_err());
    }

    #[test]
    fn gateway_choice() {
        let s = raw(json!({"gateways": ["fd00::9"]})).unwrap();
        let ip = |a: &str, g: Option<&str>| IpConfig {
            interface: None,
            address: a.parse().unwrap(),
            gateway: g.map(|g| g.parse().unwrap()),
        };
        assert_eq!(
            s.gateway_for(&ip("10.0.0.2/24", Some("10.0.0.1"))),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(
            s.gateway_for(&ip("fd00::2/64", Some("fd00::1"))),
            Some("fd00::9".parse().unwrap())
        );
    }

    #[test]
    fn addresses_are_filtered_by_interface() {
        let mut prev = CniResult::new();
        prev.interfaces = vec![
            Interface {
                name: "veth0".into(),
                ..Default::default()
            },
            Interface {
                name: "net1".into(),
                sandbox: "/run/netns/x".into(),
                ..Default::default()
            },
        ];
        let ip = |a: &str, i: Option<usize>| IpConfig {
            interface: i,
            address: a.parse().unwrap(),
            gateway: None,
        };
        prev.ips = vec![
            ip("10.0.0.2/24", Some(1)),
            ip("10.1.0.2/24", Some(0)),
            ip("10.2.0.2/24", None),
            ip("10.3.0.2/24", Some(7)),
        ];
        let got: Vec<String> = addresses_of(&prev, "net1")
            .unwrap()
            .iter()
            .map(|i| i.address.to_string())
            .collect();
        assert_eq!(got, ["10.0.0.2/24", "10.2.0.2/24", "10.3.0.2/24"]);
        prev.ips.clear();
        assert!(addresses_of(&prev, "net1").is_err());
    }
}
