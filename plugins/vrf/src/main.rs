//! `vrf`: a chained plugin that creates (or joins) a VRF device in the container netns and
//! moves `CNI_IFNAME` into it, with its routes; DEL takes the interface out again and
//! deletes the VRF once no interface is left in it.

// `VrfError` lives in the library: clippy measures an enum of another crate whole (128 bytes
// with its tag), where it measured its largest variant while the enum was local.
#![allow(clippy::result_large_err)]

mod device;

use vrf::{config, error};

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use netkit::{Netns, Socket};

use crate::config::VrfConf;
use crate::error::VrfError;

/// The reference speaks 0.3.1 and later only.
const VERSIONS: &[&str] = &["0.3.1", "0.4.0", "1.0.0", "1.1.0"];

struct VrfPlugin;

fn require_prev_result(args: &CmdArgs) -> Result<CniResult, VrfError> {
    args.prev_result()?.ok_or(VrfError::MissingPrevResult)
}

fn socket_in(path: &str) -> Result<Socket, VrfError> {
    let ns = Netns::open(path)?;
    Ok(Socket::open_in(&ns)?)
}

fn add(args: &CmdArgs) -> Result<CniResult, VrfError> {
    let conf = VrfConf::parse(args)?;
    let prev = require_prev_result(args)?;
    let mut sock = socket_in(&args.netns)?;
    device::join(&mut sock, &conf, &args.ifname).map_err(|e| VrfError::Add(Box::new(e)))?;
    Ok(prev)
}

fn del(args: &CmdArgs) -> Result<(), VrfError> {
    let conf = VrfConf::parse(args)?;
    if args.netns.is_empty() {
        return Ok(());
    }
    let ns = match Netns::open(&args.netns) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut sock = Socket::open_in(&ns)?;
    device::leave(&mut sock, &conf, &args.ifname).map_err(|e| VrfError::Del(Box::new(e)))
}

fn check(args: &CmdArgs) -> Result<(), VrfError> {
    let conf = VrfConf::parse(args)?;
    require_prev_result(args)?;
    let mut sock = socket_in(&args.netns)?;
    device::verify(&mut sock, &conf, &args.ifname)
}

impl Plugin for VrfPlugin {
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
    skel::run_versions(&VrfPlugin, "CNI vrf plugin (ferrocni)", VERSIONS);
}
