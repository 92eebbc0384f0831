//! The `host-device` CNI plugin: moves an existing host interface into the container as
//! `CNI_IFNAME` (optionally addressed by IPAM) and, on DEL, back to the host under its original
//! name with its addresses, routes and up state.
//!
//! ADD, DEL, CHECK and GC are generic over netkit's kernel seam and attach's IPAM; the binary
//! runs them on the live kernel and the executed IPAM plugin.

mod moves;
#[cfg(test)]
mod tests;

use host_device::{config, error, find, state};

use attach::errors::Failures;
use attach::ipam::{ExecIpam, Ipam};
use attach::rollback::Rollback;
use attach::{check, configure, link};
use libcni::error::CniError;
use libcni::result::CniResult;
use libcni::skel::{CmdArgs, Plugin};
use netkit::{Kernel, Link, LiveKernel, Netlink};

use config::NetConf;
use error::HostDeviceError;
use find::Sysfs;

struct HostDevice;

/// ADD, undone when it fails.
fn add<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    sysfs: &Sysfs,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<CniResult, HostDeviceError> {
    let mut rb = Rollback::default();
    let outcome = add_steps(kernel, ipam, sysfs, args, conf, &mut rb).and_then(|r| {
        // An ADD whose result cannot be printed in the request's version must not stay.
        r.to_value(&args.cni_version)?;
        Ok(r)
    });
    match outcome {
        Ok(r) => {
            rb.disarm();
            Ok(r)
        }
        Err(e) => {
            rb.run("host-device");
            Err(e)
        }
    }
}

fn add_steps<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    sysfs: &Sysfs,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<CniResult, HostDeviceError> {
    let (netns, mut cont) = link::open_netns_with(kernel, &args.netns)?;
    let mut result = CniResult {
        cni_version: libcni::version::CURRENT.to_string(),
        ..Default::default()
    };
    if conf.dpdk {
        // Bound to a userspace driver: no netdev to move, nothing to address (as the reference).
        return Ok(result);
    }
    // IPAM (when set) runs while the device is found, saved and moved.
    let (moved, ipam_result) = ipam.add_alongside_if_set(args, &conf.ipam_type, 0, rb, |rb| {
        move_device_in(kernel, sysfs, &mut cont, &netns, args, conf, rb).map_err(CniError::from)
    })?;
    result.interfaces = vec![link::container_interface(&moved, &args.netns)];
    if let Some(ipam_result) = ipam_result {
        result.ips = ipam_result.ips;
        result.routes = ipam_result.routes;
        configure::configure_iface_with(kernel, &netns, &mut cont, &args.ifname, &result)?;
        result.dns = conf.dns.clone();
    }
    Ok(result)
}

/// Finds the device, saves its state and moves it into the container; each step registers
/// its undo.
fn move_device_in<K: Kernel>(
    kernel: &K,
    sysfs: &Sysfs,
    cont: &mut K::Socket,
    netns: &K::Ns,
    args: &CmdArgs,
    conf: &NetConf,
    rb: &mut Rollback,
) -> Result<Link, HostDeviceError> {
    let host_ns = kernel.current_netns()?;
    let mut host = kernel.socket()?;
    let dev = find::host_link(&mut host, sysfs, &conf.selector)?;
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
        state::remove(&undo_file).map_err(|e| e.to_string())
    });

    {
        // Registered first: a move that fails half-way is undone by move_in itself, and this
        // then gives the device its state back.
        let (kernel, netns_path, ifname, backup) = (
            kernel.clone(),
            args.netns.clone(),
            args.ifname.clone(),
            backup.clone(),
        );
        rb.push(
            format!("give {} back to the host", backup.device),
            move || {
                give_back(&kernel, &netns_path, &ifname, &backup)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        );
    }
    moves::move_in(&mut host, &host_ns, cont, netns, &dev, &args.ifname)
}

