//! flannel's `udp` backend: pod packets to another node go through the TUN device `flannel0`
//! to a userspace packet engine (the `udp-proxy` crate, on threads of its own), which sends
//! each one as the payload of a UDP datagram from `Port` to `Port` (8285) of the node whose
//! subnet holds the destination, exactly as flanneld's proxy does, so flanneld nodes and ours
//! share one cluster. It needs no tunnel driver at all: TUN is in every kernel.
//!
//! - **Device**: `flannel0`, persistent, with the lease's network address as a /32, MTU =
//!   underlay − 28, transmit queue 2000 packets, and one route for the whole cluster network
//!   through it; the engine routes to the peers itself (longest prefix over their subnets).
//! - **Lease**: flanneld's for this backend, `{"PublicIP":"…","PublicIPv6":null}`, without
//!   `BackendType`: a lease without one is a udp peer (so is one saying `"udp"`).
//! - **Data path**: `--udp-datapath` (`fast`: batched system calls and offloads, or
//!   `per-packet`: flanneld's one read and one sendto per packet); see the crate's documentation.
//!
//! The engine starts at the first pass, once the lease is known (the lease's address is the
//! device's and the source of its ICMP answers, and the engine drops datagrams for any other
//! subnet), and again whenever its thread stopped (the device deleted), the device is gone, or
//! the lease, the underlay's MTU or its address changed.

mod error;
mod metrics;
mod plane;

use std::net::{Ipv4Addr, SocketAddrV4};

use ipnetwork::Ipv4Network;
use serde::Deserialize;
use udp_proxy::DataPathMode;

use crate::backend::flag::Flag;
use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, Need, Network, Node, Peer, Refusal,
    Registration,
};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
pub use error::UdpError;

pub const REGISTRATION: Registration = Registration {
    names: &["udp"],
    description: "flanneld's udp mode: flannel0 and a userspace packet engine, IPv4 only",
    needs: &[Need::Kernel("tun")],
    flags: &[DATAPATH],
    parse,
};

/// `--udp-datapath`: the packet engine's data path.
pub const DATAPATH: Flag = Flag {
    name: "--udp-datapath",
    value: "MODE",
    help: &[
        "the udp backend's packet engine: fast (batched system calls",
        "and offloads where the kernel has them; default) or",
        "per-packet (one read and one sendto per packet, as flanneld's",
        "proxy)",
    ],
    default: Some("fast"),
    check: |v| match datapath(v) {
        Some(_) => Ok(()),
        None => Err("is not a udp data path (fast or per-packet)".into()),
    },
    per_node: false,
};

/// The data path `--udp-datapath` names.
fn datapath(v: &str) -> Option<DataPathMode> {
    match v {
        "fast" => Some(DataPathMode::Fast),
        "per-packet" => Some(DataPathMode::PerPacket),
        _ => None,
    }
}

/// The TUN device, as flanneld names its first one.
pub const DEVICE: &str = "flannel0";
/// The outer IPv4 and UDP headers.
pub const OVERHEAD: u32 = udp_proxy::ENCAP_OVERHEAD;
/// flanneld's default `Port`.
pub const DEFAULT_PORT: u16 = udp_proxy::DEFAULT_PORT;

/// The `udp` backend's options (flannel's one: `Port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Udp {
    /// The UDP port the engine listens on and sends to, on every node.
    pub port: u16,
}

// flanneld decodes the Backend object into `struct { Port int }`: other keys are ignored.
#[derive(Deserialize)]
struct RawUdp {
    #[serde(rename = "Port", default)]
    port: Option<i64>,
}

fn parse(map: &BackendObject, net: &Network) -> Result<Box<dyn Backend>, String> {
    let raw: RawUdp = libcni::gojson::from_map(map).map_err(|e| format!("\"Backend\": {e}"))?;
    if net.dual_stack() {
        return Err(
            "the udp backend carries IPv4 only (flanneld's proxy forwards IPv4 packets); EnableIPv6 needs another backend (vxlan, host-gw, wireguard)"
                .into(),
        );
    }
    let port = match raw.port {
        None => DEFAULT_PORT,
        Some(p) => u16::try_from(p)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("\"Backend.Port\" {p} is outside 1..65535"))?,
    };
    Ok(Box::new(Udp { port }))
}

impl Backend for Udp {
    /// flannel's name for it; the lease itself carries no `BackendType`.
    fn type_name(&self) -> &'static str {
        "udp"
    }

    fn describe(&self) -> String {
        format!(
            "udp port {} ({DEVICE} and a userspace packet engine)",
            self.port
        )
    }

    fn mtu_overhead(&self) -> u32 {
        OVERHEAD
    }

    /// flanneld's udp leases have no `BackendType`; any other type is another backend's.
    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if is_udp_lease(attrs) {
            Ok(())
        } else {
            Err(Refusal::OtherBackend)
        }
    }

    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        Ok(Box::new(plane::UdpPlane::new(self, node)))
    }
}

fn is_udp_lease(attrs: &LeaseAttrs) -> bool {
    matches!(attrs.backend_type.as_str(), "" | "udp")
}

/// This node's lease value, as flanneld's udp backend writes it: the public address alone.
pub fn lease_attrs(public_ip: Ipv4Addr) -> LeaseAttrs {
    LeaseAttrs {
        public_ip,
        public_ipv6: None,
        backend_type: String::new(),
        backend_data: None,
        backend_v6_data: None,
    }
}

