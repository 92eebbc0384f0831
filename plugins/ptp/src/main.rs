//! The `ptp` CNI plugin: a veth pair whose container end is routed through the host end.
//! The container reaches everything via its gateway, which the host end answers for (a /32 or
//! /128 gateway address on it); the host reaches the container by a /32 (/128) route.

mod add;
mod check;
mod config;
mod del;

use attach::ipam;
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::netfilter::ipmasq::Backend;

struct Ptp;

impl Plugin for Ptp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add::add(args, &config::load(args)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::del(args, &config::load(args)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check::check(args, &config::load(args)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        del::gc(args, &config::load(args)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "STATUS")?;
        if conf.ip_masq {
            let backend = conf
                .ip_masq_backend
                .unwrap_or_else(|| Backend::default_for(&conf.network));
            if !backend.is_available() {
                return Err(CniError::not_available(format!(
                    "ptp: ipMasq needs {}, which is not available",
                    backend.tool()
                )));
            }
        }
        Ok(())
    }
}

fn main() {
    libcni::skel::run(&Ptp, "CNI ptp plugin (ferrocni)");
}
