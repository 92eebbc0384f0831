//! `firewall`: a chained CNI plugin that lets the container's traffic through the host
//! firewall (iptables CNI-FORWARD rules, or firewalld zone sources) and applies the
//! `ingressPolicy` isolation between bridges.

mod chains;
mod firewalld;
mod ingress;
mod iptables_backend;
mod netlink_backend;

use firewall::{config, error, record};

use std::net::IpAddr;

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;

use crate::config::{BackendKind, FirewallConf};
use crate::error::FirewallError;
use crate::record::{Record, Records};

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

/// Lets `ips` through with the chosen backend. The iptables backend undoes its own rules on
/// failure; firewalld's zone bindings are undone here.
fn allow(kind: BackendKind, conf: &FirewallConf, ips: &[IpAddr]) -> Result<(), FirewallError> {
    match kind {
        BackendKind::Iptables => iptables_backend::add(ips, &conf.admin_chain),
        BackendKind::Firewalld => firewalld::add(ips, &conf.zone).inspect_err(|_| {
            firewalld::del(ips, &conf.zone);
        }),
    }
}

/// Removes what [`allow`] did; what is already gone is fine (failures are logged).
fn disallow(kind: BackendKind, ips: &[IpAddr], zone: &str) {
    match kind {
        BackendKind::Iptables => iptables_backend::del(ips),
        BackendKind::Firewalld => firewalld::del(ips, zone),
    }
}

fn add(args: &CmdArgs) -> Result<CniResult, FirewallError> {
    let conf = config::parse(&args.config)?;
    let result = args.prev_result()?.ok_or(FirewallError::NotChained)?;
    let ips = addresses(&result);
    let kind = backend(&conf);
    let records = Records::new(&conf.data_dir, &args.network_name);
    // Recorded before the first rule: an ADD killed anywhere leaves what DEL and GC need.
    records.save(&Record::new(
        &args.container_id,
        &args.ifname,
        kind,
        &conf.zone,
        &ips,
    ))?;
    let applied = allow(kind, &conf, &ips).and_then(|()| {
        ingress::setup(conf.ingress_policy, &result).inspect_err(|_| {
            disallow(kind, &ips, &conf.zone);
        })
    });
    if let Err(e) = applied {
        if let Err(undo) = records.remove(&args.container_id, &args.ifname) {
            eprintln!("firewall: {undo}");
        }
        return Err(e);
    }
    Ok(result)
}

/// Removes the rules of the addresses in prevResult and in the attachment's record, so a
/// DEL without prevResult (a second DEL, or the DEL after a failed ADD) still cleans up.
fn del(args: &CmdArgs) -> Result<(), FirewallError> {
    let conf = config::parse(&args.config)?;
    let (records, record) = match Records::find(
        &conf.data_dir,
        &args.network_name,
        &args.container_id,
        &args.ifname,
    ) {
        Some((records, record)) => (records, Some(record)),
        None => (Records::new(&conf.data_dir, &args.network_name), None),
    };
    let mut ips = match args.prev_result()? {
        Some(result) => addresses(&result),
        None => Vec::new(),
    };
    let (kind, zone) = match &record {
        Some(r) => {
            ips.extend(
                r.ips
                    .iter()
                    .filter(|ip| !ips.contains(ip))
                    .collect::<Vec<_>>(),
            );
            (
                r.backend().unwrap_or_else(|| backend(&conf)),
                r.zone.clone().unwrap_or_else(|| conf.zone.clone()),
            )
        }
        None => (backend(&conf), conf.zone.clone()),
    };
    if !ips.is_empty() {
        disallow(kind, &ips, &zone);
    }
    // A record that cannot be removed (read-only disk) must not make DEL fail for ever:
    // its rules are gone, and GC or a later DEL removes it.
    if let Err(e) = records.remove(&args.container_id, &args.ifname) {
        eprintln!("firewall: {e}");
    }
    Ok(())
}

fn check(args: &CmdArgs) -> Result<(), FirewallError> {
    let conf = config::parse(&args.config)?;
    let result = args
        .prev_result()?
        .ok_or(FirewallError::PrevResultMissing)?;
    let ips = addresses(&result);
    match backend(&conf) {
        BackendKind::Iptables => iptables_backend::check(&ips, &conf.admin_chain)?,
        BackendKind::Firewalld => firewalld::check(&ips, &conf.zone)?,
    }
    ingress::check(conf.ingress_policy, &result)
}

/// Ready when the backend's client tools are installed.
fn status(args: &CmdArgs) -> Result<(), FirewallError> {
    let conf = config::parse(&args.config)?;
    let missing = match backend(&conf) {
        BackendKind::Iptables => iptables_backend::require_tools().err(),
        BackendKind::Firewalld => netkit::netfilter::exec::find_tool("firewall-cmd")
            .is_none()
            .then_some(FirewallError::FirewalldMissing),
    };
    match missing {
        None => Ok(()),
        Some(e) => Err(FirewallError::Unavailable(Box::new(e))),
    }
}

/// Removes the rules of this network's recorded attachments that are not in
/// `cni.dev/valid-attachments` (pods whose DEL never came). An address still recorded by
/// a valid attachment keeps its rules. Records of an earlier boot only go: their rules died
/// with it, and their addresses may be this boot's pods'.
fn gc(args: &CmdArgs) -> Result<(), FirewallError> {
    let conf = config::parse(&args.config)?;
    let valid = args.valid_attachments()?;
    let records = Records::new(&conf.data_dir, &args.network_name);
    let mut failures = Vec::new();
    if let Err(e) = records.forget_earlier_boots() {
        failures.push(e.to_string());
    }
    let (live, stale): (Vec<Record>, Vec<Record>) = records.list()?.into_iter().partition(|r| {
        valid
            .iter()
            .any(|(cid, ifname)| *cid == r.container_id && *ifname == r.ifname)
    });
    let in_use: Vec<IpAddr> = live.iter().flat_map(|r| r.ips.iter().copied()).collect();
    for r in stale {
        let ips: Vec<IpAddr> = r
            .ips
            .iter()
            .copied()
            .filter(|ip| !in_use.contains(ip))
            .collect();
        let zone = r.zone.clone().unwrap_or_else(|| conf.zone.clone());
        disallow(r.backend().unwrap_or_else(|| backend(&conf)), &ips, &zone);
        if let Err(e) = records.remove(&r.container_id, &r.ifname) {
            failures.push(e.to_string());
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(FirewallError::Gc(failures))
    }
}

impl Plugin for Firewall {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add(args).map_err(Into::into)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del(args).map_err(Into::into)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check(args).map_err(Into::into)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        status(args).map_err(Into::into)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        gc(args).map_err(Into::into)
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
