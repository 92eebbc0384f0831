//! `sbr`: a chained plugin for source-based routing. Each address of `CNI_IFNAME` gets its
//! own routing table holding the interface's routes, and a rule sending traffic from that
//! address to it; with `table` set only the rules are added.

mod routing;

use sbr::{config, error};

use std::os::fd::AsRawFd;

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use netkit::{Netns, Socket};

use crate::error::SbrError;

struct SbrPlugin;

fn require_prev_result(args: &CmdArgs) -> Result<CniResult, SbrError> {
    args.prev_result()?.ok_or(SbrError::NotChained)
}

/// The container netns, flock'ed for the whole call (the reference locks the same file, so
/// the two serialise on a pod).
fn open_locked(path: &str) -> Result<Netns, netkit::Error> {
    let ns = Netns::open(path)?;
    // SAFETY: flock only operates on the descriptor, which `ns` keeps open.
    if unsafe { libc::flock(ns.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(netkit::Error::last_os_error(format!(
            "failed to lock netns {path:?}"
        )));
    }
    Ok(ns)
}

fn socket_in(path: &str) -> Result<(Netns, Socket), SbrError> {
    let ns = open_locked(path)?;
    let sock = Socket::open_in(&ns)?;
    Ok((ns, sock))
}

fn add(args: &CmdArgs) -> Result<CniResult, SbrError> {
    let sbr = config::parse(args)?;
    let prev = require_prev_result(args)?;
    let ips = config::addresses_of(&prev, &args.ifname)?;
    let (_ns, mut sock) = socket_in(&args.netns)?;
    routing::add(&mut sock, &sbr, &ips, &args.ifname)?;
    Ok(prev)
}

fn del(args: &CmdArgs) -> Result<(), SbrError> {
    let sbr = config::parse(args)?;
    if args.netns.is_empty() {
        return Ok(());
    }
    let prev_ips = match args.prev_result() {
        Ok(Some(prev)) => config::addresses_of(&prev, &args.ifname).unwrap_or_default(),
        _ => Vec::new(),
    };
    let ns = match open_locked(&args.netns) {
        Ok(ns) => ns,
        // The pod and its rules are gone already.
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut sock = Socket::open_in(&ns)?;
    routing::del(&mut sock, sbr.table, &args.ifname, &prev_ips)
}

fn check(args: &CmdArgs) -> Result<(), SbrError> {
    let sbr = config::parse(args)?;
    let prev = require_prev_result(args)?;
    let ips = config::addresses_of(&prev, &args.ifname)?;
    let (_ns, mut sock) = socket_in(&args.netns)?;
    routing::check(&mut sock, sbr.table, &ips)
}

impl Plugin for SbrPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add(args).map_err(Into::into)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del(args).map_err(Into::into)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check(args).map_err(Into::into)
    }
}

fn main() {
    skel::run(&SbrPlugin, "CNI sbr plugin (ferrocni)");
}
