//! DEL and GC. DEL is idempotent and never needs the netns or the addresses: IPAM is released
//! by (container, ifname), masquerade rules are found by (network, container), spoof-check
//! chains by (container, ifname). So nothing leaks when CNI_NETNS is empty or already gone.

use std::net::IpAddr;

use attach::errors::Failures;
use attach::ipam::Ipam;
use libcni::error::CniError;
use libcni::skel::CmdArgs;
use netkit::netfilter::{spoofcheck, spoofcheck::SpoofChecker};
use netkit::{Kernel, Netlink, Socket};

use crate::config::NetConf;
use crate::error::BridgeError;
use attach::netfilter::Netfilter;

/// Keeps going after a failure: every step is tried, the first failure is returned and the
/// others go to stderr.
pub fn del<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), BridgeError> {
    // The IPAM release runs alongside the veth deletion, the kernel's slowest step (the
    // unregistration waits for RCU grace periods): the DEL then takes about the deletion alone.
    // The two are independent (IPAM releases by container and ifname); dhcp, which may need
    // the link to release its lease, is released before the deletion instead.
    let (ipam, (addresses, link)) = ipam.call_alongside(args, &conf.ipam_type, "DEL", || {
        delete_container_end(kernel, args, conf)
    });

    let mut failures = Failures::default();
    failures.note(link.map_err(CniError::from));
    failures.note(ipam);

    if conf.macspoofchk {
        let sc = SpoofChecker::new(
            "",
            "",
            &SpoofChecker::ref_id_for(&args.container_id, &args.ifname),
        );
        if let Err(e) = nf.remove_spoof_check(&sc) {
            // As in the reference: a spoof-check leftover must not block the DEL.
            eprintln!("bridge: {e}");
        }
    }

    // Masquerade exists only for layer-3 configs (as in the reference).
    if conf.ip_masq && conf.is_layer3() {
        let (families, sources) = attach::netfilter::teardown_scope(args, &addresses);
        failures.note(
            nf.teardown_masquerade(
                &conf.network,
                &args.ifname,
                &args.container_id,
                &families,
                &sources,
            )
            .map_err(|e| CniError::from(BridgeError::from(e))),
        );
    }
    Ok(failures.finish("bridge")?)
}

/// Deletes the container end of the veth, which takes the host end (and its bridge port)
/// with it; an empty CNI_NETNS, a netns or a link that is gone are fine. Returns, with the
/// outcome, the addresses the link had when masquerade needs to know its families.
fn delete_container_end<K: Kernel>(
    kernel: &K,
    args: &CmdArgs,
    conf: &NetConf,
) -> (Vec<IpAddr>, Result<(), BridgeError>) {
    let mut addresses = Vec::new();
    if args.netns.is_empty() {
        return (addresses, Ok(()));
    }
    let ns = match kernel.open_netns(&args.netns) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return (addresses, Ok(())),
        Err(e) => return (addresses, Err(e.into())),
    };
    let deleted = kernel.socket_in(&ns).and_then(|mut s| {
        if conf.ip_masq && conf.is_layer3() {
            if let Some(link) = s.find_link(&args.ifname)? {
                for a in s.addresses(Some(link.index), netkit::Family::Any)? {
                    if !a.ip().is_unicast_link_local_compat() {
                        addresses.push(a.ip());
                    }
                }
            }
        }
        s.delete_link_by_name(&args.ifname)
    });
    (addresses, deleted.map(|_| ()).map_err(BridgeError::from))
}

/// GC: forwards to IPAM, then removes the masquerade rules and spoof checks of attachments
/// not in the valid list. Keeps going after a failure like DEL.
pub fn gc<F: Netfilter>(nf: &F, args: &CmdArgs, conf: &NetConf) -> Result<(), BridgeError> {
    let valid = args.valid_attachments()?;
    let mut failures = Failures::default();
    failures.note(attach::ipam::call_if_set(args, &conf.ipam_type, "GC"));
    if conf.ip_masq {
        failures.note(
            nf.gc_masquerade(&conf.network, &valid)
                .map_err(|e| BridgeError::from(e).into()),
        );
    }
    if conf.macspoofchk {
        failures.note(gc_spoof_checks(&valid));
    }
    Ok(failures.finish("bridge")?)
}

/// Spoof checks whose bridge port is gone and whose attachment is not valid: a pod removed
/// without DEL leaves them behind, and nothing else ever would remove them.
fn gc_spoof_checks(valid: &[(String, String)]) -> Result<(), CniError> {
    let mut host = Socket::new().map_err(|e| CniError::from(BridgeError::from(e)))?;
    // An unreadable link table counts as "port present": GC must never remove a live check.
    let port_exists = |port: &str| host.find_link(port).map_or(true, |l| l.is_some());
    spoofcheck::gc(valid, port_exists)
        .map(|_| ())
        .map_err(|e| BridgeError::from(e).into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_addresses_carry_no_masquerade() {
        let ll: IpAddr = "fe80::1".parse().unwrap();
        let global: IpAddr = "fd00::1".parse().unwrap();
        let v4: IpAddr = "169.254.0.1".parse().unwrap();
        assert!(ll.is_unicast_link_local_compat());
        assert!(!global.is_unicast_link_local_compat());
        assert!(!v4.is_unicast_link_local_compat());
    }

    #[test]
    fn del_without_netns_ipam_or_netfilter_has_nothing_to_do() {
        let args = attach::testing::cmd_args(serde_json::json!({"bridge": "br9"}), "");
        let conf = crate::config::load(&args).unwrap();
        let ok = del(
            &netkit::LiveKernel,
            &attach::ipam::ExecIpam,
            &attach::netfilter::LiveNetfilter,
            &args,
            &conf,
        );
        assert!(ok.is_ok());
    }
}
