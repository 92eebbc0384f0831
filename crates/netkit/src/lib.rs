//! Kernel plumbing shared by every ferrocni plugin: a blocking rtnetlink socket, network
//! namespaces, links, addresses, routes and sysctls. See `API.md` for the public surface.
//!
//! Design: one [`Socket`] per netns, opened by briefly entering the netns on the calling
//! (main) thread; every operation after that goes through the socket. Only sysctls need
//! the thread to be inside the netns (`sysctl::*_in`). Other modules (tc, neighbours,
//! bridge ports) build messages and send them with [`Socket::request`].

pub mod addr;
pub mod bridge_port;
#[cfg(feature = "cni")]
pub mod cni;
mod detach;
pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
#[cfg(any(test, feature = "fake"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod kernel;
pub mod link;
mod link_delete;
pub mod link_kinds;
pub mod link_move;
mod link_reply;
pub mod neigh;
pub mod netfilter;
pub mod netlink;
pub mod netns;
pub mod route;
pub mod rule;
pub mod sysctl;
pub mod sysfs;
pub mod tap;
pub mod tc;
pub mod testutil;
pub mod uplink;
pub mod vrf;
pub mod vxlan_link;
pub mod wireguard;

pub use addr::{Address, AddressOptions, Family};
pub use error::{Error, Result, ResultExt};
pub use kernel::{Kernel, LiveKernel, Netlink};
pub use link::{BridgeOptions, Link, VethSpec};
pub use netlink::Socket;
pub use netns::{Netns, NetnsGuard};
pub use route::Route;
pub use rule::Rule;

/// The exact crate versions netkit speaks, so plugins build messages with the same types.
pub use ipnetwork;
pub use netlink_packet_core as packet_core;
pub use netlink_packet_route as packet_route;
pub use rtnetlink;
