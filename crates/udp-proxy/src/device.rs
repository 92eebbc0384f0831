//! The TUN device's kernel state, as flanneld sets it up: the lease's network address as a
//! /32 (no subnet route, no broadcast), the MTU, the link up, and one route for the whole
//! cluster network through the device (the engine routes per peer itself).
//!
//! Idempotent, for a reconcile: an address left by an earlier lease is removed, and the
//! cluster route is replaced wherever it pointed (a route left by another backend included).

use ipnetwork::{IpNetwork, Ipv4Network};
use netkit::{AddressOptions, Family, Route, Socket};

use crate::config::EngineConfig;
use crate::error::UdpProxyError;

/// Brings `config.tun_name` (which must exist: [`crate::Engine::start`] makes it) to the
/// state above, through `sock` (a socket in the device's network namespace).
pub fn configure(sock: &mut Socket, config: &EngineConfig) -> Result<(), UdpProxyError> {
    let link = sock.link_by_name(&config.tun_name)?;
    if link.mtu != config.mtu {
        sock.set_link_mtu(link.index, config.mtu)?;
    }
    let wanted = IpNetwork::V4(Ipv4Network::new(config.tun_address(), 32).map_err(|e| {
        netkit::Error::invalid(
            format!("failed to address {}", config.tun_name),
            e.to_string(),
        )
    })?);
    let mut present = false;
    for a in sock.addresses(Some(link.index), Family::V4)? {
        if a.address == wanted {
            present = true;
        } else {
            sock.delete_address(link.index, a.address)?;
        }
    }
    if !present {
        sock.add_address(link.index, wanted, &AddressOptions::default())?;
    }
    if !link.is_up() {
        sock.set_link_up(link.index)?;
    }
    sock.replace_route(&Route::new(IpNetwork::V4(config.network)).dev(link.index))?;
    Ok(())
}
