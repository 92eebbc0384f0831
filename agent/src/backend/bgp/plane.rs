//! The bgp backend in the agent: its options as a [`Backend`] (registered as `"bgp"`) and
//! [`BgpPlane`], the [`DataPlane`] the agent's passes drive. Each pass hands BIRD this node's
//! subnet and the other bgp leases' `PublicIP`s ([`Bgp::apply`]); BIRD does the rest (sessions,
//! routes in the kernel) between passes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::Arc;

use super::driver::{Bgp, NodeInfo};
use super::error::BgpError;
use super::family::Ipv6Routes;
use super::node_as::{self, lease_as, parse_node_as};
use super::options::{self, parse_peers_flag, BgpOptions, NodeSettings};
use super::origin::LeaseRoute;
use super::{BACKEND_TYPE, MTU_OVERHEAD};
use crate::backend::underlay::Underlay;
use crate::backend::{
    Backend, BackendError, BackendObject, DataPlane, Need, Network, Node, Pass, Peer, Refusal,
    Registration,
};
use crate::ops::metrics::{Samples, Source};
use crate::subnet::key::SubnetKey;
use crate::subnet::lease::LeaseAttrs;
use crate::{log, warn};

pub const REGISTRATION: Registration = Registration {
    names: &[BACKEND_TYPE],
    description: "routes announced by BGP (BIRD 2 as a child process), no encapsulation",
    needs: &[Need::Program {
        name: "bird",
        package: "bird2",
    }],
    flags: options::FLAGS,
    parse: parse_backend,
};

/// The `Backend` object of a `"Type":"bgp"` config (errors name the option).
fn parse_backend(map: &BackendObject, net: &Network) -> Result<Box<dyn Backend>, String> {
    let opts = BgpOptions::parse(map).map_err(|e| e.to_string())?;
    opts.prefixes
        .check_network(net.v4, net.v6)
        .map_err(|e| e.to_string())?;
    Ok(Box::new(opts))
}