/// Moves `ifname` from the container netns at `netns_path` back to the host and restores its
/// state; when the container netns or the interface is gone, finds the device on the host by
/// its alias. `Ok(false)` when the device is nowhere to be found.
fn give_back<K: Kernel>(
    kernel: &K,
    netns_path: &str,
    ifname: &str,
    backup: &state::Backup,
) -> Result<bool, HostDeviceError> {
    let host_ns = kernel.current_netns()?;
    let mut host = kernel.socket()?;
    let mut moved = false;
    if !netns_path.is_empty() {
        match kernel.open_netns(netns_path) {
            Ok(netns) => {
                let mut cont = kernel.socket_in(&netns)?;
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
            Err(e) => return Err(e.into()),
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
fn give_back_by_alias<K: Kernel>(
    kernel: &K,
    netns_path: &str,
    ifname: &str,
) -> Result<(), HostDeviceError> {
    if netns_path.is_empty() {
        return Ok(());
    }
    let netns = match kernel.open_netns(netns_path) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut cont = kernel.socket_in(&netns)?;
    let Some(dev) = cont.find_link(ifname)? else {
        return Ok(());
    };
    let Some(original) = dev.alias.clone() else {
        return Err(HostDeviceError::NoAlias {
            ifname: ifname.to_string(),
        });
    };
    let host_ns = kernel.current_netns()?;
    let mut host = kernel.socket()?;
    moves::move_out(&mut cont, &netns, &mut host, &host_ns, ifname, &original).map(|_| ())
}

/// DEL: the device back to the host (with its saved state, or by its alias without one) while
/// IPAM releases; every step runs, the first failure is returned and the others go to stderr.
fn del<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), HostDeviceError> {
    let mut failures = Failures::default();
    // IPAM releases while the device goes back.
    let (released, ()) = ipam.call_alongside(args, &conf.ipam_type, "DEL", || {
        if conf.dpdk {
            return;
        }
        let file = state::path(&conf.data_dir, &args.container_id, &args.ifname);
        match state::load(&file) {
            // The file is named by (container, ifname), which one interface at a time holds:
            // the device goes back whatever network the DEL names, as the reference does.
            Some(backup) => {
                // Only a device given back (or lost for good) lets the state go.
                let given_back = give_back(kernel, &args.netns, &args.ifname, &backup);
                if failures.note(given_back.map_err(CniError::from)).is_some() {
                    failures.note(state::remove(&file).map_err(CniError::from));
                }
            }
            None => {
                let given_back = give_back_by_alias(kernel, &args.netns, &args.ifname);
                failures.note(given_back.map_err(CniError::from));
            }
        }
    });
    failures.note(released);
    failures
        .finish("host-device")
        .map_err(HostDeviceError::Delegated)
}

/// CHECK: IPAM, prevResult, and the container interface with its addresses and routes.
fn check<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), HostDeviceError> {
    if conf.dpdk {
        // No netdev: only IPAM and prevResult to check.
        link::open_netns_with(kernel, &args.netns)?;
        ipam.call_if_set(args, &conf.ipam_type, "CHECK")?;
        check::prev_result(args, "Required prevResult missing")?;
        return Ok(());
    }
    check::attachment_with(
        kernel,
        ipam,
        args,
        &conf.ipam_type,
        "Required prevResult missing",
        |_, _, _| Ok(()),
    )?;
    Ok(())
}

/// GC: IPAM GC, then the devices of attachments that are gone without a DEL: found on the host
/// (the kernel returned them when their netns died) by their alias, renamed back and given
/// their state; the state files go, and so do those of earlier boots.
fn gc<K: Kernel, I: Ipam>(
    kernel: &K,
    ipam: &I,
    args: &CmdArgs,
    conf: &NetConf,
) -> Result<(), HostDeviceError> {
    let valid = args.valid_attachments()?;
    let mut failures = Failures::default();
    failures.note(ipam.call_if_set(args, &conf.ipam_type, "GC"));
    for file in state::earlier_boots(&conf.data_dir) {
        failures.note(state::remove(&file).map_err(CniError::from));
    }
    for (file, backup) in state::stale(&conf.data_dir, &conf.network, &valid) {
        // The netns is gone: only the host side is looked at.
        let given_back = give_back(kernel, "", &backup.owner.ifname, &backup);
        if failures.note(given_back.map_err(CniError::from)).is_some() {
            failures.note(state::remove(&file).map_err(CniError::from));
        }
    }
    failures
        .finish("host-device")
        .map_err(HostDeviceError::Delegated)
}

impl Plugin for HostDevice {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        let sysfs = Sysfs::system();
        let conf = config::load(args, &sysfs)?;
        Ok(add(&LiveKernel, &ExecIpam, &sysfs, args, &conf)?)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        Ok(del(&LiveKernel, &ExecIpam, args, &conf)?)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load(args, &Sysfs::system())?;
        Ok(check(&LiveKernel, &ExecIpam, args, &conf)?)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        Ok(gc(&LiveKernel, &ExecIpam, args, &conf)?)
    }

    fn status(&self, args: &CmdArgs) -> Result<(), CniError> {
        let conf = config::load_lenient(args)?;
        ExecIpam.call_if_set(args, &conf.ipam_type, "STATUS")
    }
}

fn main() {
    libcni::skel::run(&HostDevice, "CNI host-device plugin (ferrocni)");
}
