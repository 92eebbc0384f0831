//! The `host-device` CNI plugin: moves an existing host interface into the container as
//! `CNI_IFNAME` (optionally addressed by IPAM) and, on DEL, back to the host under its original
//! name with its addresses, routes and up state.

mod config;
mod find;
mod moves;
mod state;

use attach::errors::{kernel, Failures};
use attach::rollback::{self, Rollback};
use attach::{check, configure, ipam, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::{Netns, Socket};

use config::NetConf;
use find::Sysfs;

struct HostDevice;

fn add_steps(args: &CmdArgs, conf: &NetConf, rb: &mut Rollback) -> Result<CniResult, CniError> {
    let (netns, mut cont) = link::open_netns(&args.netns)?;
    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        ..Default::default()
    };
    if conf.dpdk {
        // Bound to a userspace driver: no netdev to move, nothing to address (as the reference).
        return Ok(result);
    }
    // IPAM (when set) runs while the device is found, saved and moved.
    let (moved, ipam_result) = ipam::add_alongside_if_set(args, &conf.ipam_type, 0, rb, |rb| {
        let host_ns = Netns::current().map_err(kernel)?;
        let mut host = Socket::new().map_err(kernel)?;
        let dev = find::host_link(&mut host, &Sysfs::system(), &conf.selector)?;
        let owner = state::Owner {
            network: conf.network.clone(),
            container_id: args.container_id.clone(),
            ifname: args.ifname.clone(),
        };
        let backup = state::capture(&mut host, &dev, owner)?;
        let file = state::path(&conf.data_dir, &args.container_id, &args.ifname);
        state::save(&file, &backup)?;
        let undo_file = file.clone();
        rb.push("remove the saved state", move || {
            state::remove(&undo_file).map_err(|e| e.msg)
        });

        {
            // Registered first: a move that fails half-way is undone by move_in itself, and this
            // then gives the device its state back.
            let (netns_path, ifname, backup) =
                (args.netns.clone(), args.ifname.clone(), backup.clone());
            rb.push(
                format!("give {} back to the host", backup.device),
                move || {
                    give_back(&netns_path, &ifname, &backup)
                        .map(|_| ())
                        .map_err(|e| e.msg)
                },
            );
        }
        moves::move_in(&mut host, &host_ns, &mut cont, &netns, &dev, &args.ifname)
    })?;
    result.interfaces = vec![link::container_interface(&moved, &args.netns)];
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::configure_iface(&netns, &mut cont, &args.ifname, &result)?;
        result.dns = conf.dns.clone();
    }
    Ok(result)
}

/// Moves `ifname` from the container netns at `netns_path` back to the host and restores its
/// state; when the container netns or the interface is gone, finds the device on the host by
/// its alias. `Ok(false)` when the device is nowhere to be found.
fn give_back(netns_path: &str, ifname: &str, backup: &state::Backup) -> Result<bool, CniError> {
    let host_ns = Netns::current().map_err(kernel)?;
    let mut host = Socket::new().map_err(kernel)?;
    let mut moved = false;
    if !netns_path.is_empty() {
        match Netns::open(netns_path) {
            Ok(netns) => {
                let mut cont = Socket::open_in(&netns).map_err(kernel)?;
                moved = moves::move_out(
                    &mut cont,
                    &netns,
                    &mut host,
                    &host_ns,
                    ifname,
                    &backup.device,
                )?;
            }
            Err(e) if e.is_netns_not_found() => {}
            Err(e) => return Err(kernel(e)),
        }
    }
    if !moved && !moves::recover(&mut host, &backup.device)? {
        return Ok(false);
    }
    state::restore(&mut host, backup)?;
    Ok(true)
}

/// DEL of a device moved in by an ADD that left no saved state (the reference's, or one whose
/// state file was lost): its name is in its alias.
fn give_back_by_alias(netns_path: &str, ifname: &str) -> Result<(), CniError> {
    if netns_path.is_empty() {
        return Ok(());
    }
    let netns = match Netns::open(netns_path) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(kernel(e)),
    };
    let mut cont = Socket::open_in(&netns).map_err(kernel)?;
    let Some(dev) = cont.find_link(ifname).map_err(kernel)? else {
        return Ok(());
    };
    let Some(original) = dev.alias.clone() else {
        return Err(CniError::internal(format!(
            "failed to restore {ifname:?}: it has no alias naming its host device"
        )));
    };
    let host_ns = Netns::current().map_err(kernel)?;
    let mut host = Socket::new().map_err(kernel)?;
    moves::move_out(&mut cont, &netns, &mut host, &host_ns, ifname, &original).map(|_| ())
}

impl Plugin for HostDevice {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let conf = config::load(args, &Sysfs::system())?;
        rollback::guarded("host-device", |rb| {
            let r = add_steps(args, &conf, rb)?;
            r.to_value(&args.cni_version)?;
            Ok(r)
        })
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        let mut failures = Failures::default();
        // IPAM releases while the device goes back.
        let (ipam, ()) = ipam::call_alongside(args, &conf.ipam_type, "DEL", || {
            if conf.dpdk {
                return;
            }
            let file = state::path(&conf.data_dir, &args.container_id, &args.ifname);
            match state::load(&file) {
                Some(backup) => {
                    // Only a device given back (or lost for good) lets the state go.
                    if failures
                        .note(give_back(&args.netns, &args.ifname, &backup))
                        .is_some()
                    {
                        failures.note(state::remove(&file));
                    }
                }
                None => {
                    failures.note(give_back_by_alias(&args.netns, &args.ifname));
                }
            }
        });
        failures.note(ipam);
        failures.finish("host-device")
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args, &Sysfs::system())?;
        if conf.dpdk {
            // No netdev: only IPAM and prevResult to check.
            link::open_netns(&args.netns)?;
            ipam::call_if_set(args, &conf.ipam_type, "CHECK")?;
            return check::prev_result(args, "Required prevResult missing").map(|_| ());
        }
        check::attachment(
            args,
            &conf.ipam_type,
            "Required prevResult missing",
            |_, _, _| Ok(()),
        )
    }

    /// IPAM GC, then the devices of attachments that are gone without a DEL: found on the host
    /// (the kernel returned them when their netns died) by their alias, renamed back and given
    /// their state; the state files go.
    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        let valid = args.valid_attachments()?;
        let mut failures = Failures::default();
        failures.note(ipam::call_if_set(args, &conf.ipam_type, "GC"));
        for (file, backup) in state::stale(&conf.data_dir, &conf.network, &valid) {
            // The netns is gone: only the host side is looked at.
            if failures
                .note(give_back("", &backup.owner.ifname, &backup))
                .is_some()
            {
                failures.note(state::remove(&file));
            }
        }
        failures.finish("host-device")
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        ipam::call_if_set(args, &conf.ipam_type, "STATUS")
    }
}

fn main() {
    libcni::skel::run(&HostDevice, "CNI host-device plugin (ferrocni)");
}
