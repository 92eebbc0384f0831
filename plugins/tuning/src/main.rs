//! `tuning`: a chained CNI plugin that sets sysctls and link attributes on the container
//! interface, backs the original link values up and restores them on DEL.

mod link_settings;
mod sysctls;

use tuning::{backup, config, error};

use libcni::result::CniResult;
use libcni::skel::{self, CmdArgs, Plugin};
use libcni::CniError;
use netkit::{Netns, Socket};

use crate::config::Tuning;
use crate::error::TuningError;

struct TuningPlugin;

fn open_netns(path: &str) -> Result<Netns, TuningError> {
    Netns::open(path).map_err(|source| TuningError::OpenNetns {
        path: path.to_string(),
        source,
    })
}

fn require_prev_result(args: &CmdArgs) -> Result<CniResult, TuningError> {
    args.prev_result()?.ok_or(TuningError::MissingPrevResult)
}

/// Everything ADD does inside the container netns; undone on failure.
fn add_in_netns(args: &CmdArgs, tuning: &Tuning) -> Result<(), TuningError> {
    let previous_sysctls = sysctls::apply(&tuning.sysctls, &args.ifname)?;
    if !tuning.touches_link() {
        return Ok(());
    }
    let result = tune_link(args, tuning);
    if result.is_err() {
        sysctls::restore(&previous_sysctls);
    }
    result
}

fn tune_link(args: &CmdArgs, tuning: &Tuning) -> Result<(), TuningError> {
    let mut sock = Socket::new()?;
    let link = sock.link_by_name(&args.ifname)?;
    let path = backup::path(&tuning.data_dir, &args.container_id, &args.ifname);
    let existing = backup::load(&path)?;
    let fresh = link_settings::capture(&link, tuning);
    // Another network's backup holds another interface's originals, not this link's.
    let originals = existing
        .clone()
        .filter(|b| !b.belongs_to_other(&args.network_name));
    let mut saved = match originals {
        Some(older) => fresh.keep_originals_from(older),
        None => fresh,
    };
    saved.owner = Some(backup::Owner {
        network: args.network_name.clone(),
        container_id: args.container_id.clone(),
        ifname: args.ifname.clone(),
    });
    backup::store(&path, &saved)?;
    if let Err(e) = link_settings::apply(&mut sock, &link, tuning) {
        // Roll back to the originals; forget the backup only if this call created it.
        let _ = link_settings::restore(&mut sock, &link, &saved);
        match existing {
            Some(older) => backup::store(&path, &older)?,
            None => backup::remove(&path)?,
        }
        return Err(e);
    }
    Ok(())
}

/// The prevResult interface this call tuned: the one named CNI_IFNAME inside a sandbox,
/// else any one named CNI_IFNAME.
fn update_result_mac(result: &mut CniResult, ifname: &str, mac: &[u8; 6]) {
    let text = netkit::link::format_mac(mac);
    let in_sandbox = result
        .interfaces
        .iter()
        .any(|i| i.name == ifname && !i.sandbox.is_empty());
    for iface in result.interfaces.iter_mut() {
        if iface.name == ifname && (!in_sandbox || !iface.sandbox.is_empty()) {
            iface.mac = text.clone();
        }
    }
}

fn add(args: &CmdArgs) -> Result<CniResult, TuningError> {
    let tuning = config::parse(args)?;
    sysctls::enforce_allowlist(&tuning.sysctls)?;
    let mut result = require_prev_result(args)?;
    let ns = open_netns(&args.netns)?;
    ns.run(|| add_in_netns(args, &tuning))??;
    if let Some(mac) = &tuning.mac {
        update_result_mac(&mut result, &args.ifname, mac);
    }
    Ok(result)
}

fn del(args: &CmdArgs) -> Result<(), TuningError> {
    let tuning = config::parse(args)?;
    let path = backup::path(&tuning.data_dir, &args.container_id, &args.ifname);
    let Some(saved) = backup::load(&path).unwrap_or_else(|e| {
        eprintln!("tuning: ignoring unreadable backup: {e}");
        None
    }) else {
        return backup::remove(&path).or(Ok(()));
    };
    // The file is this container interface's whatever network the DEL names (a container has
    // one interface of a name): restored as the reference does, even when the runtime or an
    // operator renamed the network since ADD.
    // Restoring is best effort: the netns or the interface may already be gone.
    if !args.netns.is_empty() {
        match Netns::open(&args.netns) {
            Ok(ns) => {
                let restored = ns.run(|| -> Result<(), TuningError> {
                    let mut sock = Socket::new()?;
                    match sock.find_link(&args.ifname)? {
                        Some(link) => link_settings::restore(&mut sock, &link, &saved),
                        None => Ok(()),
                    }
                });
                match restored {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => eprintln!("tuning: failed to restore {}: {e}", args.ifname),
                    Err(e) => eprintln!("tuning: failed to enter netns {:?}: {e}", args.netns),
                }
            }
            Err(e) if e.is_netns_not_found() => {}
            Err(e) => eprintln!("tuning: {e}"),
        }
    }
    if let Err(e) = backup::remove(&path) {
        eprintln!("tuning: {e}");
    }
    Ok(())
}

/// Removes the backups of this network's attachments that are no longer valid: their pod
/// went away without a DEL, so there is nothing left to restore.
fn gc(args: &CmdArgs) -> Result<(), TuningError> {
    let tuning = config::parse(args)?;
    backup::gc(
        &tuning.data_dir,
        &args.network_name,
        &args.valid_attachments()?,
    )
    .map(|_| ())
}

fn check(args: &CmdArgs) -> Result<(), TuningError> {
    let tuning = config::parse(args)?;
    require_prev_result(args)?;
    let ns = open_netns(&args.netns)?;
    ns.run(|| -> Result<(), TuningError> {
        sysctls::verify(&tuning.sysctls, &args.ifname)?;
        let mut sock = Socket::new()?;
        let link = sock.link_by_name(&args.ifname)?;
        link_settings::verify(&link, &tuning)
    })?
}

impl Plugin for TuningPlugin {
    fn add(&self, args: &CmdArgs) -> Result<CniResult, CniError> {
        add(args).map_err(Into::into)
    }

    fn del(&self, args: &CmdArgs) -> Result<(), CniError> {
        del(args).map_err(Into::into)
    }

    fn check(&self, args: &CmdArgs) -> Result<(), CniError> {
        check(args).map_err(Into::into)
    }

    fn gc(&self, args: &CmdArgs) -> Result<(), CniError> {
        gc(args).map_err(Into::into)
    }
}

fn main() {
    skel::run(&TuningPlugin, "CNI tuning plugin (ferrocni)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use libcni::result::Interface;

    #[test]
    fn mac_updates_the_sandbox_interface_only() {
        let iface = |name: &str, sandbox: &str| Interface {
            name: name.into(),
            mac: "00:00:00:00:00:01".into(),
            sandbox: sandbox.into(),
            ..Default::default()
        };
        let mut r = CniResult {
            interfaces: vec![
                iface("eth0", ""),
                iface("vethx", ""),
                iface("eth0", "/run/netns/x"),
            ],
            ..Default::default()
        };
        update_result_mac(&mut r, "eth0", &[2, 0, 0, 0, 0, 9]);
        assert_eq!(r.interfaces[0].mac, "00:00:00:00:00:01");
        assert_eq!(r.interfaces[1].mac, "00:00:00:00:00:01");
        assert_eq!(r.interfaces[2].mac, "02:00:00:00:00:09");
    }
}
