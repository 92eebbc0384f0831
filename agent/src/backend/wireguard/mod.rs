//! flannel's `wireguard` backend: pod traffic between nodes encrypted by the kernel's
//! WireGuard, one peer per remote node (allowed IPs = its pod subnet, endpoint = its
//! `PublicIP:Port`).
//!
//! Options (`Backend` of the network config, flannel's names and defaults): `ListenPort`
//! (51820), `ListenPortV6` (51821), `PSK` (base64, optional), `PersistentKeepaliveInterval`
//! (seconds, 0 = off), `Mode`: `separate` (default: `flannel-wg` for IPv4 over the IPv4
//! underlay, and on dual-stack networks `flannel-wg-v6` for IPv6 over the IPv6 underlay), or
//! `auto` / `ipv4` / `ipv6` (one `flannel-wg` carrying both families over the underlay
//! family chosen per peer: `auto` picks IPv4 unless only IPv6 looks public).
//!
//! Each device gets the node's subnet address (/32, /128), a scope-link route to the whole
//! cluster network, MTU = underlay − 80, and the node's key (see [`crate::backend::wireguard::key`]). The
//! lease is flanneld's: `"BackendType":"wireguard"`, `BackendData` (and on dual-stack
//! `BackendV6Data`) `{"PublicKey":"<base64>","Port":<listen port>}`.

mod apply;
mod error;
pub mod key;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnetwork::IpNetwork;
use serde::{Deserialize, Serialize};

use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, Need, Network, Node, Peer, Refusal,
    Registration,
};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
pub use error::WireguardError;
use key::{Key, KeyPair};

pub const REGISTRATION: Registration = Registration {
    names: &["wireguard"],
    description: "encrypted tunnels (flannel-wg, flannel-wg-v6), the kernel's WireGuard",
    needs: &[Need::Kernel("wireguard")],
    flags: &[],
    parse: parse_backend,
};

/// Bytes WireGuard adds to a packet: outer IPv4 (20; IPv6 would be 40) + UDP 8 + type 4 +
/// key index 4 + nonce 8 + auth tag 16, rounded up as flannel does.
pub const OVERHEAD: u32 = 80;
pub const DEVICE: &str = "flannel-wg";
pub const DEVICE_V6: &str = "flannel-wg-v6";
const DEFAULT_PORT: u16 = 51820;
const DEFAULT_PORT_V6: u16 = 51821;

/// flannel's `Mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Separate,
    Auto,
    Ipv4,
    Ipv6,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireguardOptions {
    pub listen_port: u16,
    pub listen_port_v6: u16,
    pub psk: Option<Key>,
    /// Seconds; 0 = off.
    pub keepalive: u16,
    pub mode: Mode,
}

#[derive(Deserialize)]
struct RawWireguard {
    #[serde(rename = "ListenPort")]
    listen_port: Option<u16>,
    #[serde(rename = "ListenPortV6")]
    listen_port_v6: Option<u16>,
    #[serde(rename = "PSK")]
    psk: Option<String>,
    // Go decodes a time.Duration from a number and flannel multiplies it by a second.
    #[serde(rename = "PersistentKeepaliveInterval")]
    keepalive: Option<u64>,
    #[serde(rename = "Mode")]
    mode: Option<String>,
}