/// The engine's route table for the peer leases: each other udp lease's subnet to its
/// `PublicIP` on `port` (flanneld sends to its own `Port`, the same on every node), sorted.
pub fn peer_routes(own: &SubnetKey, peers: &[Peer], port: u16) -> Vec<(Ipv4Network, SocketAddrV4)> {
    let mut routes: Vec<(Ipv4Network, SocketAddrV4)> = peers
        .iter()
        .filter(|p| p.key != *own && is_udp_lease(&p.attrs))
        .map(|p| (p.key.v4, SocketAddrV4::new(p.attrs.public_ip, port)))
        .collect();
    routes.sort();
    routes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::parse_config;

    fn config(backend: &str) -> Result<Box<dyn Backend>, String> {
        parse_config(
            "/coreos.com/network/config",
            &format!(r#"{{"Network":"10.244.0.0/16","Backend":{backend}}}"#),
        )
        .map(|(_, b)| b)
        .map_err(|e| e.to_string())
    }

    fn port_of(b: &dyn Backend) -> u16 {
        b.as_any().downcast_ref::<Udp>().unwrap().port
    }

    #[test]
    fn options_are_read_as_flanneld_reads_them() {
        assert_eq!(port_of(config(r#"{"Type":"udp"}"#).unwrap().as_ref()), 8285);
        assert_eq!(
            port_of(
                config(r#"{"Type":"udp","port":9000,"Other":1}"#)
                    .unwrap()
                    .as_ref()
            ),
            9000
        );
        assert_eq!(
            port_of(config(r#"{"Type":"udp","Port":null}"#).unwrap().as_ref()),
            8285
        );
        // flannel's default backend, with no Backend at all.
        let (_, b) = parse_config("/k", r#"{"Network":"10.244.0.0/16"}"#).unwrap();
        assert_eq!(b.type_name(), "udp");
        assert_eq!(port_of(b.as_ref()), 8285);
        assert_eq!(b.mtu_overhead(), 28);
        for (backend, needle) in [
            (
                r#"{"Type":"udp","Port":0}"#,
                "\"Backend.Port\" 0 is outside 1..65535",
            ),
            (
                r#"{"Type":"udp","Port":70000}"#,
                "\"Backend.Port\" 70000 is outside",
            ),
            (
                r#"{"Type":"udp","Port":-1}"#,
                "\"Backend.Port\" -1 is outside",
            ),
            (r#"{"Type":"udp","Port":"8285"}"#, "\"Backend\""),
            (r#"{"Type":"udp","Port":8285.5}"#, "\"Backend\""),
        ] {
            let err = config(backend).unwrap_err();
            assert!(err.contains(needle), "{backend}: {err}");
        }
        let err = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56","Backend":{"Type":"udp"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("IPv4 only"), "{err}");
        assert_eq!(
            config(r#"{"Type":"udp","Port":9000}"#).unwrap().describe(),
            "udp port 9000 (flannel0 and a userspace packet engine)"
        );
    }

    #[test]
    fn the_lease_is_flanneld_s_byte_for_byte() {
        let attrs = lease_attrs("192.168.1.5".parse().unwrap());
        assert_eq!(
            attrs.to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null}"#
        );
        let read = LeaseAttrs::parse(attrs.to_json().as_bytes()).unwrap();
        assert_eq!(read, attrs);
    }

    #[test]
    fn peers_are_leases_without_a_backend_type() {
        let udp = Udp { port: 8285 };
        let check = |json: &str| udp.check_peer(&LeaseAttrs::parse(json.as_bytes()).unwrap());
        assert_eq!(
            check(r#"{"PublicIP":"10.0.0.1","PublicIPv6":null}"#),
            Ok(())
        );
        assert_eq!(
            check(r#"{"PublicIP":"10.0.0.1","BackendType":"udp"}"#),
            Ok(())
        );
        for other in ["vxlan", "host-gw", "UDP"] {
            assert_eq!(
                check(&format!(
                    r#"{{"PublicIP":"10.0.0.1","BackendType":"{other}"}}"#
                )),
                Err(Refusal::OtherBackend),
                "{other}"
            );
        }
    }

    #[test]
    fn routes_lead_to_each_peer_on_the_backend_s_port() {
        let key = |k: &str| SubnetKey::parse(k).unwrap();
        let peer = |k: &str, json: &str| Peer {
            key: key(k),
            attrs: LeaseAttrs::parse(json.as_bytes()).unwrap(),
        };
        let own = key("10.244.9.0-24");
        let peers = [
            peer("10.244.9.0-24", r#"{"PublicIP":"192.168.1.9"}"#),
            peer(
                "10.244.3.0-24",
                r#"{"PublicIP":"192.168.1.3","PublicIPv6":null}"#,
            ),
            peer(
                "10.244.1.0-24",
                r#"{"PublicIP":"172.16.0.1","BackendType":"udp"}"#,
            ),
            peer(
                "10.244.2.0-24",
                r#"{"PublicIP":"192.168.1.2","BackendType":"vxlan"}"#,
            ),
        ];
        let routes: Vec<String> = peer_routes(&own, &peers, 9000)
            .iter()
            .map(|(subnet, hop)| format!("{subnet}={hop}"))
            .collect();
        assert_eq!(
            routes,
            [
                "10.244.1.0/24=172.16.0.1:9000",
                "10.244.3.0/24=192.168.1.3:9000"
            ]
        );
    }
}
