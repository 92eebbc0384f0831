//! Prefixes beyond the pod subnets: what the nodes announce on top of their subnet
//! (`AdvertisePrefixes`: service cluster IPs, external IPs, load-balancer pools) and what they
//! accept from the routers on top of the other nodes' subnets (`ExternalPrefixes`: a fabric's
//! default route, a datacenter aggregate). Options, validation and their parts of BIRD's
//! configuration.
//!
//! - An advertised prefix is a `blackhole` route of the static protocol `announced`, exported
//!   to the configured peers (routers, reflectors) with this node's address as next hop, as
//!   the node's subnet is. Several nodes announcing one prefix give the routers equal paths
//!   (ECMP). Never written to the kernel: kube-proxy handles the traffic arriving for it, and a
//!   kernel blackhole for a service range would drop that traffic. Not sent to the mesh either:
//!   every node has its own copy, another's would only be refused.
//! - No node imports an advertised prefix, or anything inside one, from anybody: its copies
//!   come back from reflectors and routers, and each node keeps its own.
//! - An external prefix is accepted exactly (not a more-specific one inside it) and only from
//!   the peers it names; it goes to the kernel as the other nodes' subnets do (`proto bird`),
//!   unless the node has a route of its own for it: the routes BIRD learns from the kernel
//!   then rank above BGP's.
//!
//! On a dual-stack network the entries may be IPv6 too: the same rules, written once per
//! family ([`Family`]'s names) into each half of the configuration. The `Peers` of an IPv6
//! external prefix are IPv4 session addresses all the same: the IPv6 routes travel in the
//! IPv4 sessions.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};
use serde_json::{Map, Value};

use super::address_family::Family;
use super::error::BgpError;
use super::refusal::Reason;

const ADVERTISED_FIELDS: &[&str] = &["Prefix", "Nodes"];
const EXTERNAL_FIELDS: &[&str] = &["Prefix", "Peers"];
/// The preference of the routes BIRD learns from the kernel when external prefixes are
/// accepted: above BGP's 100.
const KERNEL_PREFERENCE: u32 = 150;
/// A Kubernetes node name's longest form (a DNS subdomain).
const MAX_NODE_NAME_LEN: usize = 253;

/// Who announces an advertised prefix: a node by its lease's `PublicIP`, or by its node name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeRef {
    Address(Ipv4Addr),
    Name(String),
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRef::Address(ip) => write!(f, "{ip}"),
            NodeRef::Name(name) => write!(f, "{name:?}"),
        }
    }
}

/// One entry of `AdvertisePrefixes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedPrefix {
    pub prefix: IpNetwork,
    /// `None`: every node announces it.
    pub nodes: Option<Vec<NodeRef>>,
}

impl AdvertisedPrefix {
    /// Whether the node with this address (and this name, when the agent knows it) announces
    /// the prefix.
    pub fn announced_by(&self, ip: Ipv4Addr, name: Option<&str>) -> bool {
        let Some(nodes) = &self.nodes else {
            return true;
        };
        nodes.iter().any(|n| match n {
            NodeRef::Address(a) => *a == ip,
            NodeRef::Name(n) => Some(n.as_str()) == name,
        })
    }

    /// Whether `Nodes` names a node by name (which only an agent knowing its name matches).
    pub fn names_nodes(&self) -> bool {
        self.nodes
            .iter()
            .flatten()
            .any(|n| matches!(n, NodeRef::Name(_)))
    }
}

/// One entry of `ExternalPrefixes` (of either family as parsed, of one in a [`NodePrefixes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalPrefix<Net = IpNetwork> {
    pub prefix: Net,
    /// The only peers it is accepted from.
    pub peers: Vec<Ipv4Addr>,
}

/// Both lists, as the network config gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prefixes {
    pub advertise: Vec<AdvertisedPrefix>,
    pub external: Vec<ExternalPrefix>,
}

impl Prefixes {
    /// Decodes both lists from the `Backend` object (Go's leniency: keys fold, `null` is none).
    pub fn parse(backend: &Map<String, Value>) -> Result<Prefixes, BgpError> {
        let mut out = Prefixes::default();
        if let Some(list) = libcni::gojson::get(backend, "AdvertisePrefixes") {
            out.advertise = advertised(list)?;
        }
        if let Some(list) = libcni::gojson::get(backend, "ExternalPrefixes") {
            out.external = external(list)?;
        }
        for (i, e) in out.external.iter().enumerate() {
            if let Some(a) = out.advertise.iter().find(|a| inside(e.prefix, a.prefix)) {
                return Err(BgpError::option(
                    format!("Backend.ExternalPrefixes[{i}].Prefix"),
                    format!(
                        "{} is inside the advertised prefix {}, which the nodes never import",
                        e.prefix, a.prefix
                    ),
                ));
            }
        }
        Ok(out)
    }