/// The `Backend` object of a `"Type":"wireguard"` config.
fn parse_backend(map: &BackendObject, net: &Network) -> Result<Box<dyn Backend>, String> {
    let raw: RawWireguard =
        libcni::gojson::from_map(map).map_err(|e| format!("\"Backend\": {e}"))?;
    let psk = match raw.psk.as_deref() {
        None | Some("") => None,
        Some(text) => Some(key::decode(text).map_err(|e| format!("\"Backend.PSK\": {e}"))?),
    };
    let keepalive = raw.keepalive.unwrap_or(0);
    let keepalive = u16::try_from(keepalive).map_err(|_| {
        format!("\"Backend.PersistentKeepaliveInterval\" {keepalive} is above 65535 seconds")
    })?;
    let mode = match raw.mode.as_deref() {
        None | Some("separate") => Mode::Separate,
        Some("auto") => Mode::Auto,
        Some("ipv4") => Mode::Ipv4,
        Some("ipv6") => Mode::Ipv6,
        Some(other) => {
            return Err(format!(
                "\"Backend.Mode\" {other:?} is not one of separate, auto, ipv4, ipv6"
            ))
        }
    };
    if mode == Mode::Ipv6 && !net.dual_stack() {
        return Err(
            "wireguard \"Backend.Mode\" \"ipv6\" needs a dual-stack network (EnableIPv6)".into(),
        );
    }
    Ok(Box::new(WireguardOptions {
        listen_port: raw.listen_port.unwrap_or(DEFAULT_PORT),
        listen_port_v6: raw.listen_port_v6.unwrap_or(DEFAULT_PORT_V6),
        psk,
        keepalive,
        mode,
    }))
}

impl Backend for WireguardOptions {
    fn type_name(&self) -> &'static str {
        "wireguard"
    }

    fn describe(&self) -> String {
        format!(
            "wireguard port {}, IPv6 port {}, mode {:?}{}{}",
            self.listen_port,
            self.listen_port_v6,
            self.mode,
            if self.psk.is_some() { ", PSK" } else { "" },
            if self.keepalive > 0 {
                format!(", keepalive {}s", self.keepalive)
            } else {
                String::new()
            }
        )
    }

    fn mtu_overhead(&self) -> u32 {
        OVERHEAD
    }

    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if attrs.backend_type != "wireguard" {
            return Err(Refusal::OtherBackend);
        }
        check_data("BackendData", attrs.backend_data.as_ref()).map_err(Refusal::Invalid)?;
        // The IPv6 half, when the lease has one.
        if let Some(v6) = &attrs.backend_v6_data {
            check_data("BackendV6Data", Some(v6)).map_err(Refusal::Invalid)?;
        }
        Ok(())
    }

    /// The node's key is loaded (or created) here, before the lease that publishes it.
    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        apply::WireguardPlane::start(self.clone(), node)
    }
}

/// flannel's `wireguardLeaseAttrs`, field for field (Go marshals them in this order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseData {
    #[serde(rename = "PublicKey", default)]
    pub public_key: String,
    /// 0 in leases of flanneld versions before the field: the receiver's own port then.
    #[serde(rename = "Port", default)]
    pub port: u16,
}

/// This node's lease value.
pub fn lease_attrs(
    opts: &WireguardOptions,
    keys: &KeyPair,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
) -> LeaseAttrs {
    let data = |port| {
        serde_json::to_value(LeaseData {
            public_key: key::encode(&keys.public),
            port,
        })
        .ok()
    };
    let v6_port = match opts.mode {
        Mode::Separate => opts.listen_port_v6,
        _ => opts.listen_port,
    };
    LeaseAttrs {
        public_ip,
        public_ipv6,
        backend_type: "wireguard".into(),
        backend_data: data(opts.listen_port),
        backend_v6_data: public_ipv6.and_then(|_| data(v6_port)),
    }
}

/// Why one family's backend data holds no usable WireGuard public key, if it does not.
fn check_data(field: &str, v: Option<&serde_json::Value>) -> Result<(), String> {
    let v = v.ok_or_else(|| format!("{field} is missing (a WireGuard PublicKey is needed)"))?;
    let d: LeaseData = libcni::gojson::from_value(v)
        .map_err(|_| format!("{field} is not wireguard's {{\"PublicKey\", \"Port\"}}"))?;
    key::decode(&d.public_key)
        .map(|_| ())
        .map_err(|e| format!("{field}.PublicKey is not a WireGuard key: {e}"))
}

