//! What makes another node's lease one the agent programs, for every backend alike: anyone
//! with write access to etcd can write a lease, so each is checked before a data plane sees it
//! (`Membership::peers` is the only way to peers, and it goes through here).
//!
//! - The key's subnet lies inside `Network` and has `SubnetLen`; its IPv6 part lies inside
//!   `IPv6Network` with `IPv6SubnetLen` on a dual-stack network, and is refused on an
//!   IPv4-only one.
//! - No subnet is claimed twice: this node's own lease always keeps its subnets, and between
//!   two other leases the older (lower etcd create revision) does, whatever the keys' forms
//!   (`10.244.3.0-24` and `10.244.3.0-24&fd00::-64` claim the same IPv4 subnet). Underlay
//!   addresses likewise: a node has one lease, so of two leases with one `PublicIP` the
//!   older keeps it.
//! - `PublicIP` (and on a dual-stack network `PublicIPv6`) is a unicast address a node can
//!   have: not unspecified, loopback, link-local, multicast, broadcast or reserved, not inside
//!   the pod network and not this node's own.
//!
//! The backend then checks its own `BackendData` (`Backend::check_peer`). The prefix and
//! address rules are public ([`Rules::check_prefix`], [`Rules::check_underlay`]) so routes
//! learned another way (BGP) are held to the same rules.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnetwork::{IpNetwork, Ipv4Network, Ipv6Network};

use crate::subnet::key::SubnetKey;
use crate::subnet::lease::{LeaseAttrs, Unreadable};

/// The kinds of refusal, as `/metrics` counts them
/// (`ferrocni_agent_leases_refused_total{reason="<label>"}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A key under `<prefix>/subnets/` that is not a lease key.
    NotALeaseKey,
    /// A value larger than any lease (not read).
    TooLarge,
    /// A value that is not lease JSON.
    Unreadable,
    /// A subnet outside the network or of another length.
    Subnet,
    /// A subnet this node or an older lease already holds.
    Overlap,
    /// An underlay address no node can have.
    PublicIp,
    /// A lease of another backend type.
    OtherBackend,
    /// Backend data the backend cannot use.
    BackendData,
}

impl Class {
    pub const ALL: [Class; 8] = [
        Class::NotALeaseKey,
        Class::TooLarge,
        Class::Unreadable,
        Class::Subnet,
        Class::Overlap,
        Class::PublicIp,
        Class::OtherBackend,
        Class::BackendData,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Class::NotALeaseKey => "not_a_lease_key",
            Class::TooLarge => "too_large",
            Class::Unreadable => "unreadable",
            Class::Subnet => "subnet",
            Class::Overlap => "overlap",
            Class::PublicIp => "public_ip",
            Class::OtherBackend => "other_backend",
            Class::BackendData => "backend_data",
        }
    }
}

/// Why one lease is not programmed. The text names what is wrong, never the whole value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    Unreadable(Unreadable),
    /// A subnet of the key that the network cannot have (the text says why).
    Subnet(String),
    /// `subnet` is held by `holder`: this node's lease (`ours`) or an older one.
    Overlap {
        subnet: IpNetwork,
        holder: SubnetKey,
        ours: bool,
    },
    /// `field` (`PublicIP`, `PublicIPv6`) holds `ip`, which is `what`.
    Underlay {
        field: &'static str,
        ip: IpAddr,
        what: String,
    },
    OtherBackend(String),
    BackendData(String),
}

