//! Moving the device into the container (renamed to `CNI_IFNAME`, its host name kept in its
//! alias as the reference does) and back out under its original name. A name clash on either
//! side never strands the device: each half-done move is undone.

use attach::errors::{kernel, kernel_ctx};
use attach::link::random_veth_name;
use libcni::error::CniError;
use netkit::{Link, Netns, Socket};

/// Moves `dev` (a host link) into `netns` as `ifname`, up.
pub fn move_in(
    host: &mut Socket,
    host_ns: &Netns,
    cont: &mut Socket,
    netns: &Netns,
    dev: &Link,
    ifname: &str,
) -> Result<Link, CniError> {
    // Devices can be renamed only when down.
    host.set_link_down(dev.index)
        .map_err(|e| kernel_ctx(e, format!("failed to set {:?} down", dev.name)))?;
    let restore_up = |host: &mut Socket| {
        if dev.is_up() {
            let _ = host.set_link_up(dev.index);
        }
    };
    if let Err(e) = host.move_link(dev.index, netns) {
        restore_up(host);
        return Err(kernel_ctx(e, "failed to move link"));
    }
    let moved = cont.link_by_name(&dev.name).map_err(kernel)?;
    let renamed = cont
        .set_link_alias(moved.index, &dev.name)
        .and_then(|_| cont.set_link_name(moved.index, ifname));
    if let Err(e) = renamed {
        // Back to the host under its own name (it still has it).
        if cont.move_link(moved.index, host_ns).is_ok() {
            if let Ok(back) = host.link_by_name(&dev.name) {
                if dev.is_up() {
                    let _ = host.set_link_up(back.index);
                }
            }
        }
        return Err(kernel_ctx(
            e,
            format!("failed to rename device {:?} to {ifname:?}", dev.name),
        ));
    }
    cont.set_link_up(moved.index)
        .map_err(|e| kernel_ctx(e, format!("failed to set {ifname:?} up")))?;
    cont.link_by_name(ifname).map_err(kernel)
}

/// Moves `ifname` out of the container back to the host as `original`, through a temporary
/// name so that neither side's names clash. `Ok(false)` when `ifname` is not in the container,
/// or is not the device (its alias, set by the move in, names another device or none).
pub fn move_out(
    cont: &mut Socket,
    netns: &Netns,
    host: &mut Socket,
    host_ns: &Netns,
    ifname: &str,
    original: &str,
) -> Result<bool, CniError> {
    let Some(dev) = cont.find_link(ifname).map_err(kernel)? else {
        return Ok(false);
    };
    if dev.alias.as_deref() != Some(original) {
        return Ok(false);
    }
    cont.set_link_down(dev.index)
        .map_err(|e| kernel_ctx(e, format!("failed to set {ifname:?} down")))?;
    let tmp = random_veth_name()?;
    // Undo: the device back as `ifname`, up as it was, so DEL can be retried.
    let back_in_container = |cont: &mut Socket| {
        if let Ok(Some(l)) = cont.find_link(&tmp) {
            let _ = cont.set_link_name(l.index, ifname);
        }
        if let Ok(Some(l)) = cont.find_link(ifname) {
            if dev.is_up() {
                let _ = cont.set_link_up(l.index);
            }
        }
    };
    if let Err(e) = cont.set_link_name(dev.index, &tmp) {
        back_in_container(cont);
        return Err(kernel_ctx(e, format!("failed to rename {ifname:?}")));
    }
    if let Err(e) = cont.move_link(dev.index, host_ns) {
        back_in_container(cont);
        return Err(kernel_ctx(
            e,
            format!("failed to move {original:?} to host netns"),
        ));
    }
    let in_host = host.link_by_name(&tmp).map_err(kernel)?;
    if let Err(e) = host.set_link_name(in_host.index, original) {
        if host.move_link(in_host.index, netns).is_ok() {
            back_in_container(cont);
        }
        return Err(kernel_ctx(
            e,
            format!("failed to restore {ifname:?} to original name {original:?}"),
        ));
    }
    Ok(true)
}

/// A device back on the host without a move out of ours: under its original name (a failed
/// ADD put it back), or renamed (the kernel returns physical devices when their netns is
/// destroyed, under another name when their container name is taken) and then found by its
/// alias, the original name, and renamed back. `Ok(false)` when there is none.
pub fn recover(host: &mut Socket, original: &str) -> Result<bool, CniError> {
    let links = host.links().map_err(kernel)?;
    if links.iter().any(|l| l.name == original) {
        return Ok(true);
    }
    let Some(dev) = links
        .iter()
        .find(|l| l.alias.as_deref() == Some(original) && l.name != original)
    else {
        return Ok(false);
    };
    host.set_link_down(dev.index).map_err(kernel)?;
    host.set_link_name(dev.index, original).map_err(|e| {
        kernel_ctx(
            e,
            format!(
                "failed to restore {:?} to original name {original:?}",
                dev.name
            ),
        )
    })?;
    Ok(true)
}
