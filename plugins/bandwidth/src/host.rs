//! Finding the host end of the container's veth: read the peer ifindex of CNI_IFNAME inside
//! the container netns, look that index up in the host netns, and require the link to be
//! listed in prevResult as a host-side interface (empty sandbox).

use libcni::result::CniResult;
use netkit::{Link, Netns, Socket};

use crate::error::{BandwidthError, ChainError};

pub fn host_veth(
    prev: &CniResult,
    netns_path: &str,
    ifname: &str,
    host: &mut Socket,
) -> Result<Link, BandwidthError> {
    if prev.interfaces.is_empty() {
        return Err(ChainError::NoInterfaces.into());
    }
    let netns = Netns::open(netns_path)?;
    let mut container = Socket::open_in(&netns)?;
    let cont_link = container
        .link_by_name(ifname)
        .map_err(|e| e.context(format!("in netns {netns_path:?}")))?;
    let peer_index = match (cont_link.is_kind("veth"), cont_link.link) {
        (true, Some(i)) => i,
        _ => return Err(ChainError::NoVethPeer(ifname.to_string()).into()),
    };
    let host_link = match host.link_by_index(peer_index) {
        Ok(l) => l,
        Err(e) if e.is_not_found() => {
            return Err(ChainError::PeerNotInHost(peer_index).into());
        }
        Err(e) => return Err(e.into()),
    };
    // An equal ifindex in this netns may belong to an unrelated link when the peer lives in a
    // third netns: insist that it points back at the container interface.
    if !host_link.is_kind("veth") || host_link.link != Some(cont_link.index) {
        return Err(ChainError::NotThePeer {
            index: peer_index,
            host_link: host_link.name,
            ifname: ifname.to_string(),
        }
        .into());
    }
    let listed = prev
        .interfaces
        .iter()
        .any(|i| i.sandbox.is_empty() && i.name == host_link.name);
    if !listed {
        return Err(ChainError::NotListed(host_link.name).into());
    }
    Ok(host_link)
}
