//! What the host-gw backend fails on.

use std::net::Ipv4Addr;

use crate::backend::overlay::OverlayError;

#[derive(Debug, thiserror::Error)]
pub enum HostGwError {
    /// The underlay interface could not be read (the text says why).
    #[error("{0}")]
    Underlay(String),
    /// Routes via peers' addresses need this node's own address on the underlay.
    #[error("host-gw needs the public address {public_ip} on the underlay interface {iface} (nodes behind NAT cannot be reached by plain routes)")]
    BehindNat { public_ip: Ipv4Addr, iface: String },
    #[error(transparent)]
    Overlay(#[from] OverlayError),
}