impl Reason {
    pub fn class(&self) -> Class {
        match self {
            Reason::Unreadable(Unreadable::TooLarge { .. } | Unreadable::NotListed(_)) => {
                Class::TooLarge
            }
            Reason::Unreadable(Unreadable::NotLeaseJson(_) | Unreadable::BadAnnotation(_)) => {
                Class::Unreadable
            }
            Reason::Subnet(_) => Class::Subnet,
            Reason::Overlap { .. } => Class::Overlap,
            Reason::Underlay { .. } => Class::PublicIp,
            Reason::OtherBackend(_) => Class::OtherBackend,
            Reason::BackendData(_) => Class::BackendData,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unreadable(u) => write!(f, "{u}"),
            Reason::Subnet(text) => write!(f, "{text}"),
            Reason::Overlap {
                subnet,
                holder,
                ours: true,
            } => write!(f, "subnet {subnet} is this node's own (lease {holder})"),
            Reason::Overlap { subnet, holder, .. } => {
                write!(
                    f,
                    "subnet {subnet} is already held by the older lease {holder}"
                )
            }
            Reason::Underlay { field, ip, what } => write!(f, "{field} {ip} is {what}"),
            // flanneld's udp backend writes no BackendType.
            Reason::OtherBackend(ty) if ty.is_empty() => {
                f.write_str("it has no BackendType (a udp lease): not this network's backend")
            }
            Reason::OtherBackend(ty) => {
                write!(f, "its BackendType {ty:?} is not this network's backend")
            }
            Reason::BackendData(text) => write!(f, "{text}"),
        }
    }
}

/// The IPv6 half of the rules, on a dual-stack network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V6Rules {
    pub network: Ipv6Network,
    pub subnet_len: u8,
    /// This node's `PublicIPv6`.
    pub own_ip: Option<Ipv6Addr>,
}

/// What a lease is checked against: the network config and this node's own lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub network: Ipv4Network,
    pub subnet_len: u8,
    pub v6: Option<V6Rules>,
    /// This node's lease key, whose subnets no one else may claim.
    pub own: SubnetKey,
    /// This node's `PublicIP`.
    pub own_ip: Ipv4Addr,
}

impl Rules {
    /// Whether another node may hold pod prefix `prefix`: inside the network of its family,
    /// of the configured length, and not overlapping this node's subnet.
    pub fn check_prefix(&self, prefix: IpNetwork) -> Result<(), Reason> {
        let (network, len, len_name, own): (IpNetwork, u8, &str, Option<IpNetwork>) = match prefix {
            IpNetwork::V4(_) => (
                self.network.into(),
                self.subnet_len,
                "SubnetLen",
                Some(self.own.v4.into()),
            ),
            IpNetwork::V6(_) => match &self.v6 {
                Some(v6) => (
                    v6.network.into(),
                    v6.subnet_len,
                    "IPv6SubnetLen",
                    self.own.v6.map(IpNetwork::from),
                ),
                None => {
                    return Err(Reason::Subnet(format!(
                        "IPv6 subnet {prefix} on an IPv4-only network"
                    )))
                }
            },
        };
        if !(network.contains(prefix.network()) && prefix.prefix() >= network.prefix()) {
            return Err(Reason::Subnet(format!(
                "subnet {prefix} is outside the network {network}"
            )));
        }
        if prefix.prefix() != len {
            return Err(Reason::Subnet(format!(
                "subnet {prefix} is not a /{len} (the network's {len_name})"
            )));
        }
        if let Some(own) = own.filter(|o| overlaps(*o, prefix)) {
            return Err(Reason::Overlap {
                subnet: own,
                holder: self.own,
                ours: true,
            });
        }
        Ok(())
    }

    /// Whether `ip` can be another node's underlay address (`PublicIP`, `PublicIPv6`, a
    /// route's next hop): a unicast address off the pod network, and not this node's.
    pub fn check_underlay(&self, ip: IpAddr) -> Result<(), String> {
        if let Some(what) = not_unicast(ip) {
            return Err(what.into());
        }
        let (pods, own): (Option<IpNetwork>, Option<IpAddr>) = match ip {
            IpAddr::V4(_) => (Some(self.network.into()), Some(self.own_ip.into())),
            IpAddr::V6(_) => (
                self.v6.map(|v6| v6.network.into()),
                self.v6.and_then(|v6| v6.own_ip).map(IpAddr::from),
            ),
        };
        if let Some(pods) = pods.filter(|p| p.contains(ip)) {
            return Err(format!("inside the pod network {pods}"));
        }
        if own == Some(ip) {
            return Err("this node's own".into());
        }
        Ok(())
    }