impl Backend for BgpOptions {
    fn type_name(&self) -> &'static str {
        BACKEND_TYPE
    }

    fn describe(&self) -> String {
        let mesh = if self.node_to_node_mesh {
            let mut detection = Vec::new();
            if let Some(h) = self.mesh_timers.hold_time {
                detection.push(format!("hold time {h} s"));
            }
            if let Some(k) = self.mesh_timers.keepalive_time {
                detection.push(format!("keepalive {k} s"));
            }
            if self.mesh_bfd {
                detection.push("BFD".to_string());
            }
            if detection.is_empty() {
                "node-to-node mesh".to_string()
            } else {
                format!("node-to-node mesh ({})", detection.join(", "))
            }
        } else {
            "no node mesh".to_string()
        };
        let gr = if self.graceful_restart {
            format!("graceful restart {} s", self.graceful_restart_time)
        } else {
            "no graceful restart".into()
        };
        let bfd_peers = self.peers.iter().filter(|p| p.bfd).count();
        let bfd_peers = if bfd_peers > 0 {
            format!(" ({bfd_peers} with BFD)")
        } else {
            String::new()
        };
        let prefixes = self
            .prefixes
            .describe()
            .map(|p| format!(", {p}"))
            .unwrap_or_default();
        format!(
            "bgp AS {}, {mesh}, {} configured peer{}{bfd_peers}, {gr}{prefixes}",
            self.as_number,
            self.peers.len(),
            if self.peers.len() == 1 { "" } else { "s" }
        )
    }

    fn mtu_overhead(&self) -> u32 {
        MTU_OVERHEAD
    }

    /// Another bgp lease; its `PublicIP` becomes a BGP neighbour, so it must be one, and its
    /// `BackendData` names its node's AS or nothing.
    fn check_peer(&self, attrs: &LeaseAttrs) -> Result<(), Refusal> {
        if attrs.backend_type != BACKEND_TYPE {
            return Err(Refusal::OtherBackend);
        }
        lease_as(attrs.backend_data.as_ref()).map_err(Refusal::Invalid)?;
        let ip = attrs.public_ip;
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || ip.is_loopback() {
            return Err(Refusal::Invalid(format!(
                "PublicIP {ip} cannot be a BGP neighbour"
            )));
        }
        Ok(())
    }

    /// Checks the node's flags and BIRD (found, directory usable); BIRD starts at the first
    /// pass, with the peers known by then.
    fn start(&self, node: &Node<'_>) -> Result<Box<dyn DataPlane>, BackendError> {
        let defaults = NodeSettings::default();
        let settings = NodeSettings {
            bird_binary: node
                .flag(&options::BIRD_BINARY)
                .map_or(defaults.bird_binary, PathBuf::from),
            dir: node.flag(&options::DIR).map_or(defaults.dir, PathBuf::from),
            peers: parse_peers_flag(node.flag(&options::PEERS).unwrap_or_default())?,
            as_number: node
                .flag(&node_as::NODE_AS)
                .map(|v| {
                    parse_node_as(v).map_err(|why| {
                        BgpError::option(node_as::NODE_AS.name, format!("{v:?} {why}"))
                    })
                })
                .transpose()?,
        };
        if let Some(n) = settings.as_number {
            log!(
                "bgp: this node is in AS {n} (--bgp-as; the network's ASNumber is {})",
                self.as_number
            );
        }
        let node_as = settings.as_number;
        // Dual-stack: the IPv6 subnet's next hop is the node's PublicIPv6.
        let v6 = match (node.network.v6, node.public_ipv6) {
            (Some(network), Some(ip)) => Some((network, ip)),
            (Some(network), None) => {
                return Err(BgpError::Underlay(format!(
                    "the bgp backend on a dual-stack network (IPv6Network {network}) needs this node's IPv6 address (--public-ipv6): it is the next hop of the node's IPv6 subnet"
                ))
                .into())
            }
            (None, _) => None,
        };
        let learns = self.node_to_node_mesh || !self.peers.is_empty() || !settings.peers.is_empty();
        if !learns {
            warn!("bgp: NodeToNodeMesh is off and no Peers nor --bgp-peers are given: this node announces its subnet to nobody and learns no route");
        }
        let info = NodeInfo {
            public_ip: node.public_ip,
            network: node.network.v4,
            network6: node.network.v6,
            name: node.name.map(str::to_string),
        };
        let bgp = Bgp::new(self.clone(), settings, info)?;
        log!(
            "bgp: BIRD {}, control socket {} (birdc -s {} show protocols)",
            bgp.bird_binary().display(),
            bgp.control_socket().display(),
            bgp.control_socket().display()
        );
        Ok(Box::new(BgpPlane {
            bgp,
            as_number: self.as_number,
            node_as,
            learns,
            public_ip: node.public_ip,
            v6,
            iface: node.iface(),
        }))
    }
}

/// This node's lease value (the `PublicIP` is the next hop): no backend data, or the node's
/// own AS (`--bgp-as`) as `{"ASNumber": N}`.
pub fn lease_attrs(public_ip: Ipv4Addr, node_as: Option<u32>) -> LeaseAttrs {
    LeaseAttrs {
        public_ip,
        public_ipv6: None,
        backend_type: BACKEND_TYPE.into(),
        backend_data: node_as::lease_data(node_as),
        backend_v6_data: None,
    }
}

/// This node's lease value for `key`: [`lease_attrs`], with the `PublicIPv6` when the key has
/// an IPv6 subnet (a dual-stack network).
pub fn key_lease_attrs(
    key: &SubnetKey,
    public_ip: Ipv4Addr,
    public_ipv6: Option<Ipv6Addr>,
    node_as: Option<u32>,
) -> LeaseAttrs {
    LeaseAttrs {
        public_ipv6: key.v6.and(public_ipv6),
        ..lease_attrs(public_ip, node_as)
    }
}

