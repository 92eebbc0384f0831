//! The `macvlan` CNI plugin: a macvlan link on a host interface (the master), renamed to
//! `CNI_IFNAME` inside the container, addressed by IPAM or left layer 2.

mod config;

use attach::errors::kernel;
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::link_kinds::{macvlan_mode, MacvlanSpec, NewLinkBase};
use netkit::{Link, Socket};

use config::NetConf;

struct Macvlan;

/// The master, looked up where it lives, with the MTU checked against it.
fn master(conf: &NetConf, host: &mut Socket, cont: &mut Socket) -> Result<Link, CniError> {
    link::master_checked(
        host,
        cont,
        conf.link_in_container,
        &conf.master,
        conf.requested_mtu,
    )
}

fn add_steps(args: &CmdArgs, conf: &NetConf, rb: &mut Rollback) -> Result<CniResult, CniError> {
    let mut host = Socket::new().map_err(kernel)?;
    let (netns, mut cont) = link::open_netns(&args.netns)?;
    let parent = master(conf, &mut host, &mut cont)?;
    let make_link = |rb: &mut Rollback| {
        let created = link::create_renamed(&mut cont, &args.ifname, "macvlan", |cont, tmp| {
            let spec = MacvlanSpec {
                base: NewLinkBase {
                    name: tmp,
                    parent: Some(parent.index),
                    netns: (!conf.link_in_container).then_some(&netns),
                    mtu: conf.mtu,
                    mac: conf.mac,
                },
                mode: conf.mode,
                bc_queue_len: conf.bc_queue_len,
            };
            if conf.link_in_container {
                cont.create_macvlan(&spec)
            } else {
                host.create_macvlan(&spec)
            }
        })?;
        link::undo_delete(rb, &netns, &args.ifname);
        Ok(created)
    };
    let (created, ipam_result) =
        ipam::add_alongside_if_set(args, &conf.ipam_type, 0, rb, make_link)?;

    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        interfaces: vec![link::container_interface(&created, &args.netns)],
        ..Default::default()
    };
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::announce_addresses(&netns, &args.ifname, true);
        configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
    } else {
        cont.set_link_up(created.index).map_err(|e| {
            attach::errors::kernel_ctx(e, format!("failed to set {:?} UP", args.ifname))
        })?;
    }
    // As the reference: the config's DNS, not IPAM's.
    result.dns = conf.dns.clone();
    Ok(result)
}

impl Plugin for Macvlan {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args)?;
        rollback::guarded("macvlan", |rb| {
            let r = add_steps(args, &conf, rb)?;
            r.to_value(&args.cni_version)?;
            Ok(r)
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        link::del_with_ipam(args, &config::load(args)?.ipam_type, "macvlan")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        check::attachment(
            args,
            &conf.ipam_type,
            "Required prevResult missing",
            |cont, l, _| {
                let mut host = Socket::new().map_err(kernel)?;
                master(&conf, &mut host, cont)?;
                let Some(mode) = macvlan_mode(l) else {
                    return Err(CniError::internal(format!(
                        "Error: Container interface {} not of type macvlan",
                        l.name
                    )));
                };
                if mode != conf.mode {
                    return Err(CniError::internal(format!(
                        "Container macvlan mode {} does not match expected value: {}",
                        config::mode_name(mode),
                        config::mode_name(conf.mode)
                    )));
                }
                Ok(())
            },
        )
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "GC")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "STATUS")?;
        link::master_status("macvlan", conf.link_in_container, &conf.master)
    }
}

fn main() {
    libcni::skel::run(&Macvlan, "CNI macvlan plugin (ferrocni)");
}