    /// Refuses what would clash with the pod subnets: an advertised prefix overlapping the
    /// cluster `Network` (`IPv6Network`), an external prefix equal to it or inside it (the
    /// leases are the authority there; a shorter one, a default route or an aggregate, is
    /// fine); and an IPv6 entry on a network without `IPv6Network`.
    pub fn check_network(
        &self,
        network: Ipv4Network,
        network6: Option<Ipv6Network>,
    ) -> Result<(), BgpError> {
        for (i, a) in self.advertise.iter().enumerate() {
            let option = format!("Backend.AdvertisePrefixes[{i}].Prefix");
            let (name, cluster) = cluster_network(&option, a.prefix, network, network6)?;
            if overlaps(a.prefix, cluster) {
                return Err(BgpError::option(
                    option,
                    format!("{} overlaps the cluster {name} {cluster}", a.prefix),
                ));
            }
        }
        for (i, e) in self.external.iter().enumerate() {
            let option = format!("Backend.ExternalPrefixes[{i}].Prefix");
            let (name, cluster) = cluster_network(&option, e.prefix, network, network6)?;
            if inside(e.prefix, cluster) {
                return Err(BgpError::option(
                    option,
                    format!(
                        "{} is inside the cluster {name} {cluster}, whose routes come from the leases",
                        e.prefix
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What this node's BIRD needs in its IPv4 half: the advertised prefixes this node
    /// announces, and the external ones.
    pub fn for_node(&self, ip: Ipv4Addr, name: Option<&str>) -> NodePrefixes {
        self.family_for_node(ip, name)
    }

    /// [`Prefixes::for_node`] for the IPv6 half of a dual-stack network.
    pub fn for_node6(&self, ip: Ipv4Addr, name: Option<&str>) -> NodePrefixes6 {
        self.family_for_node(ip, name)
    }

    fn family_for_node<Net: Family>(&self, ip: Ipv4Addr, name: Option<&str>) -> NodePrefixes<Net> {
        NodePrefixes {
            advertised: self
                .advertise
                .iter()
                .filter_map(|a| Net::of(a.prefix))
                .collect(),
            announced: self
                .advertise
                .iter()
                .filter(|a| a.announced_by(ip, name))
                .filter_map(|a| Net::of(a.prefix))
                .collect(),
            external: self
                .external
                .iter()
                .filter_map(|e| {
                    Some(ExternalPrefix {
                        prefix: Net::of(e.prefix)?,
                        peers: e.peers.clone(),
                    })
                })
                .collect(),
        }
    }

    /// `2 advertised prefixes, 1 external prefix`, or nothing when both
    /// lists are empty.
    pub fn describe(&self) -> Option<String> {
        if self.advertise.is_empty() && self.external.is_empty() {
            return None;
        }
        let prefixes =
            |n: usize, kind: &str| format!("{n} {kind} prefix{}", if n == 1 { "" } else { "es" });
        Some(format!(
            "{}, {}",
            prefixes(self.advertise.len(), "advertised"),
            prefixes(self.external.len(), "external")
        ))
    }
}

/// The prefixes of one family in one node's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePrefixes<Net = Ipv4Network> {
    /// Every advertised prefix of the network: refused from every peer.
    pub advertised: Vec<Net>,
    /// Those this node announces.
    pub announced: Vec<Net>,
    pub external: Vec<ExternalPrefix<Net>>,
}

/// The IPv6 entries, for the IPv6 half of the configuration.
pub type NodePrefixes6 = NodePrefixes<Ipv6Network>;

impl<Net> Default for NodePrefixes<Net> {
    fn default() -> Self {
        NodePrefixes {
            advertised: Vec::new(),
            announced: Vec::new(),
            external: Vec::new(),
        }
    }
}

impl<Net: Family> NodePrefixes<Net> {
    /// The import filter's statements for these prefixes (after the own-subnet check, before
    /// the leases' rules).
    pub fn write_import_rules(&self, o: &mut String) -> std::fmt::Result {
        if !self.advertised.is_empty() {
            writeln!(
                o,
                "  # Advertised by the nodes themselves: never another's copy, nor a part of one."
            )?;
            let set: Vec<String> = self.advertised.iter().map(|p| format!("{p}+")).collect();
            writeln!(
                o,
                "  if net ~ [ {} ] then {};",
                set.join(", "),
                Reason::Advertised.statement()
            )?;
        }
        if !self.external.is_empty() {
            writeln!(
                o,
                "  # External prefixes: exactly, from the peers named only."
            )?;
        }
        for e in &self.external {
            let peers: Vec<String> = e.peers.iter().map(ToString::to_string).collect();
            writeln!(
                o,
                "  if net = {} then {{ if from ~ [ {} ] then accept; {}; }}",
                e.prefix,
                peers.join(", "),
                Reason::ExternalPeer.statement()
            )?;
        }
        Ok(())
    }

    /// The kernel import filter's statement: the node's own routes rank above BGP's (100),
    /// so an external prefix the node routes itself (its default route) stays the node's,
    /// and BIRD never resolves a next hop through a BGP route (it refuses to: a recursive
    /// route through a recursive route is unreachable).
    pub fn write_kernel_import_rules(&self, o: &mut String) -> std::fmt::Result {
        if self.external.is_empty() {
            return Ok(());
        }
        writeln!(
            o,
            "  preference = {KERNEL_PREFERENCE};  # the node's own routes win over external prefixes"
        )
    }

    /// The kernel export filter's statement for the external prefixes.
    pub fn write_kernel_rules(&self, o: &mut String) -> std::fmt::Result {
        if self.external.is_empty() {
            return Ok(());
        }
        let set: Vec<String> = self.external.iter().map(|e| e.prefix.to_string()).collect();
        writeln!(
            o,
            "  if source = RTS_BGP && net ~ [ {} ] then accept;",
            set.join(", ")
        )
    }

    /// The configured peers' export filter: the node's subnet and its advertised prefixes.
    pub fn write_peer_export(&self, o: &mut String) -> std::fmt::Result {
        let suffix = Net::SUFFIX;
        writeln!(o, "filter export_to_peers{suffix} {{")?;
        writeln!(o, "  if net = OWN_SUBNET{suffix} then accept;")?;
        if !self.announced.is_empty() {
            writeln!(
                o,
                "  if proto = \"announced{suffix}\" && net ~ {} then accept;",
                exact_set(&self.announced)
            )?;
        }
        writeln!(o, "  reject;")?;
        writeln!(o, "}}")
    }

    /// The static protocol holding the announced prefixes (none when there are none).
    pub fn write_static(&self, o: &mut String) -> std::fmt::Result {
        if self.announced.is_empty() {
            return Ok(());
        }
        writeln!(
            o,
            "# Advertised prefixes: announced to the peers, never written to the kernel."
        )?;
        writeln!(o, "protocol static announced{} {{", Net::SUFFIX)?;
        writeln!(o, "  {};", Net::CHANNEL)?;
        for p in &self.announced {
            writeln!(o, "  route {p} blackhole;")?;
        }
        writeln!(o, "}}")
    }
}

fn exact_set<Net: Family>(prefixes: &[Net]) -> String {
    let items: Vec<String> = prefixes.iter().map(ToString::to_string).collect();
    format!("[ {} ]", items.join(", "))
}

/// Never for prefixes of two families.
fn overlaps(a: IpNetwork, b: IpNetwork) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

/// Whether `inner` is `outer` or a part of it (never across families).
fn inside(inner: IpNetwork, outer: IpNetwork) -> bool {
    outer.contains(inner.network()) && outer.prefix() <= inner.prefix()
}

/// The cluster network of `prefix`'s family, with its name in the network config; an IPv6
/// prefix on a network without `IPv6Network` is refused (nothing would carry it).
fn cluster_network(
    option: &str,
    prefix: IpNetwork,
    network: Ipv4Network,
    network6: Option<Ipv6Network>,
) -> Result<(&'static str, IpNetwork), BgpError> {
    match (prefix, network6) {
        (IpNetwork::V4(_), _) => Ok(("Network", network.into())),
        (IpNetwork::V6(_), Some(network6)) => Ok(("IPv6Network", network6.into())),
        (IpNetwork::V6(_), None) => Err(BgpError::option(
            option,
            format!("{prefix} is an IPv6 prefix, but the network is IPv4-only: IPv6 entries need a dual-stack network (EnableIPv6 and IPv6Network)"),
        )),
    }
}

/// `AdvertisePrefixes`: `[{"Prefix": "10.96.0.0/12", "Nodes": ["192.0.2.11", "node-a"]}]`.
fn advertised(list: &Value) -> Result<Vec<AdvertisedPrefix>, BgpError> {
    let items = list_of("Backend.AdvertisePrefixes", list, "{\"Prefix\", \"Nodes\"}")?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("Backend.AdvertisePrefixes[{i}]");
        let obj = object(&at, item, ADVERTISED_FIELDS)?;
        let prefix = prefix(obj, &at)?;
        if prefix.prefix() == 0 {
            return Err(BgpError::option(
                format!("{at}.Prefix"),
                format!("{prefix} would make every node the way to everything"),
            ));
        }
        if !seen.insert(prefix) {
            return Err(BgpError::option(
                format!("{at}.Prefix"),
                format!("{prefix} is listed twice"),
            ));
        }
        let nodes = match libcni::gojson::get(obj, "Nodes") {
            None | Some(Value::Null) => None,
            Some(v) => Some(nodes(&format!("{at}.Nodes"), v)?),
        };
        out.push(AdvertisedPrefix { prefix, nodes });
    }
    Ok(out)
}

/// `ExternalPrefixes`: `[{"Prefix": "0.0.0.0/0", "Peers": ["192.0.2.1"]}]`.
fn external(list: &Value) -> Result<Vec<ExternalPrefix>, BgpError> {
    let items = list_of("Backend.ExternalPrefixes", list, "{\"Prefix\", \"Peers\"}")?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("Backend.ExternalPrefixes[{i}]");
        let obj = object(&at, item, EXTERNAL_FIELDS)?;
        let prefix = prefix(obj, &at)?;
        if !seen.insert(prefix) {
            return Err(BgpError::option(
                format!("{at}.Prefix"),
                format!("{prefix} is listed twice"),
            ));
        }
        let option = format!("{at}.Peers");
        let texts: Vec<String> = match libcni::gojson::get(obj, "Peers") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => libcni::gojson::from_value(v).map_err(|e| {
                BgpError::option(&option, format!("must be a list of peer addresses: {e}"))
            })?,
        };
        if texts.is_empty() {
            return Err(BgpError::option(
                &option,
                "is missing: name the peers this prefix is accepted from",
            ));
        }
        let mut peers = Vec::with_capacity(texts.len());
        for text in &texts {
            if let Ok(ip6) = text.parse::<std::net::Ipv6Addr>() {
                return Err(BgpError::option(
                    &option,
                    format!("{ip6} is an IPv6 address: name the peer by the IPv4 address of its session, which carries the IPv6 routes too"),
                ));
            }
            let ip = super::peer_address::peer_ip(&option, text)?;
            if peers.contains(&ip) {
                return Err(BgpError::option(&option, format!("lists {ip} twice")));
            }
            peers.push(ip);
        }
        peers.sort_unstable();
        out.push(ExternalPrefix { prefix, peers });
    }
    Ok(out)
}

fn list_of<'a>(option: &str, list: &'a Value, shape: &str) -> Result<&'a [Value], BgpError> {
    match list {
        Value::Array(items) => Ok(items),
        _ => Err(BgpError::option(
            option,
            format!("must be a list of {shape} objects"),
        )),
    }
}