/// The other nodes' addresses among the peer leases (each once, never ours): the mesh.
pub fn mesh_members(own: &SubnetKey, own_ip: Ipv4Addr, peers: &[Peer]) -> Vec<Ipv4Addr> {
    let mut ips: Vec<Ipv4Addr> = peers
        .iter()
        .filter(|p| p.key != *own && p.attrs.public_ip != own_ip)
        .map(|p| p.attrs.public_ip)
        .collect();
    ips.sort_unstable();
    ips.dedup();
    ips
}

/// The other nodes' leases, as the import filter checks routes against them (never ours, nor
/// one claiming our address), each in the AS its `BackendData` names, else `cluster_as`.
pub fn lease_routes(
    own: &SubnetKey,
    own_ip: Ipv4Addr,
    peers: &[Peer],
    cluster_as: u32,
) -> Vec<LeaseRoute> {
    let mut v: Vec<LeaseRoute> = peers
        .iter()
        .filter(|p| p.key.v4 != own.v4 && p.attrs.public_ip != own_ip)
        .map(|p| LeaseRoute {
            subnet: p.key.v4,
            next_hop: p.attrs.public_ip,
            origin_as: origin_as(p.attrs.backend_data.as_ref(), cluster_as),
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The AS a lease's subnets originate in: the one its `BackendData` names, else `cluster_as`.
fn origin_as(backend_data: Option<&serde_json::Value>, cluster_as: u32) -> u32 {
    // Leases with unusable data were refused (`check_peer`) before they got here.
    lease_as(backend_data).ok().flatten().unwrap_or(cluster_as)
}

/// The bgp backend on this node.
pub struct BgpPlane {
    bgp: Bgp,
    /// The cluster's AS: the origin of the subnet of every node whose lease names no AS.
    as_number: u32,
    /// `--bgp-as`: this node's own AS, published in its lease.
    node_as: Option<u32>,
    /// Whether the node has anyone to learn routes from (the mesh, or configured peers).
    learns: bool,
    public_ip: Ipv4Addr,
    /// On a dual-stack network: the `IPv6Network` and this node's `PublicIPv6`.
    v6: Option<(ipnetwork::Ipv6Network, Ipv6Addr)>,
    iface: Option<String>,
}

impl DataPlane for BgpPlane {
    fn lease_attrs(&self, key: &SubnetKey) -> LeaseAttrs {
        let public_ipv6 = self.v6.map(|(_, ip)| ip);
        key_lease_attrs(key, self.public_ip, public_ipv6, self.node_as)
    }

    fn reconcile(&mut self, own: &SubnetKey, peers: &[Peer]) -> Result<Pass, BackendError> {
        let underlay =
            Underlay::find(self.iface.as_deref(), self.public_ip).map_err(BgpError::Underlay)?;
        if !underlay.has_public_ip && !is_local(self.public_ip)? {
            return Err(BgpError::Underlay(format!(
                "the bgp backend needs this node's public address {} on one of its interfaces: it is the BGP sessions' source address and the next hop of this node's subnet (a node behind NAT cannot peer)",
                self.public_ip
            ))
            .into());
        }
        let members = mesh_members(own, self.public_ip, peers);
        let leases = lease_routes(own, self.public_ip, peers, self.as_number);
        let cluster_as = self.as_number;
        let v6 = self.v6.and_then(|(network, ip)| {
            Ipv6Routes::new(own, ip, network, peers, |p| {
                origin_as(p.attrs.backend_data.as_ref(), cluster_as)
            })
        });
        let report = self
            .bgp
            .apply_dual(own.v4, &members, &leases, v6.as_ref())?;
        Ok(Pass {
            mtu: underlay.mtu,
            // Reached through their mesh session, or through the configured routers.
            programmed: if self.learns { members.len() } else { 0 },
            log: report.log_line().into_iter().collect(),
            lease_attrs: None,
        })
    }

    fn metrics_source(&self) -> Option<Source> {
        let reader = self.bgp.metrics_reader();
        Some(Arc::new(move |samples: &mut Samples| {
            for f in reader.families() {
                samples.family(f.name, f.kind, f.help, &f.samples);
            }
        }))
    }

    /// BIRD stops for a graceful restart: its routes stay in the kernel, peers keep this
    /// node's for the restart time, and the next agent's BIRD takes over.
    fn stop(&mut self) {
        log!("bgp: {}", self.bgp.stop());
    }
}

/// Whether `ip` is an address of an interface of this node.
fn is_local(ip: Ipv4Addr) -> Result<bool, BgpError> {
    let mut sock = netkit::Socket::new()?;
    let addrs = sock.addresses(None, netkit::Family::V4)?;
    Ok(addrs.iter().any(|a| a.ip() == IpAddr::V4(ip)))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::backend::registry::parse_config;

    /// Another node's lease, from its key and its JSON value.
    pub(in crate::backend::bgp) fn peer(key: &str, json: &str) -> Peer {
        Peer {
            key: SubnetKey::parse(key).unwrap(),
            attrs: LeaseAttrs::parse(json.as_bytes()).unwrap(),
        }
    }

    #[test]
    fn config_and_lease() {
        let (_, n) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","ASNumber":65001,"NodeToNodeMesh":false,"Peers":[{"PeerIP":"192.0.2.1","Password":"x"}]}}"#,
        )
        .unwrap();
        assert_eq!(n.type_name(), "bgp");
        assert_eq!(n.mtu_overhead(), 0);
        assert_eq!(
            n.describe(),
            "bgp AS 65001, no node mesh, 1 configured peer, graceful restart 120 s"
        );
        let opts = n.as_any().downcast_ref::<BgpOptions>().unwrap();
        assert_eq!(opts.peers[0].as_number, 65001);
        assert_eq!(
            lease_attrs("192.168.1.5".parse().unwrap(), None).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"bgp"}"#
        );
        assert_eq!(
            lease_attrs("192.168.1.5".parse().unwrap(), Some(65001)).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"bgp","BackendData":{"ASNumber":65001}}"#
        );
        // The same options compare equal (a resync notices no change), others do not.
        let (_, again) = parse_config(
            "/k",
            r#"{"network":"10.244.0.0/16","backend":{"type":"bgp","asnumber":65001,"nodetonodemesh":false,"peers":[{"peerip":"192.0.2.1","password":"x"}]}}"#,
        )
        .unwrap();
        assert!(n.same_options(again.as_ref()));
        let (_, other) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp"}}"#,
        )
        .unwrap();
        assert!(!n.same_options(other.as_ref()));
    }

    #[test]
    fn bad_options_name_the_option_and_the_key() {
        for (json, needle) in [
            (
                r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","ASNumber":0}}"#,
                "bad network config at /k: \"Backend.ASNumber\" 0 is outside 1..4294967295",
            ),
            (
                r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","NodeMesh":true}}"#,
                "\"Backend.NodeMesh\" is not an option of the bgp backend",
            ),
            (
                r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","Peers":[{"PeerIP":"nope"}]}}"#,
                "\"Backend.Peers[0].PeerIP\" \"nope\" is not an IPv4 address",
            ),
            (
                r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","AdvertisePrefixes":[{"Prefix":"10.244.128.0/17"}]}}"#,
                "bad network config at /k: \"Backend.AdvertisePrefixes[0].Prefix\" 10.244.128.0/17 overlaps the cluster Network 10.244.0.0/16",
            ),
            (
                r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp","AdvertisePrefixes":[{"Prefix":"fd00:96::/108"}]}}"#,
                "bad network config at /k: \"Backend.AdvertisePrefixes[0].Prefix\" fd00:96::/108 is an IPv6 prefix, but the network is IPv4-only",
            ),
            (
                r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"bgp","ExternalPrefixes":[{"Prefix":"fd00:10:244:9::/64","Peers":["192.0.2.1"]}]}}"#,
                "bad network config at /k: \"Backend.ExternalPrefixes[0].Prefix\" fd00:10:244:9::/64 is inside the cluster IPv6Network fd00:10:244::/56",
            ),
        ] {
            let e = parse_config("/k", json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }

    /// A dual-stack network is accepted, with IPv6 advertised and external prefixes; the
    /// lease then carries the node's `PublicIPv6`.
    #[test]
    fn dual_stack_network() {
        let (_, n) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"bgp"}}"#,
        )
        .unwrap();
        assert_eq!(n.type_name(), "bgp");
        let (_, with_prefixes) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"bgp","AdvertisePrefixes":[{"Prefix":"fd00:96::/108"}],"ExternalPrefixes":[{"Prefix":"::/0","Peers":["192.0.2.1"]}]}}"#,
        )
        .unwrap();
        assert!(
            with_prefixes
                .describe()
                .ends_with(", 1 advertised prefix, 1 external prefix"),
            "{}",
            with_prefixes.describe()
        );
        let ip = "192.168.1.5".parse().unwrap();
        let ip6: Ipv6Addr = "fd00:31:250::5".parse().unwrap();
        let key = SubnetKey::parse("10.244.5.0-24&fd00:10:244:5::-64").unwrap();
        assert_eq!(
            key_lease_attrs(&key, ip, Some(ip6), None).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":"fd00:31:250::5","BackendType":"bgp"}"#
        );
        // An IPv4-only key publishes none.
        let v4 = SubnetKey::parse("10.244.5.0-24").unwrap();
        assert_eq!(
            key_lease_attrs(&v4, ip, Some(ip6), None).to_json(),
            r#"{"PublicIP":"192.168.1.5","PublicIPv6":null,"BackendType":"bgp"}"#
        );
    }

    #[test]
    fn peers_are_bgp_leases_with_a_usable_address() {
        let (_, n) = parse_config(
            "/k",
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"bgp"}}"#,
        )
        .unwrap();
        let b = n.as_ref();
        let attrs = |json: &str| LeaseAttrs::parse(json.as_bytes()).unwrap();
        assert_eq!(
            b.check_peer(&attrs(r#"{"PublicIP":"192.168.1.6","BackendType":"bgp"}"#)),
            Ok(())
        );
        assert_eq!(
            b.check_peer(&attrs(
                r#"{"PublicIP":"192.168.1.6","BackendType":"host-gw"}"#
            )),
            Err(Refusal::OtherBackend)
        );
        assert_eq!(
            b.check_peer(&attrs(
                r#"{"PublicIP":"192.168.1.6","BackendType":"bgp","BackendData":{"ASNumber":65006}}"#
            )),
            Ok(())
        );
        assert_eq!(
            b.check_peer(&attrs(
                r#"{"PublicIP":"192.168.1.6","BackendType":"bgp","BackendData":null}"#
            )),
            Ok(())
        );
        assert_eq!(
            b.check_peer(&attrs(
                r#"{"PublicIP":"192.168.1.6","BackendType":"bgp","BackendData":{"ASNumber":0}}"#
            )),
            Err(Refusal::Invalid(
                "BackendData.ASNumber 0 is outside 1..4294967294".into()
            ))
        );
        assert_eq!(
            b.check_peer(&attrs(r#"{"PublicIP":"0.0.0.0","BackendType":"bgp"}"#)),
            Err(Refusal::Invalid(
                "PublicIP 0.0.0.0 cannot be a BGP neighbour".into()
            ))
        );
    }

    #[test]
    fn mesh_is_every_other_address_once_and_leases_every_other_lease() {
        let own = SubnetKey::parse("10.244.1.0-24").unwrap();
        let own_ip: Ipv4Addr = "192.168.1.1".parse().unwrap();
        let peers = [
            peer(
                "10.244.1.0-24",
                r#"{"PublicIP":"192.168.1.1","BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.3.0-24",
                r#"{"PublicIP":"192.168.1.3","BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.2.0-24",
                r#"{"PublicIP":"192.168.1.2","BackendType":"bgp"}"#,
            ),
            // A stale lease of node 3, and one claiming our address.
            peer(
                "10.244.9.0-24",
                r#"{"PublicIP":"192.168.1.3","BackendType":"bgp"}"#,
            ),
            peer(
                "10.244.8.0-24",
                r#"{"PublicIP":"192.168.1.1","BackendType":"bgp"}"#,
            ),
        ];
        let leases = lease_routes(&own, own_ip, &peers, 64512);
        let pairs: Vec<(String, String)> = leases
            .iter()
            .map(|l| (l.subnet.to_string(), l.next_hop.to_string()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("10.244.2.0/24", "192.168.1.2"),
                ("10.244.3.0/24", "192.168.1.3"),
                ("10.244.9.0/24", "192.168.1.3"),
            ]
            .map(|(s, ip)| (s.to_string(), ip.to_string()))
        );
        assert!(leases.iter().all(|l| l.origin_as == 64512));
        assert_eq!(
            mesh_members(&own, own_ip, &peers),
            vec![
                "192.168.1.2".parse::<Ipv4Addr>().unwrap(),
                "192.168.1.3".parse().unwrap()
            ]
        );
    }

    /// In kube mode the node's AS travels in the `backend-data` annotation, as flanneld's
    /// backends' data does, and comes back as the same AS; a node without one publishes
    /// `null`, the cluster's AS.
    #[test]
    fn node_as_in_the_kube_annotations() {
        use crate::manager::kube::annotations::{Annotations, NodeFacts, DEFAULT_PREFIX};
        let a = Annotations::new(DEFAULT_PREFIX).unwrap();
        let node = |published: std::collections::BTreeMap<String, String>| NodeFacts {
            name: "n2".into(),
            created: 1,
            pod_cidrs: vec!["10.244.2.0/24".into()],
            annotations: published,
        };
        let empty = node(Default::default());
        for (node_as, text) in [(Some(65002), r#"{"ASNumber":65002}"#), (None, "null")] {
            let published = a.published(
                &lease_attrs("192.168.1.2".parse().unwrap(), node_as),
                &empty,
            );
            assert_eq!(published["flannel.alpha.coreos.com/backend-data"], text);
            let lease = a.lease_of(&node(published), false).unwrap();
            let attrs = lease.attrs.unwrap();
            assert_eq!(lease_as(attrs.backend_data.as_ref()), Ok(node_as));
        }
    }

    /// A lease naming its node's AS is checked against that AS; one naming none, against the
    /// cluster's.
    #[test]
    fn each_lease_in_its_nodes_as() {
        let own = SubnetKey::parse("10.244.1.0-24").unwrap();
        let peers = [
            peer(
                "10.244.2.0-24",
                r#"{"PublicIP":"192.168.1.2","BackendType":"bgp","BackendData":{"ASNumber":65002}}"#,
            ),
            peer(
                "10.244.3.0-24",
                r#"{"PublicIP":"192.168.1.3","BackendType":"bgp","BackendData":null}"#,
            ),
        ];
        let leases = lease_routes(&own, "192.168.1.1".parse().unwrap(), &peers, 64512);
        let origins: Vec<(String, u32)> = leases
            .iter()
            .map(|l| (l.subnet.to_string(), l.origin_as))
            .collect();
        assert_eq!(
            origins,
            vec![
                ("10.244.2.0/24".to_string(), 65002),
                ("10.244.3.0/24".to_string(), 64512)
            ]
        );
    }
}
