//! The `ptp` CNI plugin: a veth pair whose container end is routed through the host end.
//! The container reaches everything via its gateway, which the host end answers for (a /32 or
//! /128 gateway address on it); the host reaches the container by a /32 (/128) route.
//!
//! ADD, DEL, CHECK and GC are generic over netkit's kernel seam, attach's IPAM and attach's
//! netfilter seam; the binary runs them on the live kernel, the executed IPAM
//! plugin and the host's netfilter.

mod add;
mod check;
mod del;
#[cfg(test)]
mod tests;

use ptp::{config, error};

use attach::ipam::{ExecIpam, Ipam};
use attach::netfilter::{LiveNetfilter, Netfilter};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::LiveKernel;

use error::PtpError;

struct Ptp;

impl Plugin for Ptp {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        Ok(add::add(
            &LiveKernel,
            &ExecIpam,
            &LiveNetfilter,
            args,
            &conf,
        )?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(del::del(
            &LiveKernel,
            &ExecIpam,
            &LiveNetfilter,
            args,
            &conf,
        )?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(check::check(
            &LiveKernel,
            &ExecIpam,
            &LiveNetfilter,
            args,
            &conf,
        )?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(del::gc(&ExecIpam, &LiveNetfilter, args, &conf)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "STATUS")?;
        if conf.ip_masq {
            let backend = conf
                .ip_masq_backend
                .unwrap_or_else(|| LiveNetfilter.default_masquerade_backend(&conf.network));
            if !backend.is_available() {
                return Err(PtpError::MasqueradeUnavailable {
                    tool: backend.tool(),
                }
                .into());
            }
        }
        Ok(())
    }
}

fn main() {
    libcni::skel::run(&Ptp, "CNI ptp plugin (ferrocni)");
}
