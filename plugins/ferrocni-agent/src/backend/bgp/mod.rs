//! The `bgp` backend: Calico's routed mode on BIRD 2. Every node announces its pod subnet by
//! BGP with its `PublicIP` as next hop; every node (and the routers it peers with) learns the
//! others' subnets, and pod packets cross the network unencapsulated (MTU = the underlay's).
//! The agent does not speak BGP itself: it renders a BIRD configuration per node, has BIRD
//! check it, runs BIRD as a supervised child and reconfigures it as nodes come and go.
//!
//! The parts:
//! - [`options`]: the `Backend` object (`ASNumber`, `NodeToNodeMesh`, `Peers`,
//!   `GracefulRestart`, `GracefulRestartTime`) and the node flags (`--bgp-peers`,
//!   `--bird-binary`, `--bgp-dir`);
//! - [`sessions`]: which BGP sessions the node runs, and their BIRD protocol names;
//! - [`render`]: the BIRD configuration, a pure function (filters and timers explained there);
//! - [`bird`]: BIRD's files, `bird -p -c`, starting, adopting, watching and stopping BIRD;
//! - [`control`]: BIRD's control socket (`birdc`'s protocol);
//! - [`status`], [`metrics`]: the sessions' state, its log lines and metric families;
//! - [`driver`]: [`Bgp`], the API the agent calls.
//!
//! Use from the agent, in order:
//! 1. at config parse: [`BgpOptions::parse`] (errors name the option), and at start-up
//!    [`parse_peers_flag`] for `--bgp-peers`;
//! 2. once the lease is known: [`Bgp::new`] with the options, [`NodeSettings`] and
//!    [`NodeInfo`] (`PublicIP`, `Network`, `SubnetLen`); this node's lease is
//!    `{"PublicIP": …, "BackendType": "bgp"}` ([`BACKEND_TYPE`], no backend data);
//! 3. at every reconcile (blocking thread): [`Bgp::apply`] with the node's subnet and the
//!    `PublicIP` of every other `"BackendType":"bgp"` lease; its [`Report::log_line`] says
//!    what changed; pods' MTU is the underlay's ([`MTU_OVERHEAD`] = 0);
//! 4. for `/metrics`: [`Bgp::metrics_reader`], a `Send + Sync` handle whose
//!    [`MetricsReader::families`] gives the watcher's latest reading (no I/O at scrape time);
//! 5. on SIGTERM: [`Bgp::stop`] (graceful restart: routes stay, the next agent's BIRD takes
//!    over); [`Bgp::shutdown`] to withdraw everything (leaving the backend for another).

pub mod bird;
pub mod control;
pub mod driver;
pub mod error;
pub mod metrics;
pub mod options;
pub mod render;
pub mod sessions;
pub mod status;

pub use driver::{Action, Bgp, MetricsReader, NodeInfo, Report};
pub use error::BgpError;
pub use options::{parse_peers_flag, BgpOptions, NodeSettings, Peer};

/// flannel's `Backend.Type`, and this node's lease `BackendType`.
pub const BACKEND_TYPE: &str = "bgp";
/// Pod packets travel as they are: no encapsulation.
pub const MTU_OVERHEAD: u32 = 0;

impl BgpOptions {
    /// One line for the start-up log.
    pub fn describe(&self) -> String {
        let mesh = if self.node_to_node_mesh {
            "node-to-node mesh"
        } else {
            "no node mesh"
        };
        let gr = if self.graceful_restart {
            format!("graceful restart {} s", self.graceful_restart_time)
        } else {
            "no graceful restart".into()
        };
        format!(
            "bgp AS {}, {mesh}, {} configured peer{}, {gr}",
            self.as_number,
            self.peers.len(),
            if self.peers.len() == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_itself() {
        assert_eq!(
            BgpOptions::default().describe(),
            "bgp AS 64512, node-to-node mesh, 0 configured peers, graceful restart 120 s"
        );
        let o = BgpOptions {
            node_to_node_mesh: false,
            graceful_restart: false,
            peers: vec![Peer {
                ip: "192.0.2.1".parse().unwrap(),
                as_number: 64512,
                password: None,
            }],
            ..BgpOptions::default()
        };
        assert_eq!(
            o.describe(),
            "bgp AS 64512, no node mesh, 1 configured peer, no graceful restart"
        );
    }
}
