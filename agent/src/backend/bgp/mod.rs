//! The `bgp` backend: Calico's routed mode on BIRD 2. Every node announces its pod subnet by
//! BGP with its `PublicIP` as next hop; every node (and the routers it peers with) learns the
//! others' subnets, and pod packets cross the network unencapsulated (MTU = the underlay's).
//! The agent does not speak BGP itself: it renders a BIRD configuration per node, has BIRD
//! check it, runs BIRD as a supervised child and reconfigures it as nodes come and go.
//!
//! The parts:
//! - [`options`]: the `Backend` object (`ASNumber`, `NodeToNodeMesh`, `Peers`,
//!   `GracefulRestart`, `GracefulRestartTime`, `KeepaliveTime`, `HoldTime`, `BFD`) and the
//!   node flags (`--bgp-peers`, `--bird-binary`, `--bgp-dir`);
//! - [`node_as`]: an AS per node: `--bgp-as`, the lease's `{"ASNumber": N}`, and the other
//!   nodes' AS read from their leases (eBGP mesh sessions, origin validation);
//! - [`address_family`]: how BIRD's configuration names the IPv4 and IPv6 halves;
//! - [`announce`]: prefixes beyond the pod subnets, `AdvertisePrefixes` (service and
//!   load-balancer ranges the nodes announce) and `ExternalPrefixes` (routes taken from named
//!   routers), and their filter rules;
//! - [`peer_address`]: a peer's address, checked alike wherever the options name one;
//! - [`secret`]: peer passwords, which only BIRD's configuration file ever shows;
//! - [`sessions`]: which BGP sessions the node runs, and their BIRD protocol names;
//! - [`family`]: IPv6 pod subnets on a dual-stack network (multiprotocol BGP over the IPv4
//!   sessions);
//! - [`origin`]: origin validation, the import filter's rules from the other nodes' leases;
//! - [`refusal`], [`refusal_log`]: why a route was refused, printed by the filter into BIRD's
//!   log, followed by the agent, counted by reason and logged once;
//! - [`render`]: the BIRD configuration, a pure function (filters and timers explained there);
//! - [`bird`]: BIRD's files, `bird -p -c`, starting, adopting, watching and stopping BIRD;
//! - [`blackhole`]: the kernel's blackhole route for this node's subnet;
//! - [`control`]: BIRD's control socket (`birdc`'s protocol);
//! - [`status`], [`metrics`]: the sessions' state, its log lines and metric families;
//! - [`driver`]: [`Bgp`], BIRD driven for one node: `apply` (render, check, start or
//!   reconfigure), `stop` (graceful restart), `shutdown` (withdraw), metrics;
//! - [`plane`]: the agent's side: the options as a `Backend` ([`REGISTRATION`]) and
//!   [`BgpPlane`], the `DataPlane` whose passes call [`Bgp::apply`] with this node's subnet and
//!   every other `"BackendType":"bgp"` lease (its `PublicIP` and subnet).
//!
//! This node's lease is `{"PublicIP": …, "PublicIPv6": null, "BackendType": "bgp"}` (its
//! `PublicIPv6` on a dual-stack network)
//! ([`BACKEND_TYPE`]; `"BackendData": {"ASNumber": N}` when `--bgp-as` gives it an AS); pods' MTU is the underlay's ([`MTU_OVERHEAD`] = 0). On
//! SIGTERM BIRD stops for a graceful restart: routes stay, the next agent's BIRD takes over.
//! BIRD never removes its kernel routes (`persist`): the agent does, in [`Bgp::shutdown`].

pub mod address_family;
pub mod announce;
pub mod bird;
pub mod blackhole;
pub mod control;
pub mod driver;
pub mod error;
pub mod family;
pub mod metrics;
pub mod node_as;
pub mod options;
pub mod origin;
pub mod peer_address;
pub mod plane;
pub mod refusal;
pub mod refusal_log;
pub mod render;
pub mod secret;
pub mod sessions;
pub mod status;

pub use driver::{Action, Bgp, MetricsReader, NodeInfo, Report};
pub use error::BgpError;
pub use options::{parse_peers_flag, BgpOptions, NodeSettings, Peer};
pub use origin::LeaseRoute;
pub use plane::{BgpPlane, REGISTRATION};

/// flannel's `Backend.Type`, and this node's lease `BackendType`.
pub const BACKEND_TYPE: &str = "bgp";
/// Pod packets travel as they are: no encapsulation.
pub const MTU_OVERHEAD: u32 = 0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    #[test]
    fn describes_itself() {
        assert_eq!(
            BgpOptions::default().describe(),
            "bgp AS 64512, node-to-node mesh, 0 configured peers, graceful restart 120 s"
        );
        let o = BgpOptions {
            node_to_node_mesh: false,
            graceful_restart: false,
            peers: vec![Peer::new("192.0.2.1".parse().unwrap(), 64512)],
            ..BgpOptions::default()
        };
        assert_eq!(
            o.describe(),
            "bgp AS 64512, no node mesh, 1 configured peer, no graceful restart"
        );
        let o = BgpOptions {
            mesh_bfd: true,
            mesh_timers: options::Timers {
                keepalive_time: Some(1),
                hold_time: Some(3),
            },
            peers: vec![Peer {
                bfd: true,
                ..Peer::new("192.0.2.1".parse().unwrap(), 64512)
            }],
            ..BgpOptions::default()
        };
        assert_eq!(
            o.describe(),
            "bgp AS 64512, node-to-node mesh (hold time 3 s, keepalive 1 s, BFD), 1 configured peer (1 with BFD), graceful restart 120 s"
        );
    }
}
