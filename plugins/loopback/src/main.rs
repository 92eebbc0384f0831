//! CNI `loopback` plugin: brings `lo` up in the container netns.
//! No configuration fields; CNI_IFNAME is ignored (always `lo`).

use std::net::IpAddr;

use libcni::error::CniError;
use libcni::result::{CniResult, Interface, IpConfig};
use libcni::skel::{self, CmdArgs, Plugin};
use netkit::addr::{Address, Family};
use netkit::{Netns, Socket};

const LO: &str = "lo";

struct Loopback;

/// Netlink failures are not CNI protocol errors: report them as the generic code 999,
/// like the reference plugin.
fn internal(e: netkit::Error) -> CniError {
    CniError::internal(e.to_string())
}

/// A socket in the container netns plus lo's ifindex.
fn open_lo(netns: &Netns) -> Result<(Socket, u32), CniError> {
    let mut sock = Socket::open_in(netns).map_err(internal)?;
    let index = sock.link_by_name(LO).map_err(internal)?.index;
    Ok((sock, index))
}

/// Go's `net.IP.IsLoopback`: 127/8, `::1`, and IPv4-mapped 127/8.
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The first address of `family` on lo, after checking that every one of them is a loopback address.
fn first_loopback_address(addrs: &[Address]) -> Result<Option<IpConfig>, CniError> {
    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.ip())) {
        return Err(CniError::internal(format!(
            "loopback interface found with non-loopback address \"{}\"",
            bad.ip()
        )));
    }
    Ok(addrs.first().map(|a| IpConfig {
        interface: Some(0),
        address: a.address,
        gateway: None,
    }))
}

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        // Parse prevResult before touching the kernel, so a bad one changes nothing.
        let prev = args.prev_result()?;
        let netns = Netns::open(&args.netns).map_err(internal)?;
        let (mut sock, lo) = open_lo(&netns)?;
        sock.set_link_up(lo).map_err(internal)?;
        let v4 = sock.addresses(Some(lo), Family::V4).map_err(internal)?;
        let v4 = first_loopback_address(&v4)?;
        let v6 = sock.addresses(Some(lo), Family::V6).map_err(internal)?;
        let v6 = first_loopback_address(&v6)?;

        if let Some(prev) = prev {
            return Ok(prev);
        }
        Ok(CniResult {
            cni_version: args.cni_version.clone(),
            interfaces: vec![Interface {
                name: LO.to_string(),
                mac: "00:00:00:00:00:00".to_string(),
                sandbox: args.netns.clone(),
                ..Default::default()
            }],
            ips: v4.into_iter().chain(v6).collect(),
            ..Default::default()
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        if args.netns.is_empty() {
            return Ok(());
        }
        // The runtime may already have removed the netns, or DEL may be repeated.
        let netns = match Netns::open(&args.netns) {
            Ok(ns) => ns,
            Err(e) if e.is_netns_not_found() => return Ok(()),
            Err(e) => return Err(internal(e)),
        };
        let (mut sock, lo) = open_lo(&netns)?;
        sock.set_link_down(lo).map_err(internal)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let netns = Netns::open(&args.netns).map_err(internal)?;
        let mut sock = Socket::open_in(&netns).map_err(internal)?;
        let lo = sock.link_by_name(LO).map_err(internal)?;
        if !lo.is_up() {
            return Err(CniError::internal("loopback interface is down"));
        }
        Ok(())
    }
}

fn main() {
    skel::run(&Loopback, "CNI loopback plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_rules_match_go() {
        for ok in ["127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ok.parse().unwrap()), "{ok}");
        }
        for bad in ["10.0.0.1", "::2", "fe80::1", "::ffff:10.0.0.1"] {
            assert!(!is_loopback(bad.parse().unwrap()), "{bad}");
        }
    }
}
