//! The plugin's configuration (the `vxlan` entry of a conflist), parsed and validated.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{ConfigError, Error, SubnetError};

pub use netkit::vxlan_link::MAX_VNI;

/// flannel's (and the kernel's) default VXLAN UDP port.
pub const DEFAULT_PORT: u16 = 8472;
/// flannel's default VNI.
pub const DEFAULT_VNI: u32 = 1;
/// Where lock files go unless `lockFile` or `stateDir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/run/ferrocni";

/// How peers are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every peer through the VXLAN device.
    Vxlan,
    /// Every peer by a plain route via its underlay address (needs L2 adjacency); no device.
    HostGw,
    /// host-gw for peers on a subnet of the underlay interface, VXLAN for the rest
    /// (flannel's `DirectRouting`).
    Auto,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, Error> {
        match s {
            "vxlan" => Ok(Mode::Vxlan),
            "host-gw" => Ok(Mode::HostGw),
            "auto" => Ok(Mode::Auto),
            other => Err(ConfigError::Mode(other.to_string()).into()),
        }
    }

    /// Whether this mode needs the VXLAN device.
    pub fn uses_device(self) -> bool {
        self != Mode::HostGw
    }
}

/// Validated plugin settings. Peers stay raw here: each one is checked on its own so a bad
/// entry cannot block the others (see [`crate::PeerSet`]).
#[derive(Debug, Clone)]
pub struct OverlayConfig {
    /// The cluster pod network (IPv4 or IPv6); every peer subnet must lie inside it. One pass
    /// handles one family: a dual-stack overlay is two configs (two devices, as flannel).
    pub network: IpNetwork,
    /// This node's pod subnet; when `None` it is found in the peer list by the node's address.
    pub subnet: Option<IpNetwork>,
    /// Inline peer entries, unparsed.
    pub peers: Vec<Value>,
    /// A JSON file with more peer entries.
    pub peers_file: Option<PathBuf>,
    pub mode: Mode,
    pub vni: u32,
    pub port: u16,
    /// VXLAN device name (`flannel.<vni>`, or `flannel-v6.<vni>` for an IPv6 network).
    pub device: String,
    /// Underlay interface; default: the one holding `local_ip`, else the default route's.
    pub underlay_interface: Option<String>,
    /// Underlay source address; default: the first global IPv4 address of the underlay interface.
    pub local_ip: Option<IpAddr>,
    /// VXLAN device MTU; default underlay MTU − 50 (− 70 on an IPv6 underlay).
    pub mtu: Option<u32>,
    /// The lock file serialising concurrent reconciles on this node.
    pub lock_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConfig {
    network: Option<String>,
    subnet: Option<String>,
    #[serde(default)]
    peers: Option<Vec<Value>>,
    peers_file: Option<PathBuf>,
    mode: Option<String>,
    vni: Option<u32>,
    port: Option<u16>,
    device: Option<String>,
    underlay_interface: Option<String>,
    #[serde(rename = "localIP")]
    local_ip: Option<String>,
    mtu: Option<u32>,
    lock_file: Option<PathBuf>,
    state_dir: Option<PathBuf>,
}

/// Parses a CIDR and insists that host bits are clear (`10.244.1.0/24`, not `.5/24`).
pub fn parse_subnet(field: &'static str, s: &str) -> Result<IpNetwork, SubnetError> {
    let net: IpNetwork = s.parse().map_err(|source| SubnetError::NotCidr {
        field,
        text: s.to_string(),
        source,
    })?;
    if net.ip() != net.network() {
        return Err(SubnetError::HostBits {
            field,
            text: s.to_string(),
            network: net,
        });
    }
    Ok(net)
}

/// Whether `sub` lies inside `net` (same family, at least as long a prefix).
pub fn inside(sub: IpNetwork, net: IpNetwork) -> bool {
    net.contains(sub.network()) && sub.prefix() >= net.prefix()
}

/// Whether two networks share any address (never across families).
pub fn overlaps(a: IpNetwork, b: IpNetwork) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

/// flannel's device names: `flannel.<vni>`, and `flannel-v6.<vni>` for the IPv6 overlay.
pub fn default_device(network: IpNetwork, vni: u32) -> String {
    match network {
        IpNetwork::V4(_) => format!("flannel.{vni}"),
        IpNetwork::V6(_) => format!("flannel-v6.{vni}"),
    }
}

impl OverlayConfig {
    /// The address family of the overlay network (of its routes and neighbour entries).
    pub fn family(&self) -> netkit::addr::Family {
        match self.network {
            IpNetwork::V4(_) => netkit::addr::Family::V4,
            IpNetwork::V6(_) => netkit::addr::Family::V6,
        }
    }

