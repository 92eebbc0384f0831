//! DEL and GC. DEL is idempotent and never needs the netns or the addresses: IPAM is released
//! by (container, ifname), masquerade rules are found by (network, container), spoof-check
//! chains by (container, ifname). So nothing leaks when CNI_NETNS is empty or already gone.

use libcni::error::CniError;
use libcni::skel::CmdArgs;
use netkit::netfilter::iptables::Family;
use netkit::netfilter::{ipmasq, spoofcheck, spoofcheck::SpoofChecker};
use netkit::{Netns, Socket};

use crate::config::NetConf;
use crate::errors;
use crate::ipam;

pub fn del(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    let mut failures: Vec<CniError> = Vec::new();
    // Address families the attachment used (only to skip needless iptables runs).
    let mut families: Vec<Family> = Vec::new();
    let mut note = |ip: std::net::IpAddr| {
        let f = Family::of(&ip);
        if !families.contains(&f) {
            families.push(f);
        }
    };
    if let Ok(Some(prev)) = args.prev_result() {
        prev.ips.iter().for_each(|i| note(i.address.ip()));
    }

    // The IPAM release runs alongside the veth deletion, the kernel's slowest step (the
    // unregistration waits for RCU grace periods): the DEL then takes about the deletion alone.
    // The two are independent (IPAM releases by container and ifname).
    let ipam_del = conf.is_layer3().then(|| {
        let (ipam_type, stdin) = (conf.ipam_type.clone(), args.stdin.clone());
        std::thread::spawn(move || ipam::call(&ipam_type, "DEL", &stdin))
    });

    if !args.netns.is_empty() {
        match Netns::open(&args.netns) {
            Ok(ns) => {
                // Deleting the container end takes the host end (and its bridge port) with it.
                let deleted = Socket::open_in(&ns).and_then(|mut s| {
                    if conf.ip_masq && conf.is_layer3() {
                        if let Some(link) = s.find_link(&args.ifname)? {
                            for a in s.addresses(Some(link.index), netkit::Family::Any)? {
                                if !a.ip().is_unicast_link_local_compat() {
                                    note(a.ip());
                                }
                            }
                        }
                    }
                    s.delete_link_by_name(&args.ifname)
                });
                if let Err(e) = deleted {
                    failures.push(errors::kernel(e));
                }
            }
            Err(e) if e.is_netns_not_found() => {}
            Err(e) => failures.push(errors::kernel(e)),
        }
    }
    if families.is_empty() {
        // Nothing tells which families were used: clean both.
        families = vec![Family::V4, Family::V6];
    }

    if let Some(job) = ipam_del {
        match job.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(_) => failures.push(CniError::internal("the IPAM DEL thread panicked")),
        }
    }

    if conf.macspoofchk {
        let sc = SpoofChecker::new(
            "",
            "",
            &SpoofChecker::ref_id_for(&args.container_id, &args.ifname),
        );
        if let Err(e) = sc.teardown() {
            // As in the reference: a spoof-check leftover must not block the DEL.
            eprintln!("bridge: {e}");
        }
    }

    // Masquerade exists only for layer-3 configs (as in the reference).
    if conf.ip_masq && conf.is_layer3() {
        if let Err(e) =
            ipmasq::teardown_families(&conf.network, &args.ifname, &args.container_id, &families)
        {
            failures.push(errors::netfilter(e));
        }
    }

    match failures.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// GC: forwards to IPAM, then removes the masquerade rules of attachments not in the valid list.
/// Keeps going after a failure and reports the first one.
pub fn gc(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    let valid = args.valid_attachments()?;
    let mut failures: Vec<CniError> = Vec::new();
    if conf.is_layer3() {
        if let Err(e) = ipam::call(&conf.ipam_type, "GC", &args.stdin) {
            failures.push(e);
        }
    }
    if conf.ip_masq {
        if let Err(e) = ipmasq::gc(&conf.network, &valid) {
            failures.push(errors::netfilter(e));
        }
    }
    if conf.macspoofchk {
        if let Err(e) = gc_spoof_checks(&valid) {
            failures.push(e);
        }
    }
    match failures.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Spoof checks whose bridge port is gone and whose attachment is not valid: a pod removed
/// without DEL leaves them behind, and nothing else ever would remove them.
fn gc_spoof_checks(valid: &[(String, String)]) -> Result<(), CniError> {
    let mut host = Socket::new().map_err(errors::kernel)?;
    // An unreadable link table counts as "port present": GC must never remove a live check.
    let port_exists = |port: &str| host.find_link(port).map_or(true, |l| l.is_some());
    spoofcheck::gc(valid, port_exists)
        .map(|_| ())
        .map_err(errors::netfilter)
}

/// IPv6 link-local addresses (fe80::/10) never carry masquerade rules.
trait LinkLocal {
    fn is_unicast_link_local_compat(&self) -> bool;
}

impl LinkLocal for std::net::IpAddr {
    fn is_unicast_link_local_compat(&self) -> bool {
        match self {
            std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            std::net::IpAddr::V4(_) => false,
        }
    }
}
