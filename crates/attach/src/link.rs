//! The container link: created under a temporary name and renamed (a kernel quirk makes a
//! name clash in the creating namespace possible otherwise), found, deleted.

use libcni::error::CniError;
use libcni::result::Interface;
use netkit::{Kernel, Link, LiveKernel, Netlink, Netns, Socket};

use crate::error::AttachError;
use crate::errors::{kernel, kernel_ctx};

/// Attempts at a free temporary name.
const TEMP_NAME_ATTEMPTS: usize = 4;

/// A random `veth%08x` name, the reference's temporary and host-side link names.
pub fn random_veth_name() -> Result<String, CniError> {
    let mut b = [0u8; 4];
    // getrandom(2): one syscall, where opening /dev/urandom costs a path walk and two more.
    // SAFETY: the kernel writes at most `b.len()` bytes into our own buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        return Err(AttachError::RandomName(std::io::Error::last_os_error()).into());
    }
    Ok(format!("veth{:08x}", u32::from_ne_bytes(b)))
}

/// Creates a link with `create(cont, temporary name)` (which must make it appear in the netns
/// of `cont`, either through `cont` or from elsewhere), renames it to `ifname` there and
/// returns it. A failure after the creation deletes the link.
/// `kind` words the errors like the reference ("failed to create macvlan: ...").
pub fn create_renamed<S: Netlink>(
    cont: &mut S,
    ifname: &str,
    kind: &str,
    mut create: impl FnMut(&mut S, &str) -> netkit::Result<()>,
) -> Result<Link, CniError> {
    let mut attempt = 0;
    let tmp = loop {
        let tmp = random_veth_name()?;
        match create(cont, &tmp) {
            Ok(()) => break tmp,
            Err(e) if e.is_exists() && attempt + 1 < TEMP_NAME_ATTEMPTS => attempt += 1,
            Err(e) => return Err(kernel_ctx(e, format!("failed to create {kind}"))),
        }
    };
    // Until it is returned, the caller cannot undo the new link: every failure deletes it.
    let link = match cont.link_by_name(&tmp) {
        Ok(l) => l,
        Err(e) => {
            let _ = cont.delete_link_by_name(&tmp);
            return Err(kernel_ctx(e, format!("failed to find the new {kind}")));
        }
    };
    if let Err(e) = cont.set_link_name(link.index, ifname) {
        let _ = cont.delete_link(link.index);
        return Err(kernel_ctx(
            e,
            format!("failed to rename {kind} to {ifname:?}"),
        ));
    }
    cont.link_by_name(ifname).map_err(|e| {
        let _ = cont.delete_link(link.index);
        kernel_ctx(e, format!("failed to refetch {kind} {ifname:?}"))
    })
}

/// The result's entry for a container link.
pub fn container_interface(link: &Link, sandbox: &str) -> Interface {
    Interface {
        name: link.name.clone(),
        mac: link.mac_string(),
        sandbox: sandbox.to_string(),
        ..Default::default()
    }
}

/// Registers the deletion of the container link `ifname` as an undo step.
pub fn undo_delete(rollback: &mut crate::rollback::Rollback, netns: &Netns, ifname: &str) {
    let path = netns.path().display().to_string();
    undo_delete_with(&LiveKernel, rollback, &path, ifname);
}

