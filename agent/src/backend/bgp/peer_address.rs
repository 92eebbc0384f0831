//! A peer's address as the options give it (`Peers[].PeerIP`, `--bgp-peers`,
//! `ExternalPrefixes[].Peers`), checked once for every decoder.

use std::net::Ipv4Addr;

use super::error::BgpError;

/// `text` as a BGP peer's IPv4 address; the error names `option`.
pub(super) fn peer_ip(option: &str, text: &str) -> Result<Ipv4Addr, BgpError> {
    let ip: Ipv4Addr = text
        .parse()
        .map_err(|_| BgpError::option(option, format!("{text:?} is not an IPv4 address")))?;
    if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
        return Err(BgpError::option(
            option,
            format!("{ip} cannot be a BGP peer"),
        ));
    }
    Ok(ip)
}
