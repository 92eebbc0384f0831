//! Why a packet would be allowed or dropped: the egress side (the sender's policies) and the
//! ingress side (the receiver's), each allowed by a policy's rule, denied by the policies that
//! isolate the pod, or not isolated at all, read from a [`Plan`] exactly as the data plane
//! would decide (compile it for every pod, `compile`). Traffic between two addresses
//! of one pod never leaves it and is always allowed.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::model::{PodKey, PolicyKey, Protocol};
use crate::plan::{ClausePeer, Direction, Plan};

/// One side's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Side {
    /// The address is no pod's (a host-network pod, a node, outside the cluster): no policy
    /// applies to it.
    NotAPod,
    /// A pod no policy of this direction selects.
    NotIsolated(PodKey),
    Allowed {
        pod: PodKey,
        policy: Arc<PolicyKey>,
        rule: usize,
    },
    Denied {
        pod: PodKey,
        isolated_by: Vec<Arc<PolicyKey>>,
    },
    /// Both addresses are this pod's.
    SamePod(PodKey),
}

impl Side {
    pub fn allowed(&self) -> bool {
        !matches!(self, Side::Denied { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub from: IpAddr,
    pub to: IpAddr,
    pub protocol: Protocol,
    pub port: u16,
    /// Whether `from` may send it.
    pub egress: Side,
    /// Whether `to` may receive it.
    pub ingress: Side,
}

impl Verdict {
    pub fn allowed(&self) -> bool {
        self.egress.allowed() && self.ingress.allowed()
    }
}

/// The verdict on a packet from `from` to `to`, `protocol` destination port `port`.
pub fn explain(plan: &Plan, from: IpAddr, to: IpAddr, protocol: Protocol, port: u16) -> Verdict {
    let same = match (plan.pods.get(&from), plan.pods.get(&to)) {
        (Some(a), Some(b)) if a == b => Some(a.clone()),
        _ => None,
    };
    let (egress, ingress) = match same {
        Some(pod) => (Side::SamePod(pod.clone()), Side::SamePod(pod)),
        None => (
            side(plan, Direction::Egress, from, to, protocol, port),
            side(plan, Direction::Ingress, to, from, protocol, port),
        ),
    };
    Verdict {
        from,
        to,
        protocol,
        port,
        egress,
        ingress,
    }
}

/// The verdict of `target`'s policies of `direction` on a packet with `peer` at the other end.
fn side(
    plan: &Plan,
    direction: Direction,
    target: IpAddr,
    peer: IpAddr,
    protocol: Protocol,
    port: u16,
) -> Side {
    let Some(pod) = plan.pods.get(&target) else {
        return Side::NotAPod;
    };
    let Some(iso) = plan
        .targets
        .get(&target)
        .map(|t| t.direction(direction))
        .filter(|iso| iso.isolated())
    else {
        return Side::NotIsolated(pod.clone());
    };
    let allowing = iso.clauses.iter().find(|c| {
        let peer_ok = match &c.peer {
            ClausePeer::Any => true,
            ClausePeer::InSet(name) => plan.sets.get(name).is_some_and(|s| s.contains_addr(peer)),
            ClausePeer::InAddrPortSet(name) => plan
                .sets
                .get(name)
                .is_some_and(|s| s.contains_addr_port(peer, protocol, port)),
        };
        peer_ok && c.ports.contains(protocol, port)
    });
    match allowing {
        Some(c) => Side::Allowed {
            pod: pod.clone(),
            policy: c.policy.clone(),
            rule: c.rule,
        },
        None => Side::Denied {
            pod: pod.clone(),
            isolated_by: iso.policies.clone(),
        },
    }
}

fn write_side(f: &mut fmt::Formatter<'_>, what: &str, addr: IpAddr, side: &Side) -> fmt::Result {
    match side {
        Side::NotAPod => write!(
            f,
            "{what} {addr}: allowed: no pod's address, no policy applies"
        ),
        Side::NotIsolated(pod) => write!(
            f,
            "{what} {pod} ({addr}): allowed: not isolated, no policy selects it"
        ),
        Side::Allowed { pod, policy, rule } => {
            let kind = if what == "egress from" {
                "egress"
            } else {
                "ingress"
            };
            write!(
                f,
                "{what} {pod} ({addr}): allowed by {policy} {kind} rule {rule}"
            )
        }
        Side::Denied { pod, isolated_by } => {
            write!(f, "{what} {pod} ({addr}): denied: isolated by ")?;
            for (i, p) in isolated_by.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{p}")?;
            }
            f.write_str("; none allows it")
        }
        Side::SamePod(pod) => write!(f, "{what} {pod} ({addr}): allowed: within one pod"),
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = match self.to {
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
            IpAddr::V4(a) => format!("{a}:{}", self.port),
        };
        writeln!(
            f,
            "{} -> {target} {}: {}",
            self.from,
            self.protocol,
            if self.allowed() { "allowed" } else { "denied" }
        )?;
        f.write_str("  ")?;
        write_side(f, "egress from", self.from, &self.egress)?;
        f.write_str("\n  ")?;
        write_side(f, "ingress to", self.to, &self.ingress)
    }
}