    /// Parses the plugin's config object (other keys such as `type`, `name` or `prevResult`
    /// are ignored).
    pub fn from_map(map: &Map<String, Value>) -> Result<OverlayConfig, Error> {
        let raw: RawConfig = libcni::gojson::from_map(map).map_err(ConfigError::Decode)?;
        let network = raw.network.ok_or(ConfigError::NetworkRequired)?;
        let network = parse_subnet("network", &network).map_err(ConfigError::from)?;
        let subnet = match raw.subnet {
            Some(s) => {
                let sub = parse_subnet("subnet", &s).map_err(ConfigError::from)?;
                if !inside(sub, network) {
                    return Err(ConfigError::SubnetOutside {
                        subnet: sub,
                        network,
                    }
                    .into());
                }
                Some(sub)
            }
            None => None,
        };
        let peers = raw.peers.unwrap_or_default();
        if peers.is_empty() && raw.peers_file.is_none() && subnet.is_none() {
            return Err(ConfigError::NoSubnetSource.into());
        }
        let mode = Mode::parse(raw.mode.as_deref().unwrap_or("vxlan"))?;
        let vni = raw.vni.unwrap_or(DEFAULT_VNI);
        if vni > MAX_VNI {
            return Err(ConfigError::VniTooLarge(vni).into());
        }
        let port = raw.port.unwrap_or(DEFAULT_PORT);
        if port == 0 {
            return Err(ConfigError::PortZero.into());
        }
        let device = raw.device.unwrap_or_else(|| default_device(network, vni));
        netkit::link::validate_ifname(&device).map_err(ConfigError::Device)?;
        if let Some(name) = &raw.underlay_interface {
            netkit::link::validate_ifname(name).map_err(ConfigError::UnderlayInterface)?;
        }
        let local_ip = match raw.local_ip {
            Some(s) => Some(s.parse::<IpAddr>().map_err(|source| ConfigError::LocalIp {
                text: s.clone(),
                source,
            })?),
            None => None,
        };
        if let Some(mtu) = raw.mtu {
            if !(68..=65535).contains(&mtu) {
                return Err(ConfigError::Mtu(mtu).into());
            }
        }
        let lock_file = match (raw.lock_file, raw.state_dir) {
            (Some(f), _) => f,
            (None, Some(dir)) => dir.join(format!("vxlan-{device}.lock")),
            (None, None) => PathBuf::from(DEFAULT_STATE_DIR).join(format!("vxlan-{device}.lock")),
        };
        Ok(OverlayConfig {
            network,
            subnet,
            peers,
            peers_file: raw.peers_file,
            mode,
            vni,
            port,
            device,
            underlay_interface: raw.underlay_interface,
            local_ip,
            mtu: raw.mtu,
            lock_file,
        })
    }

