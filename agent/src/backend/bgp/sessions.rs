//! Which BGP sessions this node runs: one per other node of the mesh, one per external peer
//! (the network's `Peers` and this node's `--bgp-peers`), and the BIRD protocol name of each.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use super::options::Peer;

/// Where a session comes from (the `kind` label of the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SessionKind {
    /// Another node of the network (iBGP, built from the leases).
    Mesh,
    /// A configured peer: a router or route reflector.
    Peer,
}

impl SessionKind {
    pub fn word(self) -> &'static str {
        match self {
            SessionKind::Mesh => "mesh",
            SessionKind::Peer => "peer",
        }
    }
}

/// The BIRD protocol name of a session: `mesh_172_31_250_2`, `peer_192_0_2_1` (names must be
/// symbols, and BIRD reserves words such as `dead`; the prefix keeps clear of both).
pub fn protocol_name(kind: SessionKind, ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("{}_{a}_{b}_{c}_{d}", kind.word())
}

/// The session a BIRD protocol name stands for; `None` for other protocols.
pub fn parse_protocol_name(name: &str) -> Option<(SessionKind, Ipv4Addr)> {
    let (kind, rest) = if let Some(rest) = name.strip_prefix("mesh_") {
        (SessionKind::Mesh, rest)
    } else {
        (SessionKind::Peer, name.strip_prefix("peer_")?)
    };
    let octets: Vec<u8> = rest
        .split('_')
        .map(|o| o.parse().ok())
        .collect::<Option<_>>()?;
    let octets: [u8; 4] = octets.try_into().ok()?;
    Some((kind, Ipv4Addr::from(octets)))
}

/// The sessions of one node, in address order (so the same membership renders the same text).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sessions {
    /// Other nodes (iBGP in this node's AS, unless listed in `mesh_as`).
    pub mesh: Vec<Ipv4Addr>,
    /// The AS of each mesh neighbour in another AS than this node's (an eBGP session; from
    /// its lease: [`mesh_remote_as`](super::node_as::mesh_remote_as)).
    pub mesh_as: BTreeMap<Ipv4Addr, u32>,
    /// External peers.
    pub peers: Vec<Peer>,
}

impl Sessions {
    /// `own_ip` never gets a session. `peers` are this node's configured peers (the network's
    /// and the node's, merged: [`merge_peers`](super::options::merge_peers)); an address that
    /// is a configured peer gets no mesh session of its own (a node acting as route reflector
    /// is configured once, as a peer).
    pub fn new(own_ip: Ipv4Addr, mesh: Option<&[Ipv4Addr]>, configured: &[Peer]) -> Sessions {
        let mut peers: BTreeMap<Ipv4Addr, Peer> = BTreeMap::new();
        for p in configured {
            if p.ip != own_ip {
                peers.insert(p.ip, p.clone());
            }
        }
        let mut mesh: Vec<Ipv4Addr> = mesh
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|ip| *ip != own_ip && !peers.contains_key(ip))
            .collect();
        mesh.sort_unstable();
        mesh.dedup();
        Sessions {
            mesh,
            mesh_as: BTreeMap::new(),
            peers: peers.into_values().collect(),
        }
    }

    /// The remote AS of the mesh session with `ip`: its own when listed, else `node_as`.
    pub fn mesh_remote_as(&self, ip: Ipv4Addr, node_as: u32) -> u32 {
        self.mesh_as.get(&ip).copied().unwrap_or(node_as)
    }

    pub fn len(&self) -> usize {
        self.mesh.len() + self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} mesh session{}, {} peer{}",
            self.mesh.len(),
            if self.mesh.len() == 1 { "" } else { "s" },
            self.peers.len(),
            if self.peers.len() == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn peer(s: &str, asn: u32) -> Peer {
        Peer::new(ip(s), asn)
    }

    #[test]
    fn names_round_trip() {
        let n = protocol_name(SessionKind::Mesh, ip("172.31.250.2"));
        assert_eq!(n, "mesh_172_31_250_2");
        assert_eq!(
            parse_protocol_name(&n),
            Some((SessionKind::Mesh, ip("172.31.250.2")))
        );
        assert_eq!(
            parse_protocol_name("peer_192_0_2_1"),
            Some((SessionKind::Peer, ip("192.0.2.1")))
        );
        for other in [
            "kernel1",
            "own_subnet",
            "mesh_1_2_3",
            "peer_1_2_3_4_5",
            "mesh_a_b_c_d",
        ] {
            assert_eq!(parse_protocol_name(other), None, "{other}");
        }
    }

    #[test]
    fn plan() {
        let own = ip("10.0.0.1");
        let mesh = [
            ip("10.0.0.3"),
            own,
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("10.0.0.9"),
        ];
        let s = Sessions::new(
            own,
            Some(&mesh),
            &[
                peer("10.0.0.9", 64512),
                peer("192.0.2.1", 65001),
                peer("10.0.0.1", 1),
            ],
        );
        assert_eq!(s.mesh, vec![ip("10.0.0.2"), ip("10.0.0.3")]);
        assert_eq!(
            s.peers,
            vec![peer("10.0.0.9", 64512), peer("192.0.2.1", 65001)]
        );
        assert_eq!(s.to_string(), "2 mesh sessions, 2 peers");
        let no_mesh = Sessions::new(own, None, &[]);
        assert!(no_mesh.is_empty());
    }
}
