//! The `bridge` CNI plugin: connects containers to a Linux bridge through veth pairs, with
//! optional IPAM, gateway, masquerade, VLANs, hairpin, port isolation and MAC spoof checking.

mod add;
mod check;
mod del;
mod gateway;

use bridge::{config, error};

use attach::ipam::{Ipam, LinkedIpam};
use attach::netfilter::{LiveNetfilter, Netfilter};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::netfilter::ipmasq::Backend;
use netkit::LiveKernel;

use crate::error::BridgeError;

struct Bridge;

/// The IPAM plugin: host-local answered in-process when the `host-local` on `CNI_PATH` is the
/// one built with this binary (no third process per ADD), any other executed as usual.
const IPAM: LinkedIpam = LinkedIpam(&[host_local::plugin::LINKED]);

impl Plugin for Bridge {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        Ok(add::add(&LiveKernel, &IPAM, &LiveNetfilter, args, &conf)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(del::del(&LiveKernel, &IPAM, &LiveNetfilter, args, &conf)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(check::check(
            &LiveKernel,
            &IPAM,
            &LiveNetfilter,
            args,
            &conf,
        )?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        Ok(del::gc(&LiveNetfilter, args, &conf)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        IPAM.call_if_set(args, &conf.ipam_type, "STATUS")?;
        // An ADD would fail without the netfilter support it needs.
        if conf.ip_masq && conf.is_layer3() {
            let backend = conf
                .ip_masq_backend
                .unwrap_or_else(|| LiveNetfilter.default_masquerade_backend(&conf.network));
            if !backend.is_available() {
                return Err(BridgeError::MasqUnavailable {
                    tool: backend.tool(),
                }
                .into());
            }
        }
        // The spoof check is an nftables `bridge` table, written over netlink.
        if conf.macspoofchk && !Backend::Nftables.is_available() {
            return Err(BridgeError::SpoofCheckUnavailable.into());
        }
        Ok(())
    }
}

fn main() {
    libcni::skel::run(&Bridge, "CNI bridge plugin (ferrocni)");
}

#[cfg(test)]
mod tests;