    /// The checks one lease passes or fails on its own: its key's subnets and its underlay
    /// addresses. (What two other leases both claim is [`settle_overlaps`]'s.)
    pub fn check_lease(&self, key: &SubnetKey, attrs: &LeaseAttrs) -> Result<(), Reason> {
        self.check_prefix(key.v4.into())?;
        if let Some(v6) = key.v6 {
            self.check_prefix(v6.into())?;
        }
        let underlay = |field, ip: IpAddr| {
            self.check_underlay(ip)
                .map_err(|what| Reason::Underlay { field, ip, what })
        };
        underlay("PublicIP", attrs.public_ip.into())?;
        // PublicIPv6 carries traffic only on a dual-stack network.
        if let (Some(_), Some(ip6)) = (self.v6, attrs.public_ipv6) {
            underlay("PublicIPv6", ip6.into())?;
        }
        Ok(())
    }
}

/// Why `ip` is not a unicast address a node can be reached at, if it is not.
fn not_unicast(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let first = v4.octets()[0];
            if v4.is_broadcast() {
                Some("the broadcast address")
            } else if v4.is_unspecified() || first == 0 {
                Some("unspecified (0.0.0.0/8)")
            } else if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_multicast() {
                Some("multicast")
            } else if first >= 240 {
                Some("reserved (240.0.0.0/4)")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if v6.is_unicast_link_local() {
                Some("link-local")
            } else if v6.to_ipv4_mapped().is_some() {
                Some("an IPv4-mapped address")
            } else {
                None
            }
        }
    }
}

fn overlaps(a: IpNetwork, b: IpNetwork) -> bool {
    a.contains(b.network()) || b.contains(a.network())
}

/// What one lease claims for itself alone: its subnets and its underlay addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub key: SubnetKey,
    /// The key's create revision: the lower, the older.
    pub created: i64,
    pub public_ip: Ipv4Addr,
    /// Only on a dual-stack network (elsewhere the field carries nothing).
    pub public_ipv6: Option<Ipv6Addr>,
}

impl Claim {
    pub fn new(rules: &Rules, key: SubnetKey, created: i64, attrs: &LeaseAttrs) -> Claim {
        Claim {
            key,
            created,
            public_ip: attrs.public_ip,
            public_ipv6: attrs.public_ipv6.filter(|_| rules.v6.is_some()),
        }
    }
}

/// One thing a lease holds alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Held {
    Subnet(IpNetwork),
    Underlay(&'static str, IpAddr),
}

