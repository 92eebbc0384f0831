//! CNI `loopback` plugin: brings `lo` up in the container netns.
//! No configuration fields; CNI_IFNAME is ignored (always `lo`).

mod error;

use std::net::IpAddr;

use libcni::error::CniError;
use libcni::result::{CniResult, Interface, IpConfig};
use libcni::skel::{self, CmdArgs, Plugin};
use netkit::addr::{Address, Family};
use netkit::{Netns, Socket};

use crate::error::LoopbackError;

const LO: &str = "lo";

struct Loopback;

/// A socket in the container netns plus lo's ifindex.
fn open_lo(netns: &Netns) -> Result<(Socket, u32), LoopbackError> {
    let mut sock = Socket::open_in(netns)?;
    let index = sock.link_by_name(LO)?.index;
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
fn first_loopback_address(addrs: &[Address]) -> Result<Option<IpConfig>, LoopbackError> {
    if let Some(bad) = addrs.iter().find(|a| !is_loopback(a.ip())) {
        return Err(LoopbackError::NonLoopbackAddress(bad.ip()));
    }
    Ok(addrs.first().map(|a| IpConfig {
        interface: Some(0),
        address: a.address,
        gateway: None,
    }))
}

fn add(args: &CmdArgs) -> Result<CniResult, LoopbackError> {
    // Parse prevResult before touching the kernel, so a bad one changes nothing.
    let prev = args.prev_result()?;
    let netns = Netns::open(&args.netns)?;
    let (mut sock, lo) = open_lo(&netns)?;
    sock.set_link_up(lo)?;
    let v4 = sock.addresses(Some(lo), Family::V4)?;
    let v4 = first_loopback_address(&v4)?;
    let v6 = sock.addresses(Some(lo), Family::V6)?;
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

fn del(args: &CmdArgs) -> Result<(), LoopbackError> {
    if args.netns.is_empty() {
        return Ok(());
    }
    // The runtime may already have removed the netns, or DEL may be repeated.
    let netns = match Netns::open(&args.netns) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let (mut sock, lo) = open_lo(&netns)?;
    Ok(sock.set_link_down(lo)?)
}

fn check(args: &CmdArgs) -> Result<(), LoopbackError> {
    let netns = Netns::open(&args.netns)?;
    let mut sock = Socket::open_in(&netns)?;
    let lo = sock.link_by_name(LO)?;
    if !lo.is_up() {
        return Err(LoopbackError::Down);
    }
    Ok(())
}

impl Plugin for Loopback {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        Ok(add(args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(del(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        Ok(check(args)?)
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
