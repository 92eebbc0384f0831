//! IP addresses on links: add, list, delete.

use std::net::IpAddr;

use ipnetwork::IpNetwork;
use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use crate::error::{Error, Result};
use crate::netlink::{AddressReplies, Socket, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE};

/// Which IP family to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    Any,
    V4,
    V6,
}

impl Family {
    pub(crate) fn to_af(self) -> AddressFamily {
        match self {
            Family::Any => AddressFamily::Unspec,
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        }
    }

    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    pub(crate) fn matches(self, ip: IpAddr) -> bool {
        self == Family::Any || self == Family::of(ip)
    }
}

/// One address as the kernel reports it.
#[derive(Debug, Clone)]
pub struct Address {
    pub index: u32,
    /// Address with its prefix length, host bits kept (10.1.2.3/24).
    pub address: IpNetwork,
    pub scope: AddressScope,
    /// Full flags (IFA_FLAGS when present, else the header's 8 bits).
    pub flags: AddressFlags,
    pub label: Option<String>,
    pub message: AddressMessage,
}

impl Address {
    /// Decodes a kernel RTM_NEWADDR message; `None` for non-IP families.
    pub fn from_message(message: AddressMessage) -> Option<Address> {
        let mut local = None;
        let mut addr = None;
        let mut label = None;
        let mut flags = AddressFlags::from_bits_retain(u32::from(message.header.flags.bits()));
        for attr in &message.attributes {
            match attr {
                AddressAttribute::Local(ip) => local = Some(*ip),
                AddressAttribute::Address(ip) => addr = Some(*ip),
                AddressAttribute::Label(l) => label = Some(l.clone()),
                AddressAttribute::Flags(f) => flags = *f,
                _ => {}
            }
        }
        // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links.
        let ip = local.or(addr)?;
        let address = IpNetwork::new(ip, message.header.prefix_len).ok()?;
        Some(Address {
            index: message.header.index,
            address,
            scope: message.header.scope,
            flags,
            label,
            message,
        })
    }

    pub fn ip(&self) -> IpAddr {
        self.address.ip()
    }
}

/// Options for [`Socket::add_address`].
#[derive(Debug, Clone, Default)]
pub struct AddressOptions {
    /// IFA_F_NODAD: skip IPv6 duplicate address detection.
    pub nodad: bool,
    /// IFA_F_NOPREFIXROUTE: do not install the prefix route.
    pub noprefixroute: bool,
    /// Defaults to universe (what the reference plugins send).
    pub scope: Option<AddressScope>,
    /// Replace an existing identical address instead of failing with EEXIST.
    pub replace: bool,
}

impl Socket {
    /// `ip addr add ADDR/PREFIX dev X`. IPv4 addresses get the broadcast address computed
    /// (prefix < 31), as the reference plugins do. EEXIST if already present (unless `replace`).
    pub fn add_address(
        &mut self,
        index: u32,
        address: IpNetwork,
        opts: &AddressOptions,
    ) -> Result<()> {
        let mut msg = address_message(index, address);
        let mut flags = AddressFlags::empty();
        if opts.nodad {
            flags |= AddressFlags::Nodad;
        }
        if opts.noprefixroute {
            flags |= AddressFlags::Noprefixroute;
        }
        msg.header.flags = AddressHeaderFlags::from_bits_truncate((flags.bits() & 0xff) as u8);
        if !flags.is_empty() {
            msg.attributes.push(AddressAttribute::Flags(flags));
        }
        msg.header.scope = opts.scope.unwrap_or(AddressScope::Universe);
        if let IpNetwork::V4(v4) = address {
            if v4.prefix() < 31 {
                msg.attributes
                    .push(AddressAttribute::Broadcast(v4.broadcast()));
            }
        }
        let mode = if opts.replace {
            NLM_F_REPLACE
        } else {
            NLM_F_EXCL
        };
        match self.request_ack(RouteNetlinkMessage::NewAddress(msg), NLM_F_CREATE | mode) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!("failed to add address {address} to {name}")))
            }
        }
    }

    /// `ip addr del ADDR/PREFIX dev X` (EADDRNOTAVAIL, i.e. `is_not_found()`, when absent).
    pub fn delete_address(&mut self, index: u32, address: IpNetwork) -> Result<()> {
        let msg = address_message(index, address);
        match self.request_ack(RouteNetlinkMessage::DelAddress(msg), 0) {
            Ok(()) => Ok(()),
            Err(e) => {
                let name = self.describe_link(index);
                Err(e.context(format!("failed to delete address {address} from {name}")))
            }
        }
    }

    /// Addresses of link `index` (or of every link when `None`) in `family`.
    pub fn addresses(&mut self, index: Option<u32>, family: Family) -> Result<Vec<Address>> {
        let mut msg = AddressMessage::default();
        msg.header.family = family.to_af();
        // With strict checking the kernel filters by index itself.
        msg.header.index = index.unwrap_or(0);
        let replies = match self
            .request_as::<AddressReplies>(RouteNetlinkMessage::GetAddress(msg), NLM_F_DUMP)
        {
            Ok(r) => r,
            Err(e) => {
                let what = match index {
                    Some(i) => self.describe_link(i),
                    None => "all links".to_string(),
                };
                return Err(e.context(format!("failed to list addresses of {what}")));
            }
        };
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => Address::from_message(a),
                _ => None,
            })
            .filter(|a| index.is_none_or(|i| a.index == i) && family.matches(a.ip()))
            .collect())
    }
}

pub(crate) fn address_message(index: u32, address: IpNetwork) -> AddressMessage {
    let mut msg = AddressMessage::default();
    msg.header.index = index;
    msg.header.prefix_len = address.prefix();
    msg.header.family = Family::of(address.ip()).to_af();
    msg.attributes.push(AddressAttribute::Local(address.ip()));
    msg.attributes.push(AddressAttribute::Address(address.ip()));
    msg
}

/// Convenience: an IpNetwork from an address and prefix, with a readable error.
pub fn ip_network(ip: IpAddr, prefix: u8) -> Result<IpNetwork> {
    IpNetwork::new(ip, prefix)
        .map_err(|e| Error::invalid(format!("invalid prefix {ip}/{prefix}"), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_v4_local_over_peer() {
        let mut m = address_message(3, "10.0.0.1/24".parse().unwrap());
        m.attributes
            .retain(|a| !matches!(a, AddressAttribute::Address(_)));
        m.attributes
            .push(AddressAttribute::Address("10.0.0.9".parse().unwrap()));
        let a = Address::from_message(m).unwrap();
        assert_eq!(a.address.to_string(), "10.0.0.1/24");
        assert_eq!(a.index, 3);
    }

    #[test]
    fn family_filter() {
        assert!(Family::Any.matches("::1".parse().unwrap()));
        assert!(Family::V4.matches("127.0.0.1".parse().unwrap()));
        assert!(!Family::V4.matches("::1".parse().unwrap()));
    }
}