fn object<'a>(
    at: &str,
    item: &'a Value,
    fields: &[&str],
) -> Result<&'a Map<String, Value>, BgpError> {
    let obj = item
        .as_object()
        .ok_or_else(|| BgpError::option(at, "must be an object"))?;
    if let Some(key) = obj
        .keys()
        .find(|key| !fields.iter().any(|f| libcni::gojson::fold_eq(f, key)))
    {
        return Err(BgpError::option(
            format!("{at}.{key}"),
            format!(
                "is not a field of this entry (it takes {})",
                fields.join(", ")
            ),
        ));
    }
    Ok(obj)
}

/// The entry's `Prefix`: an IPv4 or IPv6 prefix with no host bits set.
fn prefix(obj: &Map<String, Value>, at: &str) -> Result<IpNetwork, BgpError> {
    let option = format!("{at}.Prefix");
    let text: String = match libcni::gojson::get(obj, "Prefix") {
        None | Some(Value::Null) => return Err(BgpError::option(&option, "is missing")),
        Some(v) => libcni::gojson::from_value(v)
            .map_err(|e| BgpError::option(&option, format!("cannot be decoded: {e}")))?,
    };
    let bad = || {
        BgpError::option(
            &option,
            format!("{text:?} is not an IPv4 or IPv6 prefix (10.96.0.0/12, fd00:96::/108)"),
        )
    };
    if !text.contains('/') {
        return Err(bad());
    }
    let p: IpNetwork = text.trim().parse().map_err(|_| bad())?;
    if p.ip() != p.network() {
        return Err(BgpError::option(
            &option,
            format!(
                "{text:?} has host bits set (the prefix is {}/{})",
                p.network(),
                p.prefix()
            ),
        ));
    }
    Ok(p)
}

