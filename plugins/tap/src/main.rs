//! The `tap` CNI plugin: a persistent tap device named `CNI_IFNAME` in the container netns
//! (for a VM in the pod to attach to), with its MAC, MTU, queues, owner and group, optionally a
//! port of a bridge inside the container, addressed by IPAM or left layer 2.

mod config;

use attach::errors::{kernel, kernel_ctx};
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::tap::{create_tap, TapSpec};
use netkit::Link;

use config::NetConf;

struct Tap;

fn add_steps(args: &CmdArgs, conf: &NetConf, rb: &mut Rollback) -> Result<CniResult, CniError> {
    let (netns, mut cont) = link::open_netns(&args.netns)?;
    if !conf.selinux_context.is_empty() {
        eprintln!(
            "tap: selinuxContext {:?} is left to the host's policy (not applied)",
            conf.selinux_context
        );
    }
    // IPAM (when set) runs while the tap is made and set up.
    let (tap, ipam_result) = ipam::add_alongside_if_set(args, &conf.ipam_type, 0, rb, |rb| {
        let created = link::create_renamed(&mut cont, &args.ifname, "tap", |_, tmp| {
            let vnet_hdr = conf.vnet_hdr();
            create_tap(
                &netns,
                &TapSpec {
                    name: tmp,
                    multi_queue: conf.multi_queue,
                    vnet_hdr,
                    packet_info: vnet_hdr && !conf.multi_queue,
                    owner: conf.owner,
                    group: conf.group,
                },
            )
        })?;
        link::undo_delete(rb, &netns, &args.ifname);
        let index = created.index;
        if let Some(mtu) = conf.mtu {
            cont.set_link_mtu(index, mtu).map_err(kernel)?;
        }
        if let Some(mac) = conf.mac {
            cont.set_link_mac(index, &mac).map_err(kernel)?;
        }
        if !conf.bridge.is_empty() {
            let br = cont
                .link_by_name(&conf.bridge)
                .map_err(|e| kernel_ctx(e, format!("failed to get bridge {}", conf.bridge)))?;
            cont.set_link_master(index, br.index).map_err(|e| {
                kernel_ctx(
                    e,
                    format!(
                        "failed to set tap {} as a port of bridge {}",
                        args.ifname, conf.bridge
                    ),
                )
            })?;
        }
        cont.set_link_up(index)
            .map_err(|e| kernel_ctx(e, "failed to set tap interface up"))?;
        cont.link_by_index(index).map_err(kernel)
    })?;

    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![link::container_interface(&tap, &args.netns)],
        ..Default::default()
    };
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::announce_addresses(&netns, &args.ifname, false);
        configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
    }
    result.dns = conf.dns.clone();
    Ok(result)
}

/// The container interface is a tap device (the reference checks only its addressing).
fn check_tap(l: &Link) -> Result<(), CniError> {
    if l.is_kind("tun") {
        Ok(())
    } else {
        Err(CniError::internal(format!(
            "Error: Container interface {} not of type tap",
            l.name
        )))
    }
}

impl Plugin for Tap {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        rollback::guarded("tap", |rb| {
            let r = add_steps(args, &conf, rb)?;
            r.to_value(&args.cni_version)?;
            Ok(r)
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        link::del_with_ipam(args, &config::load(args)?.ipam_type, "tap")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        check::attachment(
            args,
            &conf.ipam_type,
            "Required prevResult missing",
            |_, l, _| check_tap(l),
        )
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "STATUS")
    }
}

fn main() {
    libcni::skel::run(&Tap, "CNI tap plugin (ferrocni)");
}
