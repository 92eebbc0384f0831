//! `firewall`: a chained CNI plugin that lets the container's traffic through the host
//! firewall (iptables CNI-FORWARD rules, or firewalld zone sources) and applies the
//! `ingressPolicy` isolation between bridges (spec-catalog §4.7).

mod config;
mod firewalld;
mod ingress;
mod iptables_backend;
mod netlink_backend;

use std::net::IpAddr;

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;

use crate::config::{BackendKind, FirewallConf};

struct Firewall;

/// The configured backend; when unset, firewalld if it runs, else iptables (as the reference).
fn backend(conf: &FirewallConf) -> BackendKind {
    conf.backend.unwrap_or_else(|| {
        if firewalld::is_running() {
            BackendKind::Firewalld
        } else {
            BackendKind::Iptables
        }
    })
}

fn addresses(result: &CniResult) -> Vec<IpAddr> {
    result.ips.iter().map(|ip| ip.address.ip()).collect()
}

impl Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::parse(&args.config)?;
        let result = args
            .prev_result()?
            .ok_or_else(|| CniError::invalid_config("missing prevResult from earlier plugin"))?;
        let ips = addresses(&result);
        let kind = backend(&conf);
        match kind {
            BackendKind::Iptables => iptables_backend::add(&ips, &conf.admin_chain)?,
            BackendKind::Firewalld => firewalld::add(&ips, &conf.zone)?,
        }
        if let Err(e) = ingress::setup(conf.ingress_policy, &result) {
            match kind {
                BackendKind::Iptables => iptables_backend::del(&ips),
                BackendKind::Firewalld => firewalld::del(&ips, &conf.zone),
            }
            return Err(e);
        }
        Ok(result)
    }

    /// Without prevResult there is nothing to identify the rules by (as in the reference).
    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::parse(&args.config)?;
        let Some(result) = args.prev_result()? else {
            return Ok(());
        };
        let ips = addresses(&result);
        match backend(&conf) {
            BackendKind::Iptables => iptables_backend::del(&ips),
            BackendKind::Firewalld => firewalld::del(&ips, &conf.zone),
        }
        Ok(())
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::parse(&args.config)?;
        let result = args
            .prev_result()?
            .ok_or_else(|| CniError::invalid_config("Required prevResult missing"))?;
        let ips = addresses(&result);
        match backend(&conf) {
            BackendKind::Iptables => iptables_backend::check(&ips, &conf.admin_chain)?,
            BackendKind::Firewalld => firewalld::check(&ips, &conf.zone)?,
        }
        ingress::check(conf.ingress_policy, &result)
    }

    /// Ready when the backend's client tools are installed.
    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::parse(&args.config)?;
        let missing = match backend(&conf) {
            BackendKind::Iptables => iptables_backend::require_tools().err(),
            BackendKind::Firewalld => netkit::netfilter::exec::find_tool("firewall-cmd")
                .is_none()
                .then(|| CniError::internal("firewall-cmd is not installed")),
        };
        match missing {
            None => Ok(()),
            Some(e) => Err(CniError::not_available(e.msg)),
        }
    }
}

/// The firewall plugin needs prevResult on DEL and CHECK, which exist from 0.4.0 on (as the reference).
const SUPPORTED_VERSIONS: &[&str] = &["0.4.0", "1.0.0", "1.1.0"];

fn main() {
    skel::run_versions(
        &Firewall,
        "CNI firewall plugin (ferrocni)",
        SUPPORTED_VERSIONS,
    );
}