/// Settles what several leases claim (each already past [`Rules::check_lease`], so its
/// subnets have the configured lengths: two claims overlap exactly when they name the same
/// subnet). A subnet, and an underlay address (a node has one lease; a second lease with its
/// address would send another subnet's traffic to it), belongs to the oldest claim; keys
/// written in one transaction share a revision, and then the key order decides, the same on
/// every node. Returns the losers, each with what it lost and to whom.
pub fn settle_overlaps(claims: &[Claim]) -> Vec<(SubnetKey, Reason)> {
    let mut order: Vec<&Claim> = claims.iter().collect();
    order.sort_by_key(|c| (c.created, c.key));
    let mut held: HashMap<Held, SubnetKey> = HashMap::with_capacity(claims.len() * 2);
    let mut losers = Vec::new();
    for claim in order {
        let wants = [
            Some(Held::Subnet(IpNetwork::V4(claim.key.v4))),
            claim.key.v6.map(|sn| Held::Subnet(IpNetwork::V6(sn))),
            Some(Held::Underlay("PublicIP", claim.public_ip.into())),
            claim
                .public_ipv6
                .map(|ip| Held::Underlay("PublicIPv6", ip.into())),
        ];
        let taken = wants
            .iter()
            .flatten()
            .find_map(|w| held.get(w).map(|holder| (*w, *holder)));
        match taken {
            Some((Held::Subnet(subnet), holder)) => losers.push((
                claim.key,
                Reason::Overlap {
                    subnet,
                    holder,
                    ours: false,
                },
            )),
            Some((Held::Underlay(field, ip), holder)) => losers.push((
                claim.key,
                Reason::Underlay {
                    field,
                    ip,
                    what: format!("already the address of the older lease {holder}"),
                },
            )),
            None => {
                for w in wants.into_iter().flatten() {
                    held.insert(w, claim.key);
                }
            }
        }
    }
    losers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subnet::config::NetConfig;

    fn key(s: &str) -> SubnetKey {
        SubnetKey::parse(s).unwrap_or_else(|| panic!("{s} is not a key"))
    }

    fn net(json: &str) -> NetConfig {
        NetConfig::parse("/coreos.com/network/config", json.as_bytes()).unwrap()
    }

    const V4: &str = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}"#;
    const DUAL: &str = r#"{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}"#;
    const OWN_IP: &str = "192.168.0.9";
    const OWN_IP6: &str = "fd00:9::9";

    fn v4_rules() -> Rules {
        net(V4).rules(key("10.244.9.0-24"), OWN_IP.parse().unwrap(), None)
    }

    fn dual_rules() -> Rules {
        net(DUAL).rules(
            key("10.244.9.0-24&fd00:10:244:9::-64"),
            OWN_IP.parse().unwrap(),
            Some(OWN_IP6.parse().unwrap()),
        )
    }

    fn attrs(ip: &str, ip6: Option<&str>) -> LeaseAttrs {
        LeaseAttrs {
            public_ip: ip.parse().unwrap(),
            public_ipv6: ip6.map(|s| s.parse().unwrap()),
            backend_type: "vxlan".into(),
            backend_data: None,
            backend_v6_data: None,
        }
    }

    /// The refusal of `key` with `attrs` under `rules`: its class and text.
    fn refused(rules: &Rules, k: &str, a: &LeaseAttrs) -> (Class, String) {
        let reason = rules
            .check_lease(&key(k), a)
            .expect_err(&format!("{k} {a:?} was accepted"));
        (reason.class(), reason.to_string())
    }

    #[test]
    fn a_sound_lease_passes() {
        let ok = attrs("192.168.0.1", None);
        assert_eq!(v4_rules().check_lease(&key("10.244.1.0-24"), &ok), Ok(()));
        let ok6 = attrs("192.168.0.1", Some("fd00:9::1"));
        let r = dual_rules();
        assert_eq!(
            r.check_lease(&key("10.244.1.0-24&fd00:10:244:1::-64"), &ok6),
            Ok(())
        );
        // An IPv4-only lease on a dual-stack network is an IPv4 peer (an older flanneld).
        assert_eq!(r.check_lease(&key("10.244.1.0-24"), &ok), Ok(()));
        // PublicIPv6 means nothing on an IPv4-only network.
        assert_eq!(
            v4_rules().check_lease(&key("10.244.1.0-24"), &attrs("192.168.0.1", Some("::1"))),
            Ok(())
        );
    }

    #[test]
    fn subnets_must_fit_the_network() {
        let ok = attrs("192.168.0.1", None);
        let r = v4_rules();
        for (k, needle) in [
            (
                "10.244.1.0-25",
                "10.244.1.0/25 is not a /24 (the network's SubnetLen)",
            ),
            ("10.244.0.0-23", "not a /24"),
            (
                "10.9.1.0-24",
                "10.9.1.0/24 is outside the network 10.244.0.0/16",
            ),
            ("10.0.0.0-8", "outside the network"),
            (
                "10.244.1.0-24&fd00:10:244:1::-64",
                "IPv6 subnet fd00:10:244:1::/64 on an IPv4-only network",
            ),
        ] {
            let (class, text) = refused(&r, k, &ok);
            assert_eq!(class, Class::Subnet, "{k}");
            assert!(text.contains(needle), "{k}: {text}");
        }
        let r = dual_rules();
        for (k, needle) in [
            (
                "10.244.1.0-24&fd00:99::-64",
                "fd00:99::/64 is outside the network fd00:10:244::/56",
            ),
            (
                "10.244.1.0-24&fd00:10:244:1::-80",
                "fd00:10:244:1::/80 is not a /64 (the network's IPv6SubnetLen)",
            ),
            ("10.244.1.0-26&fd00:10:244:1::-64", "not a /24"),
        ] {
            let (class, text) = refused(&r, k, &ok);
            assert_eq!(class, Class::Subnet, "{k}");
            assert!(text.contains(needle), "{k}: {text}");
        }
    }

    #[test]
    fn our_own_subnets_are_never_anyone_elses() {
        let ok = attrs("192.168.0.1", Some("fd00:9::1"));
        let (class, text) = refused(&v4_rules(), "10.244.9.0-24", &ok);
        assert_eq!(class, Class::Overlap);
        assert_eq!(
            text,
            "subnet 10.244.9.0/24 is this node's own (lease 10.244.9.0-24)"
        );
        // Whatever the key's form: a dual-stack key with our IPv4 subnet, or our IPv6 one.
        let r = dual_rules();
        for k in [
            "10.244.9.0-24",
            "10.244.9.0-24&fd00:10:244:1::-64",
            "10.244.1.0-24&fd00:10:244:9::-64",
        ] {
            let (class, text) = refused(&r, k, &ok);
            assert_eq!(class, Class::Overlap, "{k}");
            assert!(text.contains("this node's own"), "{k}: {text}");
        }
    }

    #[test]
    fn underlay_addresses_must_be_unicast_elsewhere() {
        let r = dual_rules();
        let k = "10.244.1.0-24&fd00:10:244:1::-64";
        for (ip, what) in [
            ("0.0.0.0", "PublicIP 0.0.0.0 is unspecified"),
            ("0.1.2.3", "unspecified"),
            ("127.0.0.1", "PublicIP 127.0.0.1 is loopback"),
            ("169.254.1.1", "PublicIP 169.254.1.1 is link-local"),
            ("224.0.0.1", "is multicast"),
            ("239.1.2.3", "is multicast"),
            ("255.255.255.255", "is the broadcast address"),
            ("240.0.0.1", "is reserved"),
            (
                "10.244.3.7",
                "PublicIP 10.244.3.7 is inside the pod network 10.244.0.0/16",
            ),
            (OWN_IP, "PublicIP 192.168.0.9 is this node's own"),
        ] {
            let (class, text) = refused(&r, k, &attrs(ip, Some("fd00:9::1")));
            assert_eq!(class, Class::PublicIp, "{ip}");
            assert!(text.contains(what), "{ip}: {text}");
        }
        for (ip6, what) in [
            ("::", "PublicIPv6 :: is unspecified"),
            ("::1", "is loopback"),
            ("fe80::1", "is link-local"),
            ("ff02::1", "is multicast"),
            ("::ffff:192.168.0.1", "IPv4-mapped"),
            (
                "fd00:10:244:3::7",
                "inside the pod network fd00:10:244::/56",
            ),
            (OWN_IP6, "PublicIPv6 fd00:9::9 is this node's own"),
        ] {
            let (class, text) = refused(&r, k, &attrs("192.168.0.1", Some(ip6)));
            assert_eq!(class, Class::PublicIp, "{ip6}");
            assert!(text.contains(what), "{ip6}: {text}");
        }
        // Documentation and private ranges are ordinary unicast addresses.
        for ip in ["192.0.2.7", "172.31.250.3", "8.8.8.8"] {
            assert_eq!(r.check_underlay(ip.parse().unwrap()), Ok(()), "{ip}");
        }
    }

    #[test]
    fn the_prefix_rule_serves_routes_too() {
        let r = dual_rules();
        let p = |s: &str| s.parse::<IpNetwork>().unwrap();
        assert_eq!(r.check_prefix(p("10.244.4.0/24")), Ok(()));
        assert_eq!(r.check_prefix(p("fd00:10:244:4::/64")), Ok(()));
        for bad in [
            "10.244.4.0/25",
            "10.245.4.0/24",
            "10.244.9.0/24",
            "fd00:10:244:9::/64",
            "0.0.0.0/0",
        ] {
            assert!(r.check_prefix(p(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            v4_rules()
                .check_prefix(p("fd00:10:244:4::/64"))
                .map_err(|e| e.class()),
            Err(Class::Subnet)
        );
    }

    /// A claim of `k` created at `created` by a node at 192.168.0.`host`.
    fn claim(k: SubnetKey, created: i64, host: u8) -> Claim {
        Claim {
            key: k,
            created,
            public_ip: Ipv4Addr::new(192, 168, 0, host),
            public_ipv6: None,
        }
    }

    #[test]
    fn the_older_claim_keeps_a_subnet_whatever_the_key_form() {
        let peer = key("10.244.1.0-24");
        let newer_dual = key("10.244.1.0-24&fd00:10:244:5::-64");
        let other = key("10.244.2.0-24&fd00:10:244:6::-64");
        let v6_thief = key("10.244.3.0-24&fd00:10:244:6::-64");
        let losers = settle_overlaps(&[
            claim(newer_dual, 20, 1),
            claim(v6_thief, 30, 2),
            claim(peer, 10, 3),
            claim(other, 11, 4),
        ]);
        assert_eq!(losers.len(), 2, "{losers:?}");
        assert_eq!(losers[0].0, newer_dual);
        assert_eq!(
            losers[0].1.to_string(),
            "subnet 10.244.1.0/24 is already held by the older lease 10.244.1.0-24"
        );
        assert_eq!(losers[0].1.class(), Class::Overlap);
        assert_eq!(losers[1].0, v6_thief);
        assert!(
            losers[1].1.to_string().contains("fd00:10:244:6::/64"),
            "{}",
            losers[1].1
        );
        // The older one wins even when it has the dual-stack form.
        let losers = settle_overlaps(&[claim(peer, 50, 1), claim(newer_dual, 40, 2)]);
        assert_eq!(losers.iter().map(|(k, _)| *k).collect::<Vec<_>>(), [peer]);
        // One transaction (same revision): the key order decides, the same on every node.
        let a = settle_overlaps(&[claim(peer, 7, 1), claim(newer_dual, 7, 2)]);
        let b = settle_overlaps(&[claim(newer_dual, 7, 2), claim(peer, 7, 1)]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 1);
        // A loser holds nothing: the next claim of its other subnet is free to win.
        let losers = settle_overlaps(&[
            claim(peer, 1, 1),
            claim(key("10.244.1.0-24&fd00:10:244:7::-64"), 2, 2),
            claim(key("10.244.8.0-24&fd00:10:244:7::-64"), 3, 3),
        ]);
        assert_eq!(losers.len(), 1);
    }

    #[test]
    fn the_older_lease_keeps_an_underlay_address() {
        let first = key("10.244.1.0-24");
        let second = key("10.244.2.0-24");
        let losers = settle_overlaps(&[claim(second, 9, 1), claim(first, 3, 1)]);
        assert_eq!(losers.len(), 1);
        assert_eq!(losers[0].0, second);
        assert_eq!(losers[0].1.class(), Class::PublicIp);
        assert_eq!(
            losers[0].1.to_string(),
            "PublicIP 192.168.0.1 is already the address of the older lease 10.244.1.0-24"
        );
        // IPv6 too, on a dual-stack network (and only there).
        let r = dual_rules();
        let a6 = attrs("192.168.0.1", Some("fd00:9::1"));
        let b6 = attrs("192.168.0.2", Some("fd00:9::1"));
        let k1 = key("10.244.1.0-24&fd00:10:244:1::-64");
        let k2 = key("10.244.2.0-24&fd00:10:244:2::-64");
        let losers = settle_overlaps(&[Claim::new(&r, k1, 1, &a6), Claim::new(&r, k2, 2, &b6)]);
        assert_eq!(losers.len(), 1);
        assert!(losers[0]
            .1
            .to_string()
            .starts_with("PublicIPv6 fd00:9::1 is already"));
        let r = v4_rules();
        let k1 = key("10.244.1.0-24");
        let k2 = key("10.244.2.0-24");
        assert!(
            settle_overlaps(&[Claim::new(&r, k1, 1, &a6), Claim::new(&r, k2, 2, &b6)]).is_empty()
        );
    }

    #[test]
    fn every_class_has_its_own_label() {
        let mut labels: Vec<_> = Class::ALL.iter().map(|c| c.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), Class::ALL.len());
    }

    #[test]
    fn a_lease_of_another_backend_says_which() {
        assert_eq!(
            Reason::OtherBackend("host-gw".into()).to_string(),
            "its BackendType \"host-gw\" is not this network's backend"
        );
        assert_eq!(
            Reason::OtherBackend(String::new()).to_string(),
            "it has no BackendType (a udp lease): not this network's backend"
        );
    }
}
