//! Moving the device into the container (renamed to `CNI_IFNAME`, its host name kept in its
//! alias as the reference does) and back out under its original name. Both ways it crosses
//! under a temporary name, as the reference does, so a link of the same name on the other side
//! does not stop the move. A name clash on either side never strands the device: each
//! half-done move is undone.

use netkit::{Link, Netlink};

use crate::error::HostDeviceError;

/// The name a device carries while it crosses between namespaces, as the reference names it
/// (`temp_<ifindex>`): neither its host name nor `CNI_IFNAME` can clash on the other side.
pub fn temp_name(index: u32) -> String {
    format!("temp_{index}")
}

/// Moves `dev` (a host link) into `netns` as `ifname`, up. It crosses under a temporary name,
/// so a container link that already has the device's host name is no obstacle.
pub fn move_in<S: Netlink>(
    host: &mut S,
    host_ns: &S::Ns,
    cont: &mut S,
    netns: &S::Ns,
    dev: &Link,
    ifname: &str,
) -> Result<Link, HostDeviceError> {
    // Devices can be renamed only when down.
    host.set_link_down(dev.index)
        .map_err(|source| HostDeviceError::SetDown {
            name: dev.name.clone(),
            source,
        })?;
    // Undo on the host: the original name back (it may still be under the temporary one), up
    // as it was.
    let restore_on_host = |host: &mut S| {
        if let Ok(Some(l)) = host.find_link(&temp_name(dev.index)) {
            let _ = host.set_link_name(l.index, &dev.name);
        }
        if dev.is_up() {
            if let Ok(Some(l)) = host.find_link(&dev.name) {
                let _ = host.set_link_up(l.index);
            }
        }
    };
    let tmp = temp_name(dev.index);
    if let Err(source) = host.set_link_name(dev.index, &tmp) {
        restore_on_host(host);
        return Err(HostDeviceError::RenameToTemp {
            name: dev.name.clone(),
            temp: tmp,
            source,
        });
    }
    if let Err(source) = host.move_link(dev.index, netns) {
        restore_on_host(host);
        return Err(HostDeviceError::MoveIn { temp: tmp, source });
    }
    // Back to the host (under the temporary name, which cannot clash there) and then under
    // its own name, up as it was.
    let back_to_host = |cont: &mut S, host: &mut S, index: u32| {
        if cont.move_link(index, host_ns).is_ok() {
            if let Ok(back) = host.link_by_name(&tmp) {
                let _ = host.set_link_name(back.index, &dev.name);
                if dev.is_up() {
                    let _ = host.set_link_up(back.index);
                }
            }
        }
    };
    // The kernel keeps the index when it is free in the target netns; look up by name anyway.
    let moved = match cont.link_by_name(&tmp) {
        Ok(l) => l,
        Err(source) => {
            let index = match cont.find_link(&tmp) {
                Ok(Some(l)) => l.index,
                _ => dev.index,
            };
            back_to_host(cont, host, index);
            return Err(HostDeviceError::FindMoved { temp: tmp, source });
        }
    };
    let renamed = cont
        .set_link_alias(moved.index, &dev.name)
        .and_then(|_| cont.set_link_name(moved.index, ifname));
    if let Err(source) = renamed {
        back_to_host(cont, host, moved.index);
        return Err(HostDeviceError::RenameInContainer {
            temp: tmp,
            ifname: ifname.to_string(),
            source,
        });
    }
    cont.set_link_up(moved.index)
        .map_err(|source| HostDeviceError::SetUp {
            name: ifname.to_string(),
            source,
        })?;
    Ok(cont.link_by_name(ifname)?)
}

/// Moves `ifname` out of the container back to the host as `original`, through the temporary
/// name so that neither side's names clash. `Ok(false)` when `ifname` is not in the container,
/// or is not the device (its alias, set by the move in, names another device or none). When
/// the host already has a link named `original`, the device goes back into the container as
/// `ifname` (up as it was) and the error says so: DEL can be retried once the name is free.
pub fn move_out<S: Netlink>(
    cont: &mut S,
    netns: &S::Ns,
    host: &mut S,
    host_ns: &S::Ns,
    ifname: &str,
    original: &str,
) -> Result<bool, HostDeviceError> {
    let Some(dev) = cont.find_link(ifname)? else {
        return Ok(false);
    };
    if dev.alias.as_deref() != Some(original) {
        return Ok(false);
    }
    cont.set_link_down(dev.index)
        .map_err(|source| HostDeviceError::SetDown {
            name: ifname.to_string(),
            source,
        })?;
    let tmp = temp_name(dev.index);
    // Undo: the device back as `ifname`, up as it was, so DEL can be retried.
    let back_in_container = |cont: &mut S| {
        if let Ok(Some(l)) = cont.find_link(&tmp) {
            let _ = cont.set_link_name(l.index, ifname);
        }
        if let Ok(Some(l)) = cont.find_link(ifname) {
            if dev.is_up() {
                let _ = cont.set_link_up(l.index);
            }
        }
    };
    if let Err(source) = cont.set_link_name(dev.index, &tmp) {
        back_in_container(cont);
        return Err(HostDeviceError::RenameToTemp {
            name: ifname.to_string(),
            temp: tmp,
            source,
        });
    }
    if let Err(source) = cont.move_link(dev.index, host_ns) {
        back_in_container(cont);
        return Err(HostDeviceError::MoveOut { temp: tmp, source });
    }
    let in_host = host
        .link_by_name(&tmp)
        .map_err(|source| HostDeviceError::FindOnHost {
            temp: tmp.clone(),
            source,
        })?;
    if let Err(source) = host.set_link_name(in_host.index, original) {
        if host.move_link(in_host.index, netns).is_ok() {
            back_in_container(cont);
        }
        return Err(HostDeviceError::RestoreName {
            name: tmp,
            original: original.to_string(),
            source,
        });
    }
    Ok(true)
}

/// A device back on the host without a move out of ours: under its original name (a failed
/// ADD put it back), or renamed (the kernel returns physical devices when their netns is
/// destroyed, under another name when their container name is taken) and then found by its
/// alias, the original name, and renamed back. `Ok(false)` when there is none.
pub fn recover<S: Netlink>(host: &mut S, original: &str) -> Result<bool, HostDeviceError> {
    let links = host.links()?;
    if links.iter().any(|l| l.name == original) {
        return Ok(true);
    }
    let Some(dev) = links
        .iter()
        .find(|l| l.alias.as_deref() == Some(original) && l.name != original)
    else {
        return Ok(false);
    };
    host.set_link_down(dev.index)?;
    host.set_link_name(dev.index, original)
        .map_err(|source| HostDeviceError::RestoreName {
            name: dev.name.clone(),
            original: original.to_string(),
            source,
        })?;
    Ok(true)
}
