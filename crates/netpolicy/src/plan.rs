//! The compiled plan: what an nf_tables table enforcing the policies holds, in sorted maps so
//! two compiles of the same inputs are equal and a change is a small `diff`.
//!
//! - **Sets**, named by `names`: per policy, direction, rule and peer class, one per
//!   family: the addresses of the pods the rule's selectors match (`Pods`), the rule's
//!   ipBlocks as non-overlapping intervals (`Blocks`), and for an egress rule with named ports
//!   the (address, protocol, port) triples of the destination pods' ports of those names
//!   (`NamedPorts`, an nf_tables concatenation). Which sets exist depends on the policies
//!   alone, never on the pods: a pod coming, going or changing labels is set elements only.
//! - **Targets**: per pod address a policy selects, whether it is isolated for ingress and for
//!   egress (by which policies) and the clauses that allow traffic; traffic to (from) an
//!   isolated address that no clause of its direction allows is dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::{PodKey, PolicyKey, Protocol};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(addr: IpAddr) -> Family {
        match addr {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Ingress,
    Egress,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        })
    }
}

/// The nf_tables type of a set's elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    /// `ipv4_addr` / `ipv6_addr`.
    Addresses,
    /// `ipv4_addr` / `ipv6_addr` with `flags interval`.
    Intervals,
    /// `ipv4_addr . inet_proto . inet_service` (or `ipv6_addr . ...`).
    AddrPorts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Element {
    Addr(IpAddr),
    /// First and last address, inclusive.
    Interval(IpAddr, IpAddr),
    AddrPort(IpAddr, Protocol, u16),
}

impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Element::Addr(a) => write!(f, "{a}"),
            Element::Interval(a, b) => write!(f, "{a}-{b}"),
            Element::AddrPort(a, p, port) => {
                write!(f, "{a} . {} . {port}", p.as_str().to_lowercase())
            }
        }
    }
}

/// One named set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrSet {
    pub family: Family,
    pub kind: SetKind,
    /// The rule it was made for.
    pub policy: Arc<PolicyKey>,
    pub direction: Direction,
    pub rule: usize,
    pub elements: BTreeSet<Element>,
}

impl AddrSet {
    /// Whether `addr` is in this set (`Addresses`, `Intervals`).
    pub fn contains_addr(&self, addr: IpAddr) -> bool {
        match self.kind {
            SetKind::Addresses => self.elements.contains(&Element::Addr(addr)),
            SetKind::Intervals => {
                // The last interval starting at or before addr is the only one that can hold it.
                let probe = Element::Interval(addr, max_of(addr));
                self.elements
                    .range(..=probe)
                    .next_back()
                    .is_some_and(|e| match e {
                        Element::Interval(first, last) => {
                            Family::of(*first) == Family::of(addr)
                                && *first <= addr
                                && addr <= *last
                        }
                        _ => false,
                    })
            }
            SetKind::AddrPorts => false,
        }
    }

    /// Whether (`addr`, `protocol`, `port`) is in this set (`AddrPorts`).
    pub fn contains_addr_port(&self, addr: IpAddr, protocol: Protocol, port: u16) -> bool {
        self.kind == SetKind::AddrPorts
            && self
                .elements
                .contains(&Element::AddrPort(addr, protocol, port))
    }
}

fn max_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::BROADCAST),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::from(u128::MAX)),
    }
}

/// Ports `first..=last` of a protocol (0..=65535: all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRange {
    pub protocol: Protocol,
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn contains(&self, protocol: Protocol, port: u16) -> bool {
        self.protocol == protocol && self.first <= port && port <= self.last
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.first, self.last) {
            (0, u16::MAX) => write!(f, "{}", self.protocol),
            (a, b) if a == b => write!(f, "{}/{a}", self.protocol),
            (a, b) => write!(f, "{}/{a}-{b}", self.protocol),
        }
    }
}

/// Who is at the other end of an allowed packet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClausePeer {
    /// Anyone (a rule without `from`/`to`).
    Any,
    /// An address in this `Addresses` or `Intervals` set.
    InSet(Arc<str>),
    /// (address, protocol, destination port) in this `AddrPorts` set: an egress rule's named
    /// ports, resolved per destination pod. The set says the ports; the clause's are `Any`.
    InAddrPortSet(Arc<str>),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClausePorts {
    Any,
    /// Sorted; ranges of one protocol neither overlap nor touch.
    Ranges(Vec<PortRange>),
}

impl ClausePorts {
    pub fn contains(&self, protocol: Protocol, port: u16) -> bool {
        match self {
            ClausePorts::Any => true,
            ClausePorts::Ranges(r) => r.iter().any(|r| r.contains(protocol, port)),
        }
    }
}

/// Traffic matching `peer` and `ports` is allowed, by this policy's rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Clause {
    pub policy: Arc<PolicyKey>,
    pub rule: usize,
    pub peer: ClausePeer,
    pub ports: ClausePorts,
}

/// One direction of a target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Isolation {
    /// The policies of this direction that select the pod, sorted; none: not isolated.
    pub policies: Vec<Arc<PolicyKey>>,
    /// Sorted, without duplicates.
    pub clauses: Vec<Clause>,
}

impl Isolation {
    pub fn isolated(&self) -> bool {
        !self.policies.is_empty()
    }
}

/// A pod address some policy selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub pod: PodKey,
    pub ingress: Isolation,
    pub egress: Isolation,
}

impl Target {
    pub fn direction(&self, d: Direction) -> &Isolation {
        match d {
            Direction::Ingress => &self.ingress,
            Direction::Egress => &self.egress,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub sets: BTreeMap<Arc<str>, AddrSet>,
    pub targets: BTreeMap<IpAddr, Target>,
    /// Every address of a pod outside the host network, with its pod: which addresses are
    /// pods' (for `explain`); the data plane does not need it.
    pub pods: BTreeMap<IpAddr, PodKey>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(kind: SetKind, elements: &[Element]) -> AddrSet {
        AddrSet {
            family: Family::V4,
            kind,
            policy: Arc::new(PolicyKey {
                namespace: "a".into(),
                name: "b".into(),
            }),
            direction: Direction::Ingress,
            rule: 0,
            elements: elements.iter().copied().collect(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn interval_lookup() {
        let s = set(
            SetKind::Intervals,
            &[
                Element::Interval(ip("10.0.0.0"), ip("10.0.0.255")),
                Element::Interval(ip("10.0.2.0"), ip("10.0.2.255")),
            ],
        );
        assert!(s.contains_addr(ip("10.0.0.0")));
        assert!(s.contains_addr(ip("10.0.0.255")));
        assert!(!s.contains_addr(ip("10.0.1.0")));
        assert!(s.contains_addr(ip("10.0.2.7")));
        assert!(!s.contains_addr(ip("10.0.3.0")));
        assert!(!s.contains_addr(ip("9.255.255.255")));
        assert!(!s.contains_addr(ip("fd00::1")));
    }

    #[test]
    fn port_ranges_display() {
        let r = |first, last| PortRange {
            protocol: Protocol::Sctp,
            first,
            last,
        };
        assert_eq!(r(0, 65535).to_string(), "SCTP");
        assert_eq!(r(80, 80).to_string(), "SCTP/80");
        assert_eq!(r(80, 90).to_string(), "SCTP/80-90");
        assert!(r(80, 90).contains(Protocol::Sctp, 85));
        assert!(!r(80, 90).contains(Protocol::Tcp, 85));
    }
}