/// `Nodes`: node addresses (`PublicIP`) or node names, at least one, each once.
fn nodes(option: &str, v: &Value) -> Result<Vec<NodeRef>, BgpError> {
    let texts: Vec<String> = libcni::gojson::from_value(v).map_err(|e| {
        BgpError::option(
            option,
            format!("must be a list of node addresses or names: {e}"),
        )
    })?;
    if texts.is_empty() {
        return Err(BgpError::option(
            option,
            "lists no node: leave it out for every node to announce the prefix",
        ));
    }
    let mut out = Vec::with_capacity(texts.len());
    for text in texts {
        let node = match text.parse::<Ipv4Addr>() {
            Ok(ip) => NodeRef::Address(ip),
            Err(_) if is_node_name(&text) => NodeRef::Name(text),
            Err(_) => {
                return Err(BgpError::option(
                    option,
                    format!("{text:?} is neither an IPv4 address nor a node name"),
                ))
            }
        };
        if out.contains(&node) {
            return Err(BgpError::option(option, format!("lists {node} twice")));
        }
        out.push(node);
    }
    Ok(out)
}

/// A Kubernetes node name: a DNS subdomain (lower-case letters, digits, `-` and `.`).
fn is_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NODE_NAME_LEN
        && s.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Prefixes, BgpError> {
        let v = libcni::gojson::parse(json.as_bytes()).unwrap();
        Prefixes::parse(v.as_object().unwrap())
    }

    fn net(s: &str) -> Ipv4Network {
        s.parse().unwrap()
    }

    fn net6(s: &str) -> Ipv6Network {
        s.parse().unwrap()
    }

    #[test]
    fn parses_both_lists_as_go_would() {
        let p = parse(
            r#"{"advertiseprefixes":[{"prefix":"10.96.0.0/12"},
                {"Prefix":"192.168.200.0/24","Nodes":["172.31.250.1","node-b.example"]},
                {"Prefix":"192.168.201.7/32","Nodes":null}],
                "ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.2","192.0.2.1"]}]}"#,
        )
        .unwrap();
        assert_eq!(p.advertise.len(), 3);
        assert_eq!(p.advertise[0].nodes, None);
        assert_eq!(
            p.advertise[1].nodes,
            Some(vec![
                NodeRef::Address("172.31.250.1".parse().unwrap()),
                NodeRef::Name("node-b.example".into())
            ])
        );
        assert_eq!(p.advertise[2].prefix, net("192.168.201.7/32").into());
        assert_eq!(p.external[0].prefix, net("0.0.0.0/0").into());
        assert_eq!(
            p.external[0].peers,
            vec![
                "192.0.2.1".parse::<Ipv4Addr>().unwrap(),
                "192.0.2.2".parse().unwrap()
            ]
        );
        assert_eq!(
            p.describe().as_deref(),
            Some("3 advertised prefixes, 1 external prefix")
        );
        assert_eq!(
            parse(r#"{"AdvertisePrefixes":null}"#).unwrap(),
            Prefixes::default()
        );
        assert_eq!(Prefixes::default().describe(), None);
    }

    #[test]
    fn who_announces_what() {
        let p = parse(
            r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},
                {"Prefix":"192.168.200.0/24","Nodes":["172.31.250.1","node-b"]}],
                "ExternalPrefixes":[{"Prefix":"192.168.77.0/24","Peers":["172.31.250.254"]}]}"#,
        )
        .unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let all = vec![net("10.96.0.0/12"), net("192.168.200.0/24")];
        let n1 = p.for_node(ip("172.31.250.1"), None);
        assert_eq!(
            (n1.advertised.clone(), n1.announced),
            (all.clone(), all.clone())
        );
        assert_eq!(
            n1.external,
            vec![ExternalPrefix {
                prefix: net("192.168.77.0/24"),
                peers: vec![ip("172.31.250.254")]
            }]
        );
        assert!(!p.advertise[0].names_nodes() && p.advertise[1].names_nodes());
        // By name where the agent knows it; not by address alone.
        assert_eq!(
            p.for_node(ip("172.31.250.2"), Some("node-b")).announced,
            all
        );
        let n3 = p.for_node(ip("172.31.250.3"), Some("node-c"));
        assert_eq!(n3.advertised, all);
        assert_eq!(n3.announced, vec![net("10.96.0.0/12")]);
    }

    #[test]
    fn the_cluster_network_is_not_for_these_lists() {
        let cluster = net("10.244.0.0/16");
        for (json, needle) in [
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"10.244.7.0/24"}]}"#,
             "\"Backend.AdvertisePrefixes[1].Prefix\" 10.244.7.0/24 overlaps the cluster Network 10.244.0.0/16"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.0.0.0/8"}]}"#,
             "\"Backend.AdvertisePrefixes[0].Prefix\" 10.0.0.0/8 overlaps the cluster Network"),
            (r#"{"ExternalPrefixes":[{"Prefix":"10.244.0.0/16","Peers":["192.0.2.1"]}]}"#,
             "\"Backend.ExternalPrefixes[0].Prefix\" 10.244.0.0/16 is inside the cluster Network 10.244.0.0/16"),
            (r#"{"ExternalPrefixes":[{"Prefix":"10.244.9.0/24","Peers":["192.0.2.1"]}]}"#,
             "is inside the cluster Network"),
        ] {
            let e = parse(json).unwrap().check_network(cluster, None).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
        // A default route and an aggregate holding the network come from the routers.
        let p = parse(
            r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1"]},
                {"Prefix":"10.0.0.0/8","Peers":["192.0.2.1"]}],
                "AdvertisePrefixes":[{"Prefix":"10.245.0.0/16"}]}"#,
        )
        .unwrap();
        assert!(p.check_network(cluster, None).is_ok());
    }

    /// IPv6 entries: on a dual-stack network only, kept off `IPv6Network` as the IPv4 ones
    /// are kept off `Network`.
    #[test]
    fn ipv6_entries_need_a_dual_stack_network() {
        let cluster = net("10.244.0.0/16");
        let cluster6 = Some(net6("fd00:10:244::/56"));
        let fine = parse(
            r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"fd00:96::/108"}],
                "ExternalPrefixes":[{"Prefix":"::/0","Peers":["192.0.2.1"]},
                {"Prefix":"fd00::/8","Peers":["192.0.2.1"]}]}"#,
        )
        .unwrap();
        assert!(fine.check_network(cluster, cluster6).is_ok());
        assert_eq!(
            fine.check_network(cluster, None).unwrap_err().to_string(),
            "\"Backend.AdvertisePrefixes[1].Prefix\" fd00:96::/108 is an IPv6 prefix, but the network is IPv4-only: IPv6 entries need a dual-stack network (EnableIPv6 and IPv6Network)"
        );
        let external_only =
            parse(r#"{"ExternalPrefixes":[{"Prefix":"::/0","Peers":["192.0.2.1"]}]}"#).unwrap();
        let e = external_only
            .check_network(cluster, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("\"Backend.ExternalPrefixes[0].Prefix\" ::/0 is an IPv6 prefix, but the network is IPv4-only"),
            "{e}"
        );
        for (json, needle) in [
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00:10:244:80::/57"}]}"#,
             "\"Backend.AdvertisePrefixes[0].Prefix\" fd00:10:244:80::/57 overlaps the cluster IPv6Network fd00:10:244::/56"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00:10::/32"}]}"#,
             "fd00:10::/32 overlaps the cluster IPv6Network"),
            (r#"{"ExternalPrefixes":[{"Prefix":"fd00:10:244:7::/64","Peers":["192.0.2.1"]}]}"#,
             "\"Backend.ExternalPrefixes[0].Prefix\" fd00:10:244:7::/64 is inside the cluster IPv6Network fd00:10:244::/56, whose routes come from the leases"),
            (r#"{"ExternalPrefixes":[{"Prefix":"fd00:10:244::/56","Peers":["192.0.2.1"]}]}"#,
             "is inside the cluster IPv6Network"),
        ] {
            let e = parse(json).unwrap().check_network(cluster, cluster6).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
        // Each family per node: the IPv6 half gets the IPv6 entries, with their IPv4 peers.
        let p = parse(
            r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"fd00:96::/108"},
                {"Prefix":"fd00:200::/120","Nodes":["172.31.250.1"]}],
                "ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1"]},
                {"Prefix":"::/0","Peers":["192.0.2.2","192.0.2.1"]}]}"#,
        )
        .unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let n2 = p.for_node6(ip("172.31.250.2"), None);
        assert_eq!(
            n2.advertised,
            vec![net6("fd00:96::/108"), net6("fd00:200::/120")]
        );
        assert_eq!(n2.announced, vec![net6("fd00:96::/108")]);
        assert_eq!(
            n2.external,
            vec![ExternalPrefix {
                prefix: net6("::/0"),
                peers: vec![ip("192.0.2.1"), ip("192.0.2.2")]
            }]
        );
        assert_eq!(p.for_node6(ip("172.31.250.1"), None).announced.len(), 2);
        let n4 = p.for_node(ip("172.31.250.2"), None);
        assert_eq!(
            (n4.advertised, n4.announced, n4.external.len()),
            (vec![net("10.96.0.0/12")], vec![net("10.96.0.0/12")], 1)
        );
    }

    #[test]
    fn bad_entries_are_named() {
        for (json, needle) in [
            (r#"{"AdvertisePrefixes":{}}"#, "\"Backend.AdvertisePrefixes\" must be a list of {\"Prefix\", \"Nodes\"} objects"),
            (r#"{"AdvertisePrefixes":["10.96.0.0/12"]}"#, "\"Backend.AdvertisePrefixes[0]\" must be an object"),
            (r#"{"AdvertisePrefixes":[{"Nodes":["a"]}]}"#, "\"Backend.AdvertisePrefixes[0].Prefix\" is missing"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12","Node":["a"]}]}"#, "\"Backend.AdvertisePrefixes[0].Node\" is not a field of this entry (it takes Prefix, Nodes)"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0"}]}"#, "\"10.96.0.0\" is not an IPv4 or IPv6 prefix (10.96.0.0/12, fd00:96::/108)"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00::"}]}"#, "\"fd00::\" is not an IPv4 or IPv6 prefix"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/33"}]}"#, "is not an IPv4 or IPv6 prefix"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00::/129"}]}"#, "is not an IPv4 or IPv6 prefix"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00:96::1/108"}]}"#, "\"fd00:96::1/108\" has host bits set (the prefix is fd00:96::/108)"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"::/0"}]}"#, "\"Backend.AdvertisePrefixes[0].Prefix\" ::/0 would make every node"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00:96::/108"},{"Prefix":"fd00:96::/108"}]}"#, "\"Backend.AdvertisePrefixes[1].Prefix\" fd00:96::/108 is listed twice"),
            (r#"{"ExternalPrefixes":[{"Prefix":"::/0","Peers":["fd00::1"]}]}"#, "\"Backend.ExternalPrefixes[0].Peers\" fd00::1 is an IPv6 address: name the peer by the IPv4 address of its session"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"fd00:96::/108"}],"ExternalPrefixes":[{"Prefix":"fd00:96::/112","Peers":["192.0.2.1"]}]}"#,
             "\"Backend.ExternalPrefixes[0].Prefix\" fd00:96::/112 is inside the advertised prefix fd00:96::/108"),
            (r#"{"AdvertisePrefixes":[{"Prefix":12}]}"#, "\"Backend.AdvertisePrefixes[0].Prefix\" cannot be decoded"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.1/12"}]}"#, "\"10.96.0.1/12\" has host bits set (the prefix is 10.96.0.0/12)"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"0.0.0.0/0"}]}"#, "\"Backend.AdvertisePrefixes[0].Prefix\" 0.0.0.0/0 would make every node"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"10.96.0.0/12"}]}"#, "\"Backend.AdvertisePrefixes[1].Prefix\" 10.96.0.0/12 is listed twice"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12","Nodes":[]}]}"#, "\"Backend.AdvertisePrefixes[0].Nodes\" lists no node"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12","Nodes":"a"}]}"#, "\"Backend.AdvertisePrefixes[0].Nodes\" must be a list"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12","Nodes":["Node_A"]}]}"#, "\"Node_A\" is neither an IPv4 address nor a node name"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12","Nodes":["a","a"]}]}"#, "\"Backend.AdvertisePrefixes[0].Nodes\" lists \"a\" twice"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0"}]}"#, "\"Backend.ExternalPrefixes[0].Peers\" is missing"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":[]}]}"#, "\"Backend.ExternalPrefixes[0].Peers\" is missing"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["x"]}]}"#, "\"Backend.ExternalPrefixes[0].Peers\" \"x\" is not an IPv4 address"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1","192.0.2.1"]}]}"#, "lists 192.0.2.1 twice"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1"]},{"Prefix":"0.0.0.0/0","Peers":["192.0.2.2"]}]}"#, "\"Backend.ExternalPrefixes[1].Prefix\" 0.0.0.0/0 is listed twice"),
            (r#"{"ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peer":["192.0.2.1"]}]}"#, "\"Backend.ExternalPrefixes[0].Peer\" is not a field of this entry (it takes Prefix, Peers)"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"}],"ExternalPrefixes":[{"Prefix":"10.96.5.0/24","Peers":["192.0.2.1"]}]}"#,
             "\"Backend.ExternalPrefixes[0].Prefix\" 10.96.5.0/24 is inside the advertised prefix 10.96.0.0/12"),
            (r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"}],"ExternalPrefixes":[{"Prefix":"10.96.0.0/12","Peers":["192.0.2.1"]}]}"#,
             "is inside the advertised prefix 10.96.0.0/12"),
        ] {
            let e = parse(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }

    #[test]
    fn renders_the_filters_parts() {
        let p = parse(
            r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},
                {"Prefix":"192.168.200.0/24","Nodes":["172.31.250.1"]}],
                "ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.2","192.0.2.1"]},
                {"Prefix":"192.168.77.0/24","Peers":["192.0.2.1"]}]}"#,
        )
        .unwrap();
        let n = p.for_node("172.31.250.2".parse().unwrap(), None);
        let mut o = String::new();
        n.write_import_rules(&mut o).unwrap();
        assert_eq!(
            o,
            "  # Advertised by the nodes themselves: never another's copy, nor a part of one.\n\
             \x20 if net ~ [ 10.96.0.0/12+, 192.168.200.0/24+ ] then refuse(\"advertised\");\n\
             \x20 # External prefixes: exactly, from the peers named only.\n\
             \x20 if net = 0.0.0.0/0 then { if from ~ [ 192.0.2.1, 192.0.2.2 ] then accept; refuse(\"external-peer\"); }\n\
             \x20 if net = 192.168.77.0/24 then { if from ~ [ 192.0.2.1 ] then accept; refuse(\"external-peer\"); }\n"
        );
        let mut o = String::new();
        n.write_kernel_import_rules(&mut o).unwrap();
        assert_eq!(
            o,
            "  preference = 150;  # the node's own routes win over external prefixes\n"
        );
        let mut o = String::new();
        n.write_kernel_rules(&mut o).unwrap();
        assert_eq!(
            o,
            "  if source = RTS_BGP && net ~ [ 0.0.0.0/0, 192.168.77.0/24 ] then accept;\n"
        );
        let mut o = String::new();
        n.write_peer_export(&mut o).unwrap();
        assert_eq!(
            o,
            "filter export_to_peers {\n  if net = OWN_SUBNET then accept;\n  if proto = \"announced\" && net ~ [ 10.96.0.0/12 ] then accept;\n  reject;\n}\n"
        );
        let mut o = String::new();
        n.write_static(&mut o).unwrap();
        assert_eq!(
            o,
            "# Advertised prefixes: announced to the peers, never written to the kernel.\n\
             protocol static announced {\n  ipv4;\n  route 10.96.0.0/12 blackhole;\n}\n"
        );
        // Nothing configured: nothing rendered but the peers' export of the node's subnet.
        let none = Prefixes::default().for_node("172.31.250.2".parse().unwrap(), None);
        let mut o = String::new();
        none.write_import_rules(&mut o).unwrap();
        none.write_kernel_rules(&mut o).unwrap();
        none.write_kernel_import_rules(&mut o).unwrap();
        none.write_static(&mut o).unwrap();
        assert_eq!(o, "");
    }

    /// The IPv6 entries, with the IPv6 half's names; the peers stay IPv4 session addresses.
    #[test]
    fn renders_the_ipv6_filters_parts() {
        let p = parse(
            r#"{"AdvertisePrefixes":[{"Prefix":"10.96.0.0/12"},{"Prefix":"fd00:96::/108"}],
                "ExternalPrefixes":[{"Prefix":"0.0.0.0/0","Peers":["192.0.2.1"]},
                {"Prefix":"::/0","Peers":["192.0.2.1"]}]}"#,
        )
        .unwrap();
        let n = p.for_node6("172.31.250.2".parse().unwrap(), None);
        let mut o = String::new();
        n.write_import_rules(&mut o).unwrap();
        n.write_kernel_import_rules(&mut o).unwrap();
        n.write_kernel_rules(&mut o).unwrap();
        n.write_peer_export(&mut o).unwrap();
        n.write_static(&mut o).unwrap();
        assert_eq!(
            o,
            "  # Advertised by the nodes themselves: never another's copy, nor a part of one.\n\
             \x20 if net ~ [ fd00:96::/108+ ] then refuse(\"advertised\");\n\
             \x20 # External prefixes: exactly, from the peers named only.\n\
             \x20 if net = ::/0 then { if from ~ [ 192.0.2.1 ] then accept; refuse(\"external-peer\"); }\n\
             \x20 preference = 150;  # the node's own routes win over external prefixes\n\
             \x20 if source = RTS_BGP && net ~ [ ::/0 ] then accept;\n\
             filter export_to_peers6 {\n\
             \x20 if net = OWN_SUBNET6 then accept;\n\
             \x20 if proto = \"announced6\" && net ~ [ fd00:96::/108 ] then accept;\n\
             \x20 reject;\n\
             }\n\
             # Advertised prefixes: announced to the peers, never written to the kernel.\n\
             protocol static announced6 {\n  ipv6;\n  route fd00:96::/108 blackhole;\n}\n"
        );
    }
}