/// The public key and port of one family's backend data.
fn lease_data(v: Option<&serde_json::Value>) -> Option<(Key, u16)> {
    let d: LeaseData = libcni::gojson::from_value(v?).ok()?;
    Some((key::decode(&d.public_key).ok()?, d.port))
}

/// One WireGuard device this node runs, with what it must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevicePlan {
    pub name: &'static str,
    pub listen_port: u16,
    /// The node's own addresses on it (/32, /128).
    pub addresses: Vec<IpNetwork>,
    /// The cluster networks routed through it.
    pub routes: Vec<IpNetwork>,
    pub peers: Vec<netkit::wireguard::PeerConfig>,
}

/// RFC 1918 for IPv4, ULA for IPv6 (Go's `net.IP.IsPrivate`).
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_private(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xfe00) == 0xfc00,
    }
}

/// The devices and their peers for the peer leases (ours excluded), as flannel programs
/// them. Leases of other backends and unreadable wireguard data are skipped.
pub fn plan(
    net: &Network,
    opts: &WireguardOptions,
    own: &SubnetKey,
    own_public_ipv6: Option<Ipv6Addr>,
    peers: &[Peer],
) -> Vec<DevicePlan> {
    let dual = net.dual_stack();
    let v6_net = net.v6.map(IpNetwork::V6);
    let own_v4 = IpNetwork::new(own.v4.network().into(), 32).ok();
    let own_v6 = own
        .v6
        .and_then(|sn| IpNetwork::new(sn.network().into(), 128).ok());
    let peer = |key: Key, endpoint: SocketAddr, allowed_ips: Vec<IpNetwork>| {
        netkit::wireguard::PeerConfig {
            public_key: key,
            endpoint: Some(endpoint),
            allowed_ips,
            preshared_key: opts.psk,
            persistent_keepalive: opts.keepalive,
        }
    };
    let remote = peers
        .iter()
        .filter(|p| p.key != *own && p.attrs.backend_type == "wireguard")
        .map(|p| (&p.key, &p.attrs));
    let mut v4 = DevicePlan {
        name: DEVICE,
        listen_port: opts.listen_port,
        addresses: own_v4.into_iter().collect(),
        routes: vec![IpNetwork::V4(net.v4)],
        peers: Vec::new(),
    };
    if opts.mode == Mode::Separate {
        let mut v6 = DevicePlan {
            name: DEVICE_V6,
            listen_port: opts.listen_port_v6,
            addresses: own_v6.into_iter().collect(),
            routes: v6_net.into_iter().collect(),
            peers: Vec::new(),
        };
        for (k, a) in remote {
            if let Some((key, port)) = lease_data(a.backend_data.as_ref()) {
                let port = if port == 0 { opts.listen_port } else { port };
                let ep = SocketAddr::new(a.public_ip.into(), port);
                v4.peers.push(peer(key, ep, vec![k.v4.into()]));
            }
            if !dual {
                continue;
            }
            if let (Some(sn6), Some(ip6), Some((key, port))) =
                (k.v6, a.public_ipv6, lease_data(a.backend_v6_data.as_ref()))
            {
                let port = if port == 0 { opts.listen_port_v6 } else { port };
                v6.peers.push(peer(
                    key,
                    SocketAddr::new(ip6.into(), port),
                    vec![sn6.into()],
                ));
            }
        }
        return if dual { vec![v4, v6] } else { vec![v4] };
    }
    // One device for both families.
    if dual {
        v4.addresses.extend(own_v6);
        v4.routes.extend(v6_net);
    }
    for (k, a) in remote {
        let d4 = lease_data(a.backend_data.as_ref());
        let d6 = if dual && k.v6.is_some() {
            lease_data(a.backend_v6_data.as_ref())
        } else {
            None
        };
        // flannel takes the IPv6 data's key when the lease has it.
        let Some((key, _)) = d6.or(d4) else { continue };
        let port_of = |d: Option<(Key, u16)>| match d {
            Some((_, p)) if p != 0 => p,
            _ => opts.listen_port,
        };
        let use_v6 = match opts.mode {
            Mode::Ipv6 => true,
            Mode::Auto => {
                a.public_ipv6.is_some()
                    && is_private(a.public_ip.into())
                    && a.public_ipv6.is_some_and(|ip| !is_private(ip.into()))
                    && own_public_ipv6.is_some_and(|ip| !is_private(ip.into()))
            }
            _ => false,
        };
        let endpoint = if use_v6 {
            let Some(ip6) = a.public_ipv6 else { continue };
            SocketAddr::new(ip6.into(), port_of(d6))
        } else {
            SocketAddr::new(a.public_ip.into(), port_of(d4))
        };
        let mut allowed: Vec<IpNetwork> = vec![k.v4.into()];
        if dual {
            allowed.extend(k.v6.map(IpNetwork::from));
        }
        v4.peers.push(peer(key, endpoint, allowed));
    }
    vec![v4]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;
    use crate::manager::StoredLease;
    use crate::subnet::config::NetConfig;
    use std::collections::BTreeMap;

    fn net(cfg: &str) -> (NetConfig, Box<dyn Backend>) {
        parse_config("/coreos.com/network/config", cfg).unwrap()
    }

    fn opts(n: &(NetConfig, Box<dyn Backend>)) -> WireguardOptions {
        match n.1.as_any().downcast_ref::<WireguardOptions>() {
            Some(o) => o.clone(),
            None => panic!("not wireguard: {:?}", n.1),
        }
    }

    /// The leases as the agent hands them to the data plane (unreadable ones never reach it).
    fn peers(leases: &BTreeMap<SubnetKey, StoredLease>) -> Vec<Peer> {
        leases
            .iter()
            .filter_map(|(key, l)| {
                Some(Peer {
                    key: *key,
                    attrs: l.attrs.clone().ok()?,
                })
            })
            .collect()
    }

    #[test]
    fn flannel_defaults_and_options() {
        let n = net(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}"#);
        assert_eq!(
            opts(&n),
            WireguardOptions {
                listen_port: 51820,
                listen_port_v6: 51821,
                psk: None,
                keepalive: 0,
                mode: Mode::Separate
            }
        );
        let psk = key::encode(&[3; 32]);
        let n = net(&format!(
            r#"{{"Network":"10.244.0.0/16","Backend":{{"type":"wireguard","listenPort":5000,"ListenPortV6":5001,"PSK":"{psk}","PersistentKeepaliveInterval":25,"Mode":"auto"}}}}"#
        ));
        let o = opts(&n);
        assert_eq!((o.listen_port, o.listen_port_v6), (5000, 5001));
        assert_eq!(o.psk, Some([3; 32]));
        assert_eq!(o.keepalive, 25);
        assert_eq!(o.mode, Mode::Auto);
    }

    #[test]
    fn bad_options_are_named() {
        for (backend, needle) in [
            (r#"{"Type":"wireguard","PSK":"short"}"#, "PSK"),
            (r#"{"Type":"wireguard","Mode":"both"}"#, "Mode"),
            (r#"{"Type":"wireguard","Mode":""}"#, "Mode"),
            (r#"{"Type":"wireguard","ListenPort":70000}"#, "Backend"),
            (
                r#"{"Type":"wireguard","PersistentKeepaliveInterval":100000}"#,
                "PersistentKeepaliveInterval",
            ),
        ] {
            let cfg = format!(r#"{{"Network":"10.244.0.0/16","Backend":{backend}}}"#);
            let err = parse_config("/k", &cfg).unwrap_err().to_string();
            assert!(err.contains(needle), "{backend}: {err}");
        }
    }

    const PUB: &str = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";

    #[test]
    fn lease_is_flanneld_s_bytes() {
        let n = net(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}"#);
        let keys = KeyPair {
            private: [0; 32],
            public: key::decode(PUB).unwrap(),
        };
        let a = lease_attrs(&opts(&n), &keys, "192.168.1.5".parse().unwrap(), None);
        assert_eq!(
            a.to_json(),
            format!(
                r#"{{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"wireguard","BackendData":{{"PublicKey":"{PUB}","Port":51820}}}}"#
            )
        );
        let dual = lease_attrs(
            &opts(&n),
            &keys,
            "192.168.1.5".parse().unwrap(),
            Some("fd00::5".parse().unwrap()),
        );
        assert_eq!(
            dual.to_json(),
            format!(
                r#"{{"PublicIP":"192.168.1.5","PublicIPv6":"fd00::5","BackendType":"wireguard","BackendData":{{"PublicKey":"{PUB}","Port":51820}},"BackendV6Data":{{"PublicKey":"{PUB}","Port":51821}}}}"#
            )
        );
    }

    fn lease(json: &str) -> StoredLease {
        StoredLease::from_json(json)
    }

    #[test]
    fn peers_need_a_whole_public_key() {
        let n = net(r#"{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard"}}"#);
        let check = |data: &str| {
            let json = format!(r#"{{"PublicIP":"192.168.1.5","BackendType":"wireguard",{data}}}"#);
            n.1.check_peer(&LeaseAttrs::parse(json.as_bytes()).unwrap())
        };
        let good = format!(r#""BackendData":{{"PublicKey":"{PUB}","Port":51820}}"#);
        assert_eq!(check(&good), Ok(()));
        let refused = |data: &str| match check(data) {
            Err(Refusal::Invalid(why)) => why,
            other => panic!("{data}: {other:?}"),
        };
        // 16 bytes: base64 all right, but not a key.
        let short = refused(r#""BackendData":{"PublicKey":"AQEBAQEBAQEBAQEBAQEBAQ==","Port":1}"#);
        assert!(
            short.contains("BackendData.PublicKey") && short.contains("32 bytes"),
            "{short}"
        );
        assert!(refused(r#""BackendData":{"PublicKey":"%%%"}"#).contains("not base64"));
        assert!(refused(r#""BackendData":{"PublicKey":7}"#).contains("not wireguard's"));
        assert!(refused(r#""BackendData":null"#).contains("missing"));
        let v6 = format!(
            r#"{good},"BackendV6Data":{{"PublicKey":"AQEBAQEBAQEBAQEBAQEBAQ==","Port":51821}}"#
        );
        assert!(refused(&v6).starts_with("BackendV6Data.PublicKey"));
    }

    #[test]
    fn peers_follow_the_leases() {
        let n = net(
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","PSK":"AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM=","PersistentKeepaliveInterval":5}}"#,
        );
        let own = SubnetKey::parse("10.244.9.0-24").unwrap();
        let mut leases = BTreeMap::new();
        leases.insert(own, lease(r#"{"PublicIP":"192.168.1.9","BackendType":"wireguard","BackendData":{"PublicKey":"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=","Port":51820}}"#));
        leases.insert(
            SubnetKey::parse("10.244.1.0-24").unwrap(),
            lease(&format!(r#"{{"PublicIP":"192.168.1.1","PublicIPv6":null,"BackendType":"wireguard","BackendData":{{"PublicKey":"{PUB}","Port":6000}}}}"#)),
        );
        // An older flanneld: no Port, so ours.
        leases.insert(
            SubnetKey::parse("10.244.2.0-24").unwrap(),
            lease(r#"{"PublicIP":"192.168.1.2","BackendType":"wireguard","BackendData":{"PublicKey":"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="}}"#),
        );
        // Another backend, and a broken key: not peers.
        leases.insert(
            SubnetKey::parse("10.244.3.0-24").unwrap(),
            lease(r#"{"PublicIP":"192.168.1.3","BackendType":"vxlan","BackendData":{"VNI":1}}"#),
        );
        leases.insert(
            SubnetKey::parse("10.244.4.0-24").unwrap(),
            lease(r#"{"PublicIP":"192.168.1.4","BackendType":"wireguard","BackendData":{"PublicKey":"nope"}}"#),
        );
        let plans = plan(&n.0.networks(), &opts(&n), &own, None, &peers(&leases));
        assert_eq!(plans.len(), 1);
        let p = &plans[0];
        assert_eq!(p.name, "flannel-wg");
        assert_eq!(p.listen_port, 51820);
        assert_eq!(p.addresses, vec!["10.244.9.0/32".parse().unwrap()]);
        assert_eq!(p.routes, vec!["10.244.0.0/16".parse().unwrap()]);
        assert_eq!(p.peers.len(), 2);
        assert_eq!(p.peers[0].public_key, key::decode(PUB).unwrap());
        assert_eq!(
            p.peers[0].endpoint,
            Some("192.168.1.1:6000".parse().unwrap())
        );
        assert_eq!(
            p.peers[0].allowed_ips,
            vec!["10.244.1.0/24".parse().unwrap()]
        );
        assert_eq!(p.peers[0].preshared_key, Some([3; 32]));
        assert_eq!(p.peers[0].persistent_keepalive, 5);
        assert_eq!(
            p.peers[1].endpoint,
            Some("192.168.1.2:51820".parse().unwrap())
        );
    }

    #[test]
    fn dual_stack_modes() {
        let dual = r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"wireguard"MODE}}"#;
        let own = SubnetKey::parse("10.244.9.0-24&fd00:10:244:9::-64").unwrap();
        let other = SubnetKey::parse("10.244.1.0-24&fd00:10:244:1::-64").unwrap();
        let mut leases = BTreeMap::new();
        leases.insert(
            other,
            lease(&format!(r#"{{"PublicIP":"192.168.1.1","PublicIPv6":"2001:db8::1","BackendType":"wireguard","BackendData":{{"PublicKey":"{PUB}","Port":51820}},"BackendV6Data":{{"PublicKey":"{PUB}","Port":51821}}}}"#)),
        );
        let n = net(&dual.replace("MODE", ""));
        let plans = plan(
            &n.0.networks(),
            &opts(&n),
            &own,
            Some("2001:db8::9".parse().unwrap()),
            &peers(&leases),
        );
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[1].name, "flannel-wg-v6");
        assert_eq!(plans[1].listen_port, 51821);
        assert_eq!(
            plans[1].addresses,
            vec!["fd00:10:244:9::/128".parse().unwrap()]
        );
        assert_eq!(
            plans[1].peers[0].endpoint,
            Some("[2001:db8::1]:51821".parse().unwrap())
        );
        assert_eq!(
            plans[1].peers[0].allowed_ips,
            vec!["fd00:10:244:1::/64".parse().unwrap()]
        );

        // auto: the peer's IPv4 is private and both IPv6 ends are public: over IPv6.
        let n = net(&dual.replace("MODE", r#","Mode":"auto""#));
        let plans = plan(
            &n.0.networks(),
            &opts(&n),
            &own,
            Some("2001:db8::9".parse().unwrap()),
            &peers(&leases),
        );
        assert_eq!(plans.len(), 1);
        let p = &plans[0];
        assert_eq!(p.routes.len(), 2);
        assert_eq!(p.addresses.len(), 2);
        assert_eq!(
            p.peers[0].endpoint,
            Some("[2001:db8::1]:51821".parse().unwrap())
        );
        assert_eq!(p.peers[0].allowed_ips.len(), 2);
        // ipv4: always the IPv4 endpoint.
        let n = net(&dual.replace("MODE", r#","Mode":"ipv4""#));
        let plans = plan(
            &n.0.networks(),
            &opts(&n),
            &own,
            Some("2001:db8::9".parse().unwrap()),
            &peers(&leases),
        );
        assert_eq!(
            plans[0].peers[0].endpoint,
            Some("192.168.1.1:51820".parse().unwrap())
        );
    }
}
