//! The original state of a moved device, kept in `<dataDir>/<containerID>_<ifname>.json` from
//! ADD to DEL: its name and alias, whether it was up, its addresses and the routes through it.
//! Moving a device into another netns drops its addresses and routes; DEL puts them back.
//! A backup of an earlier boot of the node is read as absent (the move it recorded was undone
//! by the reboot) and GC removes it.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use libcni::statefile;
use netkit::packet_route::address::{AddressFlags, AddressScope};
use netkit::packet_route::route::{RouteProtocol, RouteScope, RouteType};
use netkit::{AddressOptions, Family, Link, Netlink, Route};
use serde::{Deserialize, Serialize};

use crate::error::HostDeviceError;

/// Larger files are not ours.
const MAX_BACKUP_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub network: String,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRoute {
    pub dst: IpNetwork,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<IpAddr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
    pub table: u32,
    pub scope: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The device's name on the host.
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    pub up: bool,
    #[serde(default)]
    pub addresses: Vec<IpNetwork>,
    #[serde(default)]
    pub routes: Vec<SavedRoute>,
    pub owner: Owner,
}

pub fn path(data_dir: &str, container_id: &str, ifname: &str) -> PathBuf {
    Path::new(data_dir).join(format!("{container_id}_{ifname}.json"))
}

/// What a move would lose: global addresses (IPv6 ones only when permanent: SLAAC and
/// DHCPv6 ones come back by themselves) and the routes through the device that are neither
/// the kernel's nor learnt from router advertisements.
pub fn capture<S: Netlink>(
    sock: &mut S,
    dev: &Link,
    owner: Owner,
) -> Result<Backup, HostDeviceError> {
    let addresses = sock
        .addresses(Some(dev.index), Family::Any)?
        .into_iter()
        .filter(|a| a.scope == AddressScope::Universe)
        .filter(|a| a.address.is_ipv4() || a.flags.contains(AddressFlags::Permanent))
        .map(|a| a.address)
        .collect();
    let routes = sock
        .routes(Family::Any, None)?
        .into_iter()
        .filter(|r| r.oif == Some(dev.index) && r.table_id() != netkit::route::TABLE_LOCAL)
        .filter(|r| !matches!(r.protocol, Some(RouteProtocol::Kernel | RouteProtocol::Ra)))
        .filter(|r| matches!(r.kind, None | Some(RouteType::Unicast)))
        .filter(|r| !is_v6_link_local(&r.dst))
        .map(|r| SavedRoute {
            dst: r.dst_network(),
            gw: r.gateway,
            src: r.src,
            metric: r.priority,
            table: r.table_id(),
            scope: r.scope.map(u8::from).unwrap_or(0),
        })
        .collect();
    Ok(Backup {
        device: dev.name.clone(),
        alias: dev.alias.clone(),
        up: dev.is_up(),
        addresses,
        routes,
        owner,
    })
}

fn is_v6_link_local(n: &IpNetwork) -> bool {
    matches!(n.ip(), IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80)
}

pub fn save(file: &Path, backup: &Backup) -> Result<(), HostDeviceError> {
    let bytes = serde_json::to_vec(backup).map_err(|source| HostDeviceError::EncodeState {
        file: file.to_path_buf(),
        source,
    })?;
    statefile::write_atomic(file, &bytes).map_err(|source| HostDeviceError::SaveState {
        device: backup.device.clone(),
        file: file.to_path_buf(),
        source,
    })
}

/// The backup at `file`; `None` when there is none, it is of an earlier boot or it is not
/// one of ours.
pub fn load(file: &Path) -> Option<Backup> {
    let bytes = statefile::read_this_boot(file, MAX_BACKUP_BYTES).ok()??;
    serde_json::from_slice(&bytes).ok()
}

pub fn remove(file: &Path) -> Result<(), HostDeviceError> {
    statefile::remove_if_exists(file).map_err(|source| HostDeviceError::RemoveState {
        file: file.to_path_buf(),
        source,
    })
}

/// Puts back alias, addresses, up state and routes on the device now named `backup.device`.
/// Best effort: what the kernel refuses is reported on stderr, since the device itself is
/// back and a retried DEL could do no better.
pub fn restore<S: Netlink>(sock: &mut S, backup: &Backup) -> Result<(), HostDeviceError> {
    let dev = sock.link_by_name(&backup.device)?;
    let warn =
        |what: String, e: netkit::Error| eprintln!("host-device: could not restore {what}: {e}");
    match &backup.alias {
        Some(a) => {
            if let Err(e) = sock.set_link_alias(dev.index, a) {
                warn(format!("alias {a:?}"), e);
            }
        }
        // The move set an alias (the reference's record of the name): clear it again.
        None => {
            if let Err(e) = sock.set_link_alias(dev.index, "") {
                warn("the empty alias".into(), e);
            }
        }
    }
    for addr in &backup.addresses {
        match sock.add_address(dev.index, *addr, &AddressOptions::default()) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => warn(format!("address {addr}"), e),
        }
    }
    if backup.up {
        if let Err(e) = sock.set_link_up(dev.index) {
            warn("up state".into(), e);
        }
    }
    // Link-scoped routes first: gateways of the others may depend on them.
    let mut routes = backup.routes.clone();
    routes.sort_by_key(|r| std::cmp::Reverse(r.scope));
    for r in &routes {
        let mut route = Route::new(r.dst).dev(dev.index);
        route.gateway = r.gw;
        route.src = r.src;
        route.priority = r.metric;
        route.table = (r.table != netkit::route::TABLE_MAIN).then_some(r.table);
        route.scope = (r.scope != 0).then(|| RouteScope::from(r.scope));
        match sock.add_route(&route) {
            Ok(()) => {}
            Err(e) if e.is_exists() => {}
            Err(e) => warn(format!("route {}", r.dst), e),
        }
    }
    Ok(())
}

/// The backups in `data_dir` of earlier boots, of any network: the moves they recorded were
/// undone by the reboot, so removing them is all GC has to do (an unreadable directory, as in
/// [`stale`], has none).
pub fn earlier_boots(data_dir: &str) -> Vec<PathBuf> {
    statefile::earlier_boots(Path::new(data_dir), |n| n.ends_with(".json")).unwrap_or_default()
}

/// The backups in `data_dir` of `network` whose attachment is not in `valid`, stored under
/// their owner's own file name (anything else is left alone).
pub fn stale(data_dir: &str, network: &str, valid: &[(String, String)]) -> Vec<(PathBuf, Backup)> {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| load(&p).map(|b| (p, b)))
        .filter(|(p, b)| {
            b.owner.network == network
                && *p == path(data_dir, &b.owner.container_id, &b.owner.ifname)
                && !valid
                    .iter()
                    .any(|(c, i)| *c == b.owner.container_id && *i == b.owner.ifname)
        })
        .collect()
}