/// [`undo_delete`] through `kernel`, the netns given by its path (reopened by the undo step).
pub fn undo_delete_with<K: Kernel>(
    kernel: &K,
    rollback: &mut crate::rollback::Rollback,
    netns_path: &str,
    ifname: &str,
) {
    let (kernel, path, name) = (kernel.clone(), netns_path.to_string(), ifname.to_string());
    rollback.push(format!("delete {ifname}"), move || {
        let ns = kernel.open_netns(&path).map_err(|e| e.to_string())?;
        kernel
            .socket_in(&ns)
            .and_then(|mut s| s.delete_link_by_name(&name))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
}

/// Registers the deletion of the host-side link `name` (a veth: its peer goes with it) as an
/// undo step.
pub fn undo_delete_host(rollback: &mut crate::rollback::Rollback, name: &str) {
    undo_delete_host_with(&LiveKernel, rollback, name);
}

/// [`undo_delete_host`] through `kernel`.
pub fn undo_delete_host_with<K: Kernel>(
    kernel: &K,
    rollback: &mut crate::rollback::Rollback,
    name: &str,
) {
    let (kernel, undo) = (kernel.clone(), name.to_string());
    rollback.push(format!("delete {name}"), move || {
        kernel
            .socket()
            .and_then(|mut s| s.delete_link_by_name(&undo))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
}

/// DEL of the container link: an empty CNI_NETNS, a netns that is gone or a link that is gone
/// are all fine.
pub fn delete_in_netns(netns_path: &str, ifname: &str) -> Result<(), CniError> {
    delete_in_netns_with(&LiveKernel, netns_path, ifname)
}

/// [`delete_in_netns`] through `kernel`.
pub fn delete_in_netns_with<K: Kernel>(
    kernel: &K,
    netns_path: &str,
    ifname: &str,
) -> Result<(), CniError> {
    if netns_path.is_empty() {
        return Ok(());
    }
    let ns = match kernel.open_netns(netns_path) {
        Ok(ns) => ns,
        Err(e) if e.is_netns_not_found() => return Ok(()),
        Err(e) => return Err(CniError::from(e)),
    };
    kernel
        .socket_in(&ns)
        .and_then(|mut s| s.delete_link_by_name(ifname))
        .map(|_| ())
        .map_err(CniError::from)
}

/// Opens the container netns of an ADD or CHECK ("failed to open netns ..." otherwise).
pub fn open_netns(path: &str) -> Result<(Netns, Socket), CniError> {
    open_netns_with(&LiveKernel, path)
}

/// [`open_netns`] through `kernel`.
pub fn open_netns_with<K: Kernel>(kernel: &K, path: &str) -> Result<(K::Ns, K::Socket), CniError> {
    let ns = kernel
        .open_netns(path)
        .map_err(|e| kernel_ctx(e, format!("failed to open netns {path:?}")))?;
    let sock = kernel.socket_in(&ns).map_err(CniError::from)?;
    Ok((ns, sock))
}

/// The parent of a macvlan, ipvlan or vlan link: `name`, or the interface of the default
/// route when `name` is empty, looked up through `sock` (the host's, or the container's for
/// `linkInContainer`).
pub fn master<S: Netlink>(sock: &mut S, name: &str) -> Result<Link, CniError> {
    if name.is_empty() {
        return sock
            .default_route_link()
            .map_err(kernel)?
            .ok_or_else(|| AttachError::NoDefaultRoute.into());
    }
    sock.link_by_name(name).map_err(|e| {
        if e.is_not_found() {
            // Go's netlink words a missing link "Link not found"; operators match on it.
            AttachError::MasterNotFound {
                name: name.to_string(),
            }
            .into()
        } else {
            kernel_ctx(e, format!("failed to lookup master {name:?}"))
        }
    })
}

/// A child link's MTU (as configured, possibly negative) must lie in [0, parent's MTU].
pub fn check_mtu(mtu: i64, master: &Link) -> Result<(), CniError> {
    crate::conf::mtu_within_master(mtu, master.mtu).map(|_| ())
}

/// The master of a child link (macvlan, ipvlan, vlan), looked up where it lives (the
/// container with `linkInContainer`), with the child's MTU checked against it.
pub fn master_checked<S: Netlink>(
    host: &mut S,
    cont: &mut S,
    in_container: bool,
    name: &str,
    mtu: i64,
) -> Result<Link, CniError> {
    let sock = if in_container { cont } else { host };
    let m = master(sock, name)?;
    check_mtu(mtu, &m)?;
    Ok(m)
}

/// STATUS of a child-link plugin: not available (code 50) when its master (or, unnamed, a
/// default route) is missing on the host. A master inside the container is ADD's to check.
pub fn master_status(plugin: &str, in_container: bool, name: &str) -> Result<(), CniError> {
    if in_container {
        return Ok(());
    }
    let mut host = Socket::new().map_err(kernel)?;
    master(&mut host, name).map(|_| ()).map_err(|cause| {
        AttachError::MasterUnavailable {
            plugin: plugin.to_string(),
            cause,
        }
        .into()
    })
}

/// DEL of a plugin whose only objects are the container link and an IPAM lease: both go (at
/// once), whatever is already gone; the first failure is reported.
pub fn del_with_ipam(
    args: &libcni::skel::CmdArgs,
    ipam_type: &str,
    plugin: &str,
) -> Result<(), CniError> {
    del_with_ipam_with(&LiveKernel, &crate::ipam::ExecIpam, args, ipam_type, plugin)
}

/// [`del_with_ipam`] through `kernel` and `ipam`.
pub fn del_with_ipam_with<K: Kernel, I: crate::ipam::Ipam>(
    kernel: &K,
    ipam: &I,
    args: &libcni::skel::CmdArgs,
    ipam_type: &str,
    plugin: &str,
) -> Result<(), CniError> {
    let (ipam, link) = ipam.call_alongside(args, ipam_type, "DEL", || {
        delete_in_netns_with(kernel, &args.netns, &args.ifname)
    });
    let mut failures = crate::errors::Failures::default();
    failures.note(link);
    failures.note(ipam);
    failures.finish(plugin)
}