    /// Parses a config from JSON text: a single plugin config, or a conflist whose `plugins`
    /// array holds a `"type": "vxlan"` entry (what `vxlan sync <file>` accepts).
    pub fn from_json_text(text: &str) -> Result<OverlayConfig, Error> {
        let v: Value = libcni::gojson::parse(text.as_bytes()).map_err(ConfigError::NotJson)?;
        let Value::Object(map) = v else {
            return Err(ConfigError::NotAnObject.into());
        };
        if let Some(Value::Array(plugins)) = map.get("plugins") {
            let entry = plugins
                .iter()
                .find_map(|p| match p {
                    Value::Object(m)
                        if libcni::gojson::get(m, "type").and_then(Value::as_str)
                            == Some("vxlan") =>
                    {
                        Some(m)
                    }
                    _ => None,
                })
                .ok_or(ConfigError::NoVxlanPlugin)?;
            return OverlayConfig::from_map(entry);
        }
        OverlayConfig::from_map(&map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<OverlayConfig, Error> {
        let Value::Object(m) = v else { unreachable!() };
        OverlayConfig::from_map(&m)
    }

    #[test]
    fn defaults_follow_flannel() {
        let c =
            parse(json!({"type": "vxlan", "network": "10.244.0.0/16", "subnet": "10.244.1.0/24"}))
                .unwrap();
        assert_eq!(
            (c.vni, c.port, c.device.as_str(), c.mode),
            (1, 8472, "flannel.1", Mode::Vxlan)
        );
        assert_eq!(
            c.lock_file,
            PathBuf::from("/run/ferrocni/vxlan-flannel.1.lock")
        );
        let c = parse(
            json!({"network": "10.244.0.0/16", "peersFile": "/x", "vni": 7, "stateDir": "/tmp/s"}),
        )
        .unwrap();
        assert_eq!(c.device, "flannel.7");
        assert_eq!(c.lock_file, PathBuf::from("/tmp/s/vxlan-flannel.7.lock"));
        let c =
            parse(json!({"network": "fd00:10:244::/56", "subnet": "fd00:10:244:3::/64"})).unwrap();
        assert_eq!(c.device, "flannel-v6.1");
        assert_eq!(
            c.lock_file,
            PathBuf::from("/run/ferrocni/vxlan-flannel-v6.1.lock")
        );
    }

    #[test]
    fn rejects_bad_fields() {
        for bad in [
            json!({"subnet": "10.244.1.0/24"}),
            json!({"network": "10.244.0.1/16", "subnet": "10.244.1.0/24"}),
            json!({"network": "10.244.0.0/16", "subnet": "10.245.1.0/24"}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "mode": "udp"}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "vni": 16777216}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "port": 0}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "device": "a/b"}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "localIP": "x"}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "mtu": 10}),
            json!({"network": "10.244.0.0/16", "subnet": "10.244.1.0/24", "peers": "no"}),
            json!({"network": "10.244.0.0/16"}),
            json!({"network": "fd00::/56", "subnet": "fd00:0:0:1::1/64"}),
            json!({"network": "fd00::/56", "subnet": "10.244.1.0/24"}),
            json!({"network": "10.244.0.0/16", "subnet": "fd00::/64"}),
        ] {
            assert!(matches!(parse(bad.clone()), Err(Error::Config(_))), "{bad}");
        }
    }

    #[test]
    fn shipped_examples_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conflist-examples");
        for name in [
            "vxlan-overlay.conflist",
            "vxlan-host-gw.conflist",
            "vxlan-auto.conflist",
        ] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            OverlayConfig::from_json_text(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let peers = crate::peers::read_peers_file(&dir.join("vxlan-peers.json")).unwrap();
        let mut set = crate::PeerSet::default();
        set.extend_from_values(&peers, "vxlan-peers.json");
        assert_eq!((set.peers.len(), set.problems.len()), (3, 0));
    }

    #[test]
    fn conflist_entry_is_found() {
        let text = r#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"vxlan","network":"10.244.0.0/16","subnet":"10.244.2.0/24","mode":"auto"}]}"#;
        let c = OverlayConfig::from_json_text(text).unwrap();
        assert_eq!(c.mode, Mode::Auto);
        assert!(OverlayConfig::from_json_text(r#"{"plugins":[{"type":"bridge"}]}"#).is_err());
    }
}
