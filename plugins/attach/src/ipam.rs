//! Delegation to the configured IPAM plugin (Go `ipam.ExecAdd` & co.).
//!
//! The delegate gets our whole environment with the `CNI_*` variables of this call, set from
//! the call's arguments rather than inherited, so the plugin logic depends on nothing but its
//! [`CmdArgs`] (and can be driven in-process by tests).

use std::path::PathBuf;

use libcni::error::CniError;
use libcni::invoke;
use libcni::result::CniResult;
use libcni::skel::CmdArgs;

use crate::rollback::Rollback;

fn env(args: &CmdArgs, command: &str) -> Vec<(String, String)> {
    vec![
        ("CNI_COMMAND".into(), command.into()),
        ("CNI_CONTAINERID".into(), args.container_id.clone()),
        ("CNI_NETNS".into(), args.netns.clone()),
        ("CNI_IFNAME".into(), args.ifname.clone()),
        ("CNI_ARGS".into(), args.args.clone()),
        ("CNI_PATH".into(), args.path.join(":")),
    ]
}

fn plugin(args: &CmdArgs, ipam_type: &str) -> Result<PathBuf, CniError> {
    let paths: Vec<PathBuf> = args.path.iter().map(PathBuf::from).collect();
    invoke::find_in_path(ipam_type, &paths)
}

/// IPAM ADD: the delegate's result in the current shape.
pub fn add(args: &CmdArgs, ipam_type: &str) -> Result<CniResult, CniError> {
    let bin = plugin(args, ipam_type)?;
    let value = invoke::exec_plugin_with_result(&bin, &args.stdin, &env(args, "ADD"))?;
    CniResult::from_value(&value)
}

/// IPAM DEL, CHECK, GC or STATUS.
pub fn call(args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
    let bin = plugin(args, ipam_type)?;
    invoke::exec_plugin_without_result(&bin, &args.stdin, &env(args, command))
}

/// IPAM ADD that registers the IPAM DEL undoing it, refuses a result without IPs (the
/// reference's "IPAM plugin returned missing IP config") and points every IP at interface
/// `iface` of the plugin's result.
pub fn add_for_interface(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
) -> Result<CniResult, CniError> {
    let mut result = add(args, ipam_type)?;
    let undo_args = args.clone();
    let undo_type = ipam_type.to_string();
    rollback.push(format!("IPAM DEL ({ipam_type})"), move || {
        call(&undo_args, &undo_type, "DEL").map_err(|e| e.to_string())
    });
    if result.ips.is_empty() {
        return Err(CniError::internal("IPAM plugin returned missing IP config"));
    }
    for ip in &mut result.ips {
        ip.interface = Some(iface);
    }
    Ok(result)
}

/// IPAM plugins that never touch the container's interface, so they may run while the link is
/// being created or deleted. Others may need the link: dhcp's daemon sends DISCOVER through it
/// on ADD and RELEASE on DEL, and an unknown IPAM plugin may do the same. Those run in the
/// reference's order: link, then IPAM on ADD; IPAM, then link on DEL.
fn independent_of_the_link(ipam_type: &str) -> bool {
    matches!(ipam_type, "host-local" | "static")
}

/// [`add_for_interface`] running while `work` does (on this thread: it may enter
/// namespaces) what does not depend on the addresses, typically creating the link: the IPAM
/// plugin's exec and file locking overlap the kernel work. IPAM plugins that may need the link
/// run after `work` instead. The IPAM DEL undo is registered whenever IPAM succeeded, also
/// when `work` failed.
pub fn add_alongside<T>(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
    work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
) -> Result<(T, CniResult), CniError> {
    let (worked, ipam) = if independent_of_the_link(ipam_type) {
        std::thread::scope(|scope| {
            // Spawned from this thread, the delegate runs in its netns (the host's).
            let delegate = scope.spawn(|| add(args, ipam_type));
            let worked = work(rollback);
            let ipam = delegate
                .join()
                .unwrap_or_else(|_| Err(CniError::internal("IPAM delegation failed")));
            (worked, ipam)
        })
    } else {
        let worked = work(rollback);
        match worked {
            Ok(w) => (Ok(w), add(args, ipam_type)),
            Err(e) => return Err(e),
        }
    };
    let mut result = match ipam {
        Ok(r) => {
            let undo_args = args.clone();
            let undo_type = ipam_type.to_string();
            rollback.push(format!("IPAM DEL ({ipam_type})"), move || {
                call(&undo_args, &undo_type, "DEL").map_err(|e| e.to_string())
            });
            r
        }
        Err(e) => {
            worked?;
            return Err(e);
        }
    };
    let worked = worked?;
    if result.ips.is_empty() {
        return Err(CniError::internal("IPAM plugin returned missing IP config"));
    }
    for ip in &mut result.ips {
        ip.interface = Some(iface);
    }
    Ok((worked, result))
}

/// [`add_alongside`] when an IPAM plugin is configured, `work` alone otherwise.
pub fn add_alongside_if_set<T>(
    args: &CmdArgs,
    ipam_type: &str,
    iface: usize,
    rollback: &mut Rollback,
    work: impl FnOnce(&mut Rollback) -> Result<T, CniError>,
) -> Result<(T, Option<CniResult>), CniError> {
    if ipam_type.is_empty() {
        return Ok((work(rollback)?, None));
    }
    add_alongside(args, ipam_type, iface, rollback, work).map(|(t, r)| (t, Some(r)))
}

/// IPAM `command` (typically DEL) when an IPAM plugin is configured, running while `work`
/// does (or before it, for IPAM plugins that may need the link); both outcomes are returned.
pub fn call_alongside<T>(
    args: &CmdArgs,
    ipam_type: &str,
    command: &str,
    work: impl FnOnce() -> T,
) -> (Result<(), CniError>, T) {
    if ipam_type.is_empty() {
        return (Ok(()), work());
    }
    if !independent_of_the_link(ipam_type) {
        let ipam = call(args, ipam_type, command);
        return (ipam, work());
    }
    std::thread::scope(|scope| {
        let delegate = scope.spawn(|| call(args, ipam_type, command));
        let worked = work();
        let ipam = delegate
            .join()
            .unwrap_or_else(|_| Err(CniError::internal("IPAM delegation failed")));
        (ipam, worked)
    })
}

/// The verb passed on when an IPAM plugin is configured; nothing otherwise.
pub fn call_if_set(args: &CmdArgs, ipam_type: &str, command: &str) -> Result<(), CniError> {
    if ipam_type.is_empty() {
        Ok(())
    } else {
        call(args, ipam_type, command)
    }
}
