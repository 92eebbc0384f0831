//! DEL and GC. DEL needs neither the netns nor prevResult: deleting the container end takes
//! the host end, its addresses and routes with it; IPAM releases by (container, ifname);
//! masquerade rules are found by (network, container, ifname).

use attach::errors::Failures;
use attach::{ipam, link};
use libcni::error::CniError;
use libcni::skel::CmdArgs;
use netkit::netfilter::ipmasq;
use netkit::netfilter::iptables::Family;

use crate::config::NetConf;

pub fn del(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    // The kernel takes tens of milliseconds to unregister the veth: IPAM and the masquerade
    // teardown run meanwhile.
    let (ipam, (link, masq)) = ipam::call_alongside(args, &conf.ipam_type, "DEL", || {
        std::thread::scope(|scope| {
            let masq = scope.spawn(|| teardown_masquerade(args, conf));
            let link = link::delete_in_netns(&args.netns, &args.ifname);
            let masq = masq
                .join()
                .unwrap_or_else(|_| Err(CniError::internal("masquerade teardown failed")));
            (link, masq)
        })
    });
    let mut failures = Failures::default();
    failures.note(link);
    failures.note(ipam);
    failures.note(masq);
    failures.finish("ptp")
}

fn teardown_masquerade(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    if conf.ip_masq {
        // The families of the attachment, when prevResult tells; both otherwise.
        let mut families: Vec<Family> = Vec::new();
        if let Ok(Some(prev)) = args.prev_result() {
            for ip in &prev.ips {
                let f = Family::of(&ip.address.ip());
                if !families.contains(&f) {
                    families.push(f);
                }
            }
        }
        if families.is_empty() {
            families = vec![Family::V4, Family::V6];
        }
        return ipmasq::teardown_families(
            &conf.network,
            &args.ifname,
            &args.container_id,
            &families,
        )
        .map_err(|e| CniError::internal(e.to_string()));
    }
    Ok(())
}

/// GC: IPAM GC, then the masquerade rules of this network's attachments that are not valid.
pub fn gc(args: &CmdArgs, conf: &NetConf) -> Result<(), CniError> {
    let valid = args.valid_attachments()?;
    let mut failures = Failures::default();
    failures.note(ipam::call_if_set(args, &conf.ipam_type, "GC"));
    if conf.ip_masq {
        failures
            .note(ipmasq::gc(&conf.network, &valid).map_err(|e| CniError::internal(e.to_string())));
    }
    failures.finish("ptp")
}
