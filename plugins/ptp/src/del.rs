//! DEL and GC. DEL needs neither the netns nor prevResult: deleting the container end takes
//! the host end, its addresses and routes with it; IPAM releases by (container, ifname);
//! masquerade rules are found by (network, container, ifname).

use attach::errors::Failures;
use attach::ipam::Ipam;
use attach::link;
use libcni::error::CniError;
use libcni::skel::CmdArgs;
use netkit::Kernel;

use crate::config::NetConf;
use crate::error::PtpError;
use attach::netfilter::Netfilter;

/// Every step runs whatever the others did; the first failure is returned, the others go to
/// stderr.
pub fn del<K: Kernel, I: Ipam, F: Netfilter>(
    kernel: &K,
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), PtpError> {
    // The kernel takes tens of milliseconds to unregister the veth: IPAM and the masquerade
    // teardown run meanwhile.
    let (released, (link, unmasked)) = ipam.call_alongside(args, &conf.ipam_type, "DEL", || {
        std::thread::scope(|scope| {
            let unmasked = scope.spawn(|| teardown_masquerade(nf, args, conf));
            let link = link::delete_in_netns_with(kernel, &args.netns, &args.ifname);
            let unmasked = unmasked.join().unwrap_or(Err(PtpError::MasqueradePanicked));
            (link, unmasked)
        })
    });
    let mut failures = Failures::default();
    failures.note(link);
    failures.note(released);
    failures.note(unmasked.map_err(CniError::from));
    failures.finish("ptp").map_err(PtpError::Delegated)
}

fn teardown_masquerade<F: Netfilter>(
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), PtpError> {
    if conf.ip_masq {
        // The attachment's addresses and families, when prevResult tells.
        let (families, sources) = attach::netfilter::teardown_scope(args, &[]);
        nf.teardown_masquerade(
            &conf.network,
            &args.ifname,
            &args.container_id,
            &families,
            &sources,
        )?;
    }
    Ok(())
}

/// GC: IPAM GC, then the masquerade rules of this network's attachments that are not valid.
pub fn gc<I: Ipam, F: Netfilter>(
    ipam: &I,
    nf: &F,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), PtpError> {
    let valid = args.valid_attachments()?;
    let mut failures = Failures::default();
    failures.note(ipam.call_if_set(args, &conf.ipam_type, "GC"));
    if conf.ip_masq {
        failures.note(
            nf.gc_masquerade(&conf.network, &valid)
                .map_err(CniError::from),
        );
    }
    failures.finish("ptp").map_err(PtpError::Delegated)
}
