//! The `vxlan` overlay: reconcile a node's VXLAN device, neighbour/FDB entries and routes
//! (or plain host-gw routes) to a peer list, flannel-compatible on the wire.
//!
//! Used by the `vxlan` CNI plugin binary (on ADD/CHECK and `vxlan sync`) and reusable by an
//! agent: load an [`OverlayConfig`], build a [`PeerSet`], call [`reconcile`].

pub mod batch;
pub mod config;
pub mod desired;
pub mod error;
pub mod lock;
pub mod mac;
pub mod peers;
pub mod plan;
pub mod reconcile;

pub use config::{Mode, OverlayConfig};
pub use error::Error;
pub use peers::{Peer, PeerSet};
pub use plan::ROUTE_PROTOCOL;
pub use reconcile::{reconcile, reconcile_with, Changes, DeviceChange, Report};
