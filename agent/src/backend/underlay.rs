//! What the routed backends share of the node's kernel: the underlay interface (flannel's
//! external interface) and keeping a device's own addresses.

use std::net::{IpAddr, Ipv4Addr};

use ipnetwork::{IpNetwork, Ipv4Network};
use netkit::packet_route::address::AddressScope;
use netkit::{AddressOptions, Family};

/// The node's underlay interface: flannel's external interface (`--iface`, else the one
/// holding the public address).
pub struct Underlay {
    pub index: u32,
    pub name: String,
    pub mtu: u32,
    /// Its IPv4 networks (for DirectRouting: which peers are on-link).
    pub networks: Vec<Ipv4Network>,
    /// Its IPv4 addresses, in the kernel's order (the udp backend binds the first, as
    /// flanneld binds the interface's address).
    pub addresses: Vec<Ipv4Addr>,
    /// Whether it holds the node's public address (not when the node is behind NAT).
    pub has_public_ip: bool,
}

impl Underlay {
    pub fn find(iface: Option<&str>, public_ip: Ipv4Addr) -> Result<Underlay, String> {
        let mut sock = netkit::Socket::new().map_err(|e| e.to_string())?;
        let addrs = sock
            .addresses(None, Family::V4)
            .map_err(|e| e.to_string())?;
        let link = match iface {
            Some(name) => sock.link_by_name(name).map_err(|e| e.to_string())?,
            None => {
                let index = addrs
                    .iter()
                    .find(|a| a.ip() == IpAddr::V4(public_ip))
                    .map(|a| a.index)
                    .ok_or_else(|| {
                        format!("no interface has the public address {public_ip}; give --iface")
                    })?;
                sock.link_by_index(index).map_err(|e| e.to_string())?
            }
        };
        let own_v4 = || {
            addrs
                .iter()
                .filter(|a| a.index == link.index)
                .filter_map(|a| match a.address {
                    IpNetwork::V4(n) => Some(n),
                    IpNetwork::V6(_) => None,
                })
        };
        let networks = own_v4()
            .filter_map(|n| Ipv4Network::new(n.network(), n.prefix()).ok())
            .collect();
        let addresses = own_v4().map(|n| n.ip()).collect();
        let has_public_ip = addrs
            .iter()
            .any(|a| a.index == link.index && a.ip() == IpAddr::V4(public_ip));
        Ok(Underlay {
            has_public_ip,
            index: link.index,
            name: link.name,
            mtu: link.mtu,
            networks,
            addresses,
        })
    }

    /// The device MTU for a backend adding `overhead` bytes.
    pub fn mtu_less(&self, overhead: u32) -> Result<u32, String> {
        match self.mtu.checked_sub(overhead) {
            Some(m) if m >= 576 => Ok(m),
            _ => Err(format!(
                "MTU {} of {} is too small for a tunnel adding {overhead} bytes",
                self.mtu, self.name
            )),
        }
    }
}

/// Keeps exactly `want` (the node's own addresses) among the global addresses of `index`.
pub fn ensure_addresses(
    sock: &mut netkit::Socket,
    index: u32,
    want: &[IpNetwork],
) -> Result<(), String> {
    let have = sock
        .addresses(Some(index), Family::Any)
        .map_err(|e| e.to_string())?;
    for a in &have {
        if a.scope == AddressScope::Universe && !want.contains(&a.address) {
            sock.delete_address(index, a.address)
                .map_err(|e| e.to_string())?;
        }
    }
    for w in want {
        if !have.iter().any(|a| a.address == *w) {
            let opts = AddressOptions {
                nodad: w.is_ipv6(),
                ..Default::default()
            };
            sock.add_address(index, *w, &opts)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
